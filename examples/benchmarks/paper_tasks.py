"""The tasks MARL papers report (LBF, RWARE, Overcooked, Hanabi) with the shipped configs: team returns per seed.

One ``marl-ppo train CONFIG train.seeds=[...]`` child process a task (the seeds stacked in one process, one
thread), at ``--frames`` per seed. Per seed: the team return (the sum over every agent of its episode return,
as EPyMARL reports LBF and RWARE; Overcooked's and Hanabi's groups all get the team's reward, so their team
return is one group's) of the final evaluation and the mean over the last 10 % of the training batches, and
the wall time of the process. Appends one CSV row a seed to ``--csv`` and prints a markdown table.

    .venv/bin/python examples/benchmarks/paper_tasks.py lbf_8x8_2p_2f_coop --seeds 0,1,2 --frames 1000000 \\
        --out /tmp/paper --csv /tmp/paper/lbf8.csv
    .venv/bin/python examples/benchmarks/paper_tasks.py hanabi_small --quick     # smoke: a minute
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
QUICK = ["train.total_frames=2000"]
FIELDS = ["task", "seed", "frames", "eval_team_return", "train_team_return_last10pct", "wall_s"]


def _team(values: dict[str, float], agents: dict[str, int], shared: bool) -> float:
    """The team return from each group's per-agent mean: their sum over agents, or one group's (a shared reward)."""
    if shared:
        return next(iter(values.values()))
    return sum(values[g] * agents[g] for g in values)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("config", help="a shipped config (lbf_8x8_2p_2f_coop, rware_tiny_2ag, hanabi_small, ...)")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--frames", type=int, default=1_000_000, help="train.total_frames per seed")
    p.add_argument("--out", type=Path, default=Path("/tmp/paper_tasks"))
    p.add_argument("--csv", type=Path, help="append one row a seed here")
    p.add_argument("--quick", action="store_true", help="2 000 frames: does it run")
    p.add_argument("overrides", nargs="*", help="more key=value overrides")
    args = p.parse_intermixed_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    root = args.out / args.config
    extra = QUICK if args.quick else [f"train.total_frames={args.frames}"]
    cmd = [sys.executable, "-m", "marl_ppo.cli", "train", args.config, f"train.seeds={seeds}", "train.num_threads=1",
           f"log.root={root}", f"log.name={args.config}", "log.progress=false", "log.plot=false", *extra,
           *args.overrides]  # fmt: skip
    t0 = time.perf_counter()
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t0

    from marl_ppo.config import from_yaml
    from marl_ppo.envs.kinds import env_kind
    from marl_ppo.run.build import build
    from marl_ppo.run.logger import read_scalars

    rows = []
    for s in seeds:
        run = root / f"{args.config}-seed{s}"
        cfg = from_yaml((run / "config.yaml").read_text())
        parts = build(cfg)
        agents = {g: spec.n_agents for g, spec in parts.groups.items()}
        parts.env.close()
        shared = env_kind(cfg.env.kind).team_reward  # every group gets the team's reward
        summary = json.loads((run / "summary.json").read_text())
        final = {g: summary[f"eval/{g}/episode_reward"] for g in agents if f"eval/{g}/episode_reward" in summary}
        scalars = read_scalars(run)
        curves = {g: [v for _, v in scalars.get(f"collect/{g}/episode_reward", [])] for g in agents}
        last = {g: statistics.fmean(c[-max(len(c) // 10, 1) :]) for g, c in curves.items() if c}
        rows.append({
            "task": args.config, "seed": s, "frames": summary["frames"],
            "eval_team_return": round(_team(final, agents, shared), 4) if final else "",
            "train_team_return_last10pct": round(_team(last, agents, shared), 4) if last else "",
            "wall_s": round(wall),
        })  # fmt: skip
    if args.csv:
        new = not args.csv.exists()
        with args.csv.open("a", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=FIELDS)
            if new:
                writer.writeheader()
            writer.writerows(rows)
    print("| task | seed | frames | eval team return | training team return (last 10 %) | wall s |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['task']} | {r['seed']} | {r['frames']} | {r['eval_team_return']} | "
              f"{r['train_team_return_last10pct']} | {r['wall_s']} |")  # fmt: skip


if __name__ == "__main__":
    main()
