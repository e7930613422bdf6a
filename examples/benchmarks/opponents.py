"""Opponents (issue 23): self-play on the real games, evaluated against a random player in each seat.

Each task trains one run per seed through the command line (``marl-ppo train <config> <overrides>``,
one child process each, one thread), then ``marl-ppo eval RUN --opponent random --episodes N``
plays the trained policy in every seat against a uniformly random player. It prints a markdown
table of win / draw / loss rates per seat (mean over seeds) with the frames and minutes a run took.

    .venv/bin/python examples/benchmarks/opponents.py                                  # tictactoe, 2 seeds
    .venv/bin/python examples/benchmarks/opponents.py --tasks tictactoe,connect_four --seeds 3
    .venv/bin/python examples/benchmarks/opponents.py --task-overrides "opponents.player_2=self"
    .venv/bin/python examples/benchmarks/opponents.py --seeds 1 --first-seed 2 --out runs/b/seed2  # one seed of a split
    .venv/bin/python examples/benchmarks/opponents.py --quick                          # smoke: a minute

Tasks are shipped config names; ``--frames`` overrides their ``train.total_frames``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(args: list[str]) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "marl_ppo.cli", *args]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{out.stderr[-3000:]}")
    return out


def train_and_play(task: str, seed: int, args: argparse.Namespace) -> dict:
    run_dir = Path(args.out) / f"{task}-seed{seed}"
    overrides = [
        f"train.seed={seed}",
        "train.num_threads=1",
        "log.progress=false",
        f"log.root={run_dir.parent}",
        f"log.name={run_dir.name}",
        *args.task_overrides.split(),
    ]
    if args.frames:
        overrides.append(f"train.total_frames={args.frames}")
    if args.quick:
        overrides += ["train.frames_per_batch=400", "train.minibatch_size=200", "log.eval_every=0", "log.plot=false"]
    t0 = time.perf_counter()
    if not (run_dir / "summary.json").exists():
        _run(["train", task, *overrides])
    minutes = (time.perf_counter() - t0) / 60
    played = _run(["eval", str(run_dir), "--opponent", "random", "--episodes", str(args.episodes)])
    matches = json.loads(played.stdout)["matches"]
    frames = json.loads((run_dir / "summary.json").read_text())["frames"]
    return {"task": task, "seed": seed, "frames": frames, "minutes": minutes, "matches": matches}


def table(results: list[dict]) -> str:
    lines = [
        "| task | seat | win | draw | loss | seeds | frames | min/run |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for task in dict.fromkeys(r["task"] for r in results):
        runs = [r for r in results if r["task"] == task]
        for seat in dict.fromkeys(m["seat"] for m in runs[0]["matches"]):
            rates = {
                k: [m[f"{k}_rate"] for r in runs for m in r["matches"] if m["seat"] == seat]
                for k in ("win", "draw", "loss")
            }
            cells = " | ".join(f"{statistics.mean(v):.3f}" for v in rates.values())
            minutes = statistics.mean(r["minutes"] for r in runs)
            lines.append(f"| {task} | {seat} | {cells} | {len(runs)} | {runs[0]['frames']} | {minutes:.1f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tasks", default="tictactoe", help="shipped config names, comma-separated")
    p.add_argument("--seeds", type=int, default=2)
    p.add_argument(
        "--first-seed", type=int, default=0, help="seeds FIRST .. FIRST+SEEDS-1 (to split seeds over processes)"
    )
    p.add_argument("--frames", type=int, help="train.total_frames of every run (default: the config's)")
    p.add_argument("--episodes", type=int, default=500, help="evaluation episodes per seat against random")
    p.add_argument("--task-overrides", default="", help="key=value overrides for every run, space-separated")
    p.add_argument("--out", default="runs/benchmarks/opponents")
    p.add_argument("--quick", action="store_true", help="a smoke run: 2 000 frames, 1 seed, 50 episodes")
    args = p.parse_args(argv)
    if args.quick:
        args.seeds, args.frames, args.episodes = 1, args.frames or 2000, 50
    results = [
        train_and_play(t, s, args)
        for t in args.tasks.split(",")
        for s in range(args.first_seed, args.first_seed + args.seeds)
    ]
    print(table(results))
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
