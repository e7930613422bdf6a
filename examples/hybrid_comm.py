"""Hybrid move + comm actions on VMAS ``simple_reference``, with one entropy coefficient per head.

Each of the two agents must reach a landmark that only the *other* agent knows, so they have to
talk. With ``env.comm=true`` the comm adapter exposes each agent's action as a composite
``{move: Bounded box (2), comm: Categorical(10)}``: a tanh-normal head and a categorical head whose
log-probs stay separate; the PPO ratio uses their sum per agent. ``loss.head_entropy_coeff`` gives
each head its own entropy bonus by short name (here ``move`` and ``comm``), and the linear
entropy schedule decays both. The script prints, from the run's logged metrics, each head's
entropy, entropy coefficient and approximate KL at the first and last iteration, and the return.

Run::

    .venv/bin/python examples/hybrid_comm.py                           # ~30 s on 2 CPU cores
    .venv/bin/python examples/hybrid_comm.py --tiny                    # seconds (smoke test)
    .venv/bin/python examples/hybrid_comm.py --comm-entropy 0.05 --move-entropy 0.0 --frames 200000
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
    parser.add_argument("--frames", type=int, default=96_000, help="total env steps")
    parser.add_argument("--num-envs", type=int, default=32, help="vectorized VMAS envs")
    parser.add_argument("--max-steps", type=int, default=50, help="episode length")
    parser.add_argument("--move-entropy", type=float, default=0.0, help="entropy coefficient of the move head")
    parser.add_argument("--comm-entropy", type=float, default=0.02, help="entropy coefficient of the comm head")
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
            "loss.gamma=0.9",
            "model.hidden=[64,64]",
            "log.eval_episodes=16",
        ]
    cfg = load_config(
        ROOT / "configs" / "simple_reference.yaml",
        overrides=sizes
        + [
            "env.comm=true",
            f"loss.head_entropy_coeff={{move: {args.move_entropy}, comm: {args.comm_entropy}}}",
            f"train.seed={args.seed}",
            "log.eval_every=0",
            "log.checkpoint_every=0",
            "log.progress=false",
            f"log.root={args.out}",
            "log.name=simple_reference-hybrid-comm",
        ],
    )
    trainer = Trainer(cfg)  # a new directory under --out: a taken name gets a -2, -3... suffix
    for g, spec in trainer.parts.groups.items():
        heads = trainer.parts.router.heads[g]
        print(
            f"group {g!r}: {spec.n_agents} agents, action heads "
            + ", ".join(f"{h.label} ({h.dist_class.__name__})" for h in heads)
        )
    print(trainer.parts.reward_table)
    print(
        f"{cfg.train.iterations} iterations of {cfg.train.frames_per_batch} frames; "
        f"head entropy coefficients {dict(cfg.loss.head_entropy_coeff)} ({cfg.loss.entropy_schedule} schedule)"
    )
    summary = trainer.fit()

    # Per-head metrics are logged as train/<group>/<head>/<name> (see docs/metrics.md).
    scalars = read_scalars(trainer.run_dir)
    print("\nper-head metrics from the logs (first -> last iteration)")
    for g in trainer.parts.groups:
        for head in trainer.parts.router.heads[g]:
            for name in ("entropy", "entropy_coeff", "kl_approx"):
                key = f"train/{g}/{head.label}/{name}"
                curve = [v for _, v in scalars[key]]
                print(f"  {key:<32} {curve[0]:9.4f} -> {curve[-1]:9.4f}")
    for g in trainer.parts.groups:
        curve = [v for _, v in scalars.get(f"collect/{g}/episode_reward", [])]
        if curve:
            print(f"  collect/{g}/episode_reward       {curve[0]:9.3f} -> {curve[-1]:9.3f}")
        print(f"  eval/{g}/episode_reward (final)  {summary[f'eval/{g}/episode_reward']:9.3f}")
    print(f"\nrun directory: {trainer.run_dir}")
    return summary


if __name__ == "__main__":
    main()
