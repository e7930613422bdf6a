"""Heterogeneous groups with a shared team reward: VMAS ``simple_tag`` through the config API.

Two groups, each with its own PPO loss: ``adversary`` (3 chasers) and ``agent`` (1 runner). The
reward table makes the sharing explicit:

* ``adversary`` <- 1.0 x mean(adversary reward): one team reward for all chasers;
* ``agent``     <- 1.0 x own reward - 1.0 x mean(adversary reward): a zero-sum touch, the runner
  also pays for what the chasers earn.

The table is written with the Python helpers (``own``/``team``), validated against the env when the
trainer is built, and stored in the config as its dict form (``RewardTable.to_dict``), so the run
directory's ``config.yaml`` and ``reward_table.txt`` record it. The script prints the resolved
table and the per-group returns (first vs last collected batch, and the final deterministic
evaluation).

Run::

    .venv/bin/python examples/simple_tag_team_reward.py              # ~1 min on 2 CPU cores
    .venv/bin/python examples/simple_tag_team_reward.py --tiny       # seconds (smoke test)
    .venv/bin/python examples/simple_tag_team_reward.py --frames 200000 --num-envs 60 --out runs/
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from marl_ppo import RewardTable, own, team
from marl_ppo.config import load_config
from marl_ppo.run.logger import read_scalars
from marl_ppo.run.trainer import Trainer

ROOT = Path(__file__).resolve().parents[1]


def reward_table(zero_sum_weight: float) -> RewardTable:
    return RewardTable(
        {
            "adversary": [team(["adversary"], reduce="mean", weight=1.0)],
            "agent": [own(1.0), team(["adversary"], reduce="mean", weight=-zero_sum_weight)],
        },
        done={"adversary": "root", "agent": "root"},
    )


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tiny", action="store_true", help="a few seconds: smoke-test sizes")
    parser.add_argument("--frames", type=int, default=96_000, help="total env steps")
    parser.add_argument("--num-envs", type=int, default=32, help="vectorized VMAS envs")
    parser.add_argument("--max-steps", type=int, default=50, help="episode length")
    parser.add_argument(
        "--zero-sum-weight", type=float, default=1.0, help="how much of the adversaries' mean reward the agent pays"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    parser.add_argument("--out", default="runs", help="parent folder of the run directory")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    if args.tiny:
        sizes = [
            "env.num_envs=4",
            "env.max_steps=10",
            "train.frames_per_batch=40",
            "train.total_frames=80",
            "train.num_epochs=1",
            "train.minibatch_size=40",
            "model.hidden=[16]",
            "log.eval_episodes=2",
        ]
    else:
        fpb = args.num_envs * args.max_steps
        sizes = [
            f"env.num_envs={args.num_envs}",
            f"env.max_steps={args.max_steps}",
            f"train.frames_per_batch={fpb}",
            f"train.total_frames={args.frames}",
            "train.num_epochs=4",
            f"train.minibatch_size={min(400, fpb)}",
            "train.lr=1e-3",
            "model.hidden=[64,64]",
            "log.eval_episodes=16",
        ]
    cfg = load_config(
        ROOT / "configs" / "simple_tag.yaml",
        overrides=sizes
        + [
            f"train.seed={args.seed}",
            "log.eval_every=0",
            "log.checkpoint_every=0",
            "log.progress=false",
            f"log.root={args.out}",
            "log.name=simple_tag-team-reward",
        ],
    )
    # The config's reward table is the dict form of the Python one (what configs/*.yaml hold).
    cfg.reward_table = reward_table(args.zero_sum_weight).to_dict()

    trainer = Trainer(cfg)  # a new directory under --out: a taken name gets a -2, -3... suffix
    print(trainer.parts.reward_table)  # the resolved table: agents per group, terms, done sources
    print()
    print(
        "groups:",
        {g: s.n_agents for g, s in trainer.parts.groups.items()},
        f"| {cfg.train.iterations} iterations of {cfg.train.frames_per_batch} frames",
    )
    summary = trainer.fit()

    scalars = read_scalars(trainer.run_dir)
    print("\nper-group returns (raw env reward, mean over the group's agents)")
    print(f"  {'group':<10} {'first batch':>12} {'last batch':>12} {'final eval':>12}")
    for g in trainer.parts.groups:
        curve = [v for _, v in scalars.get(f"collect/{g}/episode_reward", [])]
        first, last = (f"{curve[0]:12.3f}", f"{curve[-1]:12.3f}") if curve else ("n/a", "n/a")
        print(f"  {g:<10} {first:>12} {last:>12} {summary[f'eval/{g}/episode_reward']:12.3f}")
    print(f"\nrun directory: {trainer.run_dir}")
    return summary


if __name__ == "__main__":
    main()
