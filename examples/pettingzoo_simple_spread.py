"""PettingZoo MPE ``simple_spread_v3`` (from ``mpe2``) trained from its config file.

``configs/simple_spread.yaml`` holds the whole run: the PettingZoo env (3 agents in one group
``agent``, continuous actions, several env copies stepped in one process), MAPPO, and a reward
table that trains each agent on its own reward with the group's own done (PettingZoo gives
per-agent dones, unlike VMAS). This script loads that file, applies size overrides the same way
the CLI does (``key=value`` strings; ``--set`` passes more of them), trains, and prints the
resolved config's env section, the reward table and the return curve.

Run::

    .venv/bin/python examples/pettingzoo_simple_spread.py              # ~2 min on 2 CPU cores (about 450 frames/s)
    .venv/bin/python examples/pettingzoo_simple_spread.py --tiny       # seconds (smoke test)
    .venv/bin/python examples/pettingzoo_simple_spread.py --frames 100000 --set train.lr=3e-4 loss.gamma=0.99
    # the same run from the command line:  marl-ppo train configs/simple_spread.yaml train.total_frames=48000
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from marl_ppo.config import load_config
from marl_ppo.run.logger import read_scalars
from marl_ppo.run.trainer import Trainer

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tiny", action="store_true", help="a few seconds: smoke-test sizes")
    parser.add_argument("--frames", type=int, default=48_000, help="total env steps")
    parser.add_argument("--num-envs", type=int, default=8, help="PettingZoo env copies")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="more config overrides")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    parser.add_argument("--out", default="runs", help="parent folder of the run directory")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    if args.tiny:
        sizes = [
            "env.num_envs=2",
            "env.max_steps=5",
            "train.frames_per_batch=20",
            "train.total_frames=40",
            "train.num_epochs=1",
            "train.minibatch_size=10",
            "model.hidden=[16]",
            "log.eval_episodes=2",
        ]
    else:
        sizes = [
            f"env.num_envs={args.num_envs}",
            f"train.total_frames={args.frames}",
            "train.num_epochs=4",
            "train.lr=1e-3",
            "loss.gamma=0.95",
            "model.hidden=[64,64]",
            "log.eval_episodes=8",
        ]  # frames_per_batch 2000, minibatch 250: the file's
    cfg = load_config(
        ROOT / "configs" / "simple_spread.yaml",
        overrides=sizes
        + [
            f"train.seed={args.seed}",
            "log.eval_every=0",
            "log.checkpoint_every=0",
            "log.progress=false",
            f"log.root={args.out}",
        ]
        + list(args.set),
    )
    print(
        f"env: {cfg.env.kind} {cfg.env.scenario} x{cfg.env.num_envs} (max_steps {cfg.env.max_steps}, "
        f"kwargs {dict(cfg.env.kwargs)}), algorithm {cfg.loss.algorithm}"
    )
    trainer = Trainer(cfg)  # a new directory under --out: a taken name gets a -2, -3... suffix
    print("groups:", {g: list(s.agents) for g, s in trainer.parts.groups.items()})
    print(trainer.parts.reward_table)
    print(f"{cfg.train.iterations} iterations of {cfg.train.frames_per_batch} frames")
    summary = trainer.fit()

    scalars = read_scalars(trainer.run_dir)
    for g in trainer.parts.groups:
        curve = [v for _, v in scalars.get(f"collect/{g}/episode_reward", [])]
        if curve:
            k = max(1, len(curve) // 5)
            print(
                f"{g}: mean episode return, first {k} batches {sum(curve[:k]) / k:.3f} -> "
                f"last {k} batches {sum(curve[-k:]) / k:.3f}"
            )
        print(f"{g}: final deterministic evaluation {summary[f'eval/{g}/episode_reward']:.3f}")
    print(f"run directory: {trainer.run_dir}")
    return summary


if __name__ == "__main__":
    main()
