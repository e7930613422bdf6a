"""Scaling on the CPU: the update's cost per agent-sample against the agent count, and collection
frames/s against the number of vectorised envs.

1. Update: MAPPO on VMAS navigation with 3, 12 and 48 agents (``--agents``), 6 000 frames per
   batch (60 envs), minibatch 400, our default MLP 256x2 and centralised critic (its input grows
   with the agents: ``n_agents x 18``), the spawning area ``sqrt(n/3)`` on a side. Times ``ppo_update``
   over ``--epochs`` epochs after a one-minibatch warm-up, and divides by epochs x frames x agents:
   microseconds per agent-sample.
2. Collection: navigation with 3 agents at ``--envs`` vectorised envs (10 to 4 096), ``--steps``
   steps per batch; frames/s of our direct collector (``make_collector``: the lean VMAS
   collector) and of torchrl's ``Collector`` on the same env and policy, alternating, the median
   of ``--repeats`` batches each after one untimed batch.

    .venv/bin/python examples/benchmarks/scaling.py --threads 1
    .venv/bin/python examples/benchmarks/scaling.py --quick      # smoke check, seconds
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

import torch
from torchrl.collectors import Collector

from marl_ppo.config import load_config
from marl_ppo.core.update import ppo_update
from marl_ppo.run.build import build, build_collector


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--agents", type=int, nargs="+", default=[3, 12, 48])
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--envs", type=int, nargs="+", default=[10, 60, 240, 600, 1024, 4096])
    p.add_argument("--steps", type=int, default=50, help="steps per collected batch")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--quick", action="store_true")
    args = p.parse_args()
    if args.quick:
        args.agents, args.epochs, args.envs, args.steps, args.repeats = [3, 6], 1, [10, 60], 10, 1
    if args.threads:
        torch.set_num_threads(args.threads)
    return args


def config(n_agents: int, num_envs: int, frames: int, minibatch: int = 400):
    # the spawning area grows with the agents (VMAS's default 1 x 1 cannot place 48 agents and goals)
    side = max(1.0, math.sqrt(n_agents / 3))
    return load_config(
        overrides=[
            f"env.kwargs={{n_agents: {n_agents}, world_spawning_x: {side}, world_spawning_y: {side}}}",
            f"env.num_envs={num_envs}",
            f"train.frames_per_batch={frames}",
            f"train.minibatch_size={minibatch}",
            "train.total_frames=100000000",
            "log.progress=false",
            "log.plot=false",
            "log.checkpoint_every=0",
        ]
    )


def update_scaling(args) -> None:
    print("update: microseconds per agent-sample (ppo_update; 6 000 frames, minibatch 400)")
    print(f"  {'agents':>6}{'obs/agent':>10}{'update s':>10}{'us/agent-sample':>17}{'ms/step':>9}")
    for n in args.agents:
        cfg = config(n, 60, 6000)
        parts = build(cfg)
        collector = build_collector(cfg, parts.env, parts.router.policy, total_frames=-1)
        batch = parts.reward_table(next(iter(collector)))
        collector.shutdown()
        parts.router.compute_advantages(batch)
        mb = cfg.train.minibatch_size
        ppo_update(parts.router, parts.step, batch[:, : -(-mb // batch.shape[0])], num_epochs=1, minibatch_size=mb)
        t = time.perf_counter()
        ppo_update(parts.router, parts.step, batch, num_epochs=args.epochs, minibatch_size=mb)
        dt = time.perf_counter() - t
        samples = args.epochs * batch.numel() * n
        steps = args.epochs * (batch.numel() // mb)
        obs = parts.groups["agents"].observation_shape[-1]
        print(f"  {n:>6}{obs:>10}{dt:>10.2f}{1e6 * dt / samples:>17.2f}{1e3 * dt / steps:>9.1f}", flush=True)


def collection_scaling(args) -> None:
    print(
        f"\ncollection: frames/s against vectorised envs (navigation x3, {args.steps} steps a batch; "
        f"median of {args.repeats})"
    )
    print(f"  {'envs':>6}{'ours f/s':>11}{'torchrl f/s':>13}{'ratio':>7}")
    for n in args.envs:
        cfg = config(3, n, n * args.steps, minibatch=n * args.steps)
        ours_parts, ref_parts = build(cfg), build(cfg)
        ours = iter(build_collector(cfg, ours_parts.env, ours_parts.router.policy, total_frames=-1))
        ref = iter(
            Collector(
                ref_parts.env,
                ref_parts.router.policy,
                frames_per_batch=n * args.steps,
                total_frames=-1,
                auto_register_policy_transforms=False,
            )
        )
        next(ours), next(ref)
        t_ours, t_ref = [], []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            next(ours)
            t1 = time.perf_counter()
            next(ref)
            t2 = time.perf_counter()
            t_ours.append(t1 - t0)
            t_ref.append(t2 - t1)
        f_ours = n * args.steps / statistics.median(t_ours)
        f_ref = n * args.steps / statistics.median(t_ref)
        print(f"  {n:>6}{f_ours:>11.0f}{f_ref:>13.0f}{f_ours / f_ref:>7.2f}", flush=True)


def main() -> None:
    args = parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    update_scaling(args)
    collection_scaling(args)


if __name__ == "__main__":
    main()
