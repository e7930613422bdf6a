"""Butterfly image games learned from what they draw: training and evaluation returns of several seeds.

Each seed is one ``marl-ppo train CONFIG`` child process (``--jobs`` at a time, one thread each), with the
overrides given after ``--``. Then each run's last checkpoint is evaluated twice with ``marl-ppo eval``
(``--episodes``, seeded): deterministic (each agent's mean or most likely action) and sampled (as in
training). Per seed: the mean training return of the first and last 5 batches (the logged episodes of
``collect/<group>/episode_reward``), the two evaluations and the wall time. Writes ``--csv`` and prints a
markdown table with the mean over seeds.

    .venv/bin/python examples/benchmarks/image_games.py pistonball --seeds 0,1,2 --jobs 2 \\
        -- "env.kwargs={n_pistons: 5}" train.total_frames=100000
    .venv/bin/python examples/benchmarks/image_games.py cooperative_pong --seeds 0,1,2 --jobs 2
    .venv/bin/python examples/benchmarks/image_games.py pistonball --quick   # smoke: a minute
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
QUICK = ["env.max_steps=20", "train.total_frames=160", "train.frames_per_batch=80", "train.minibatch_size=40"]


def _train(config: str, seeds: list[int], jobs: int, root: Path, extra: list[str]) -> dict[int, tuple[Path, float]]:
    """One child process a seed, ``jobs`` at a time; each seed's run directory and wall seconds."""
    running, done, pending = {}, {}, list(seeds)
    while pending or running:
        while pending and len(running) < jobs:
            s = pending.pop(0)
            out = root / f"seed{s}"
            finished = sorted(out.glob("*/summary.json"))
            if finished:  # a run of an earlier call (--out): evaluated again, not retrained
                run = finished[-1].parent  # its wall time: from the config it wrote first to its summary
                done[s] = (run, finished[-1].stat().st_mtime - (run / "config.yaml").stat().st_mtime)
                continue
            cmd = [sys.executable, "-m", "marl_ppo.cli", "train", config, f"train.seed={s}", "train.num_threads=1"]
            cmd += [f"log.root={out}", "log.progress=false", "log.plot=false", *extra]
            running[s] = (subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL), time.perf_counter(), out)
        for s, (proc, t0, out) in list(running.items()):
            if proc.poll() is not None:
                if proc.returncode != 0:
                    raise SystemExit(f"seed {s} failed (exit {proc.returncode}); see {out}")
                (run,) = out.iterdir()
                done[s] = (run, time.perf_counter() - t0)
                del running[s]
        time.sleep(1)
    return done


def _batches(run: Path) -> list[float]:
    """The training return of each batch: the mean over groups of ``collect/<group>/episode_reward``."""
    per_group = [
        [float(row[1]) for row in csv.reader(f.open())]
        for f in sorted((run / "logs" / "scalars" / "collect").glob("*/episode_reward.csv"))
    ]
    return [statistics.fmean(values) for values in zip(*per_group)]


def _evaluate(run: Path, episodes: int, sample: bool) -> float:
    cmd = [sys.executable, "-m", "marl_ppo.cli", "eval", str(run), "--episodes", str(episodes)]
    out = subprocess.run([*cmd, *(["--sample"] if sample else [])], cwd=ROOT, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(out.stderr[-2000:])
    returns = json.loads(out.stdout)["episode_reward"]
    return statistics.fmean(returns.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("config", help="a shipped config (pistonball, cooperative_pong) or a YAML file")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--episodes", type=int, default=8, help="evaluation episodes, each way")
    parser.add_argument("--csv", type=Path, default=None, help="write one row a seed here")
    parser.add_argument(
        "--out", type=Path, default=None, help="keep the runs here (default: a temporary folder); runs there are reused"
    )
    parser.add_argument("--quick", action="store_true")
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    args, overrides = parser.parse_args(argv[:cut]), argv[cut + 1 :]  # config overrides for every seed, after --
    seeds = [int(s) for s in args.seeds.split(",")]
    extra = [*QUICK, *overrides] if args.quick else overrides
    episodes = 1 if args.quick else args.episodes
    with tempfile.TemporaryDirectory() as tmp:
        root = args.out or Path(tmp)
        runs = _train(args.config, seeds, args.jobs, root, extra)
        rows = []
        for s in seeds:
            run, wall = runs[s]
            batches = _batches(run)
            first, last = statistics.fmean(batches[:5]), statistics.fmean(batches[-5:])
            det, sampled = _evaluate(run, episodes, sample=False), _evaluate(run, episodes, sample=True)
            rows.append({"seed": s, "train_first5": first, "train_last5": last, "eval_deterministic": det,
                         "eval_sampled": sampled, "batches": len(batches), "seconds": round(wall)})  # fmt: skip
    print(f"{args.config} {' '.join(extra)}: {len(seeds)} seeds, evaluations of {episodes} episodes")
    keys = ["train_first5", "train_last5", "eval_deterministic", "eval_sampled"]
    print("| seed | training, first 5 batches | training, last 5 batches | eval, deterministic | eval, sampled | s |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['seed']} | " + " | ".join(f"{r[k]:.1f}" for k in keys) + f" | {r['seconds']} |")
    print("| mean | " + " | ".join(f"{statistics.fmean(r[k] for r in rows):.1f}" for k in keys) + " | |")
    if args.csv is not None:
        with args.csv.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)


if __name__ == "__main__":
    main()
