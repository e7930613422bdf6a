"""HAPPO against MAPPO at equal frames on a task with heterogeneous groups, several seeds each.

Each (algorithm, seed) is one ``marl-ppo train`` child process (``model.share_params=false``, as HARL
runs HAPPO), one after another; the script prints each algorithm's final evaluation return per
group (mean, sd over seeds) and its training return (sampled actions, the mean of the last three
collected batches), Welch's t-test between the two on each, and the wall time per run.

    .venv/bin/python examples/benchmarks/happo.py --seeds 0,1,2 --frames 120000
    .venv/bin/python examples/benchmarks/happo.py --task simple_tag --seeds 0,1,2
    .venv/bin/python examples/benchmarks/happo.py --quick                       # smoke: a minute

Default task: VMAS ``simple_speaker_listener`` (a ``speaker`` who sees the goal and a ``listener``
who moves, two groups, one shared reward).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ALGORITHMS = ("mappo", "happo")


def _run(task: str, algorithm: str, seed: int, frames: int, extra: list[str], root: Path) -> tuple[dict, float]:
    name = f"{algorithm}-{seed}"
    cmd = [
        sys.executable, "-m", "marl_ppo.cli", "train", f"env.scenario={task}", f"loss.algorithm={algorithm}",
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
    parser.add_argument("--task", default="simple_speaker_listener")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--frames", type=int, default=120_000)
    parser.add_argument("--quick", action="store_true", help="two seeds, 12 000 frames")
    parser.add_argument("--set", nargs="*", default=[], help="more overrides for every run")
    args = parser.parse_args()
    seeds = [0, 1] if args.quick else [int(s) for s in args.seeds.split(",")]
    frames = 12_000 if args.quick else args.frames
    results: dict[str, list[dict]] = {a: [] for a in ALGORITHMS}
    times: dict[str, list[float]] = {a: [] for a in ALGORITHMS}
    with tempfile.TemporaryDirectory() as tmp:
        for seed in seeds:
            for algorithm in ALGORITHMS:
                summary, seconds = _run(args.task, algorithm, seed, frames, args.set, Path(tmp))
                results[algorithm].append(summary)
                times[algorithm].append(seconds)
    groups = sorted(k.split("/")[1] for k in results["mappo"][0] if k.startswith("eval/") and k.endswith("reward"))
    print(f"{args.task}, {frames} frames, seeds {seeds}, model.share_params=false")
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
