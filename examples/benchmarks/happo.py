"""HAPPO against MAPPO at equal frames on a task with heterogeneous groups, several seeds each.

Each (algorithm, seed) is one ``marl-ppo train`` child process (``model.share_params=false``, as HARL
runs HAPPO), one after another; the script prints each algorithm's final evaluation return per
group (mean, sd over seeds) and its training return (sampled actions, the mean of the last three
collected batches), Welch's t-test between the two on each, and the wall time per run.

    .venv/bin/python examples/benchmarks/happo.py --seeds 0,1,2 --frames 120000
    .venv/bin/python examples/benchmarks/happo.py --task simple_tag --seeds 0,1,2
    .venv/bin/python examples/benchmarks/happo.py --quick                       # smoke: a minute
    .venv/bin/python examples/benchmarks/happo.py --config halfcheetah_2x3_mappo --seeds 0,1,2,3,4 \
        --frames 200000 --jobs 2 --out runs/happo-halfcheetah                  # MaMuJoCo

Default task: VMAS ``simple_speaker_listener`` (a ``speaker`` who sees the goal and a ``listener``
who moves, two groups, one shared reward). ``--config`` starts every run from a shipped config (or a
YAML file) instead of the default one; ``--task`` then sets its ``env.scenario`` only when given.
``--jobs`` children run at a time (one torch thread each); ``--out`` keeps the run directories and
writes every run's figures to ``happo_results.json`` there.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ALGORITHMS = ("mappo", "happo")


def _run(args, algorithm: str, seed: int, frames: int, root: Path) -> tuple[dict, float]:
    name, extra = f"{algorithm}-{seed}", args.set
    config = [args.config] if args.config else []
    task = [f"env.scenario={args.task}"] if args.task or not args.config else []
    cmd = [
        sys.executable, "-m", "marl_ppo.cli", "train", *config, *task, f"loss.algorithm={algorithm}",
        f"train.seed={seed}", f"train.total_frames={frames}", "model.share_params=false", "train.num_threads=1",
        "log.progress=false", "log.plot=false", f"log.root={root}", f"log.name={name}", *extra,
    ]  # fmt: skip
    start = time.perf_counter()
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"{name} failed:\n{out.stderr[-3000:]}")
    summary = json.loads((root / name / "summary.json").read_text())
    for csv in (root / name / "logs" / "scalars" / "collect").glob("*/episode_reward.csv"):
        last = [float(line.split(",")[1]) for line in csv.read_text().splitlines()[-3:]]
        summary[f"collect/{csv.parent.name}/episode_reward"] = sum(last) / len(last)  # the last 3 batches
    return summary, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", help="env.scenario (default: simple_speaker_listener without --config)")
    parser.add_argument("--config", help="a shipped config or YAML file every run starts from")
    parser.add_argument("--jobs", type=int, default=1, help="children at a time")
    parser.add_argument("--out", help="keep the run directories here and write happo_results.json")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--frames", type=int, default=120_000)
    parser.add_argument("--quick", action="store_true", help="two seeds, 12 000 frames")
    parser.add_argument("--set", nargs="*", default=[], help="more overrides for every run")
    args = parser.parse_args()
    if not args.config and not args.task:
        args.task = "simple_speaker_listener"
    seeds = [0, 1] if args.quick else [int(s) for s in args.seeds.split(",")]
    frames = 12_000 if args.quick else args.frames
    results: dict[str, list[dict]] = {a: [] for a in ALGORITHMS}
    times: dict[str, list[float]] = {a: [] for a in ALGORITHMS}
    runs = [(algorithm, seed) for seed in seeds for algorithm in ALGORITHMS]
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(args.jobs) as pool:
        root = Path(args.out or tmp)
        done = list(pool.map(lambda run: _run(args, run[0], run[1], frames, root), runs))
    for (algorithm, _), (summary, seconds) in zip(runs, done):
        results[algorithm].append(summary)
        times[algorithm].append(seconds)
    if args.out:
        per_run = [{"algorithm": a, "seed": s, "seconds": t, **summary} for (a, s), (summary, t) in zip(runs, done)]
        (root / "happo_results.json").write_text(json.dumps({"frames": frames, "runs": per_run}, indent=1))
    groups = sorted(k.split("/")[1] for k in results["mappo"][0] if k.startswith("eval/") and k.endswith("reward"))
    print(
        f"{args.config or 'default config'}, {args.task or 'its scenario'}, {frames} frames, seeds {seeds}, "
        f"model.share_params=false, {args.jobs} run(s) at a time"
    )
    columns = [f"{kind}/{g}/episode_reward" for g in groups for kind in ("eval", "collect")]
    print(
        "| algorithm | "
        + " | ".join(f"{c.split('/')[0]} {c.split('/')[1]} (mean ± sd)" for c in columns)
        + " | s/run |"
    )
    print("|---|" + "---|" * (len(columns) + 1))
    for algorithm in ALGORITHMS:
        cells = []
        for column in columns:
            values = [s[column] for s in results[algorithm]]
            sd = statistics.stdev(values) if len(values) > 1 else 0.0
            cells.append(f"{statistics.mean(values):.1f} ± {sd:.1f}")
        print(f"| {algorithm} | " + " | ".join(cells) + f" | {statistics.mean(times[algorithm]):.0f} |")
    if len(seeds) > 1:
        from scipy.stats import ttest_ind

        for column in columns:
            a, b = ([s[column] for s in results[x]] for x in ("happo", "mappo"))
            test = ttest_ind(a, b, equal_var=False)
            print(
                f"{column}: happo - mappo = {statistics.mean(a) - statistics.mean(b):+.1f}, Welch p = {test.pvalue:.3f}"
            )


if __name__ == "__main__":
    main()
