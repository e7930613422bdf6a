"""What the eager update spends beyond its raw-torch floor: the diagnostics, switched off in turn.

On one collected batch of BenchMARL's base config (throughput.py's ``--config benchmarl``: VMAS
navigation, 3 agents, 6 000 frames, minibatch 400), in one process, the variants take turns, a few
epochs each (``--chunk-epochs``), for ``--rounds`` rounds, so that a slow spell of the machine
lands on every variant:

* ``full``: ``ppo_update`` as a run trains (every diagnostic logged);
* ``no entropy``: without the logged entropy (``entropy_bonus=False``: every entropy coefficient
  is 0 here, so the entropy is computed only to be logged);
* ``no explained variance``: without the critic's explained variance;
* ``neither``: without both;
* ``floor``: throughput.py's raw-torch update on the same batch (no diagnostics at all).

Prints each variant's median milliseconds per gradient step, and its ratio to ``full`` and to the
floor: what a diagnostic costs is ``full``'s time minus the variant's. The losses and gradients do
not depend on these switches; only what is logged does. Figures: ``docs/performance.md``.

    .venv/bin/python examples/benchmarks/update_costs.py --threads 1
    .venv/bin/python examples/benchmarks/update_costs.py --quick
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from throughput import FULL, GROUP, QUICK, Floor, batch_tensors, benchmarl_config

from marl_ppo.core.update import ppo_update
from marl_ppo.run.build import build, build_collector

VARIANTS = {  # name -> (entropy_bonus, log_explained_variance) of every loss
    "full": (True, True),
    "no entropy": (False, True),
    "no explained variance": (True, False),
    "neither": (False, False),
}


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--chunk-epochs", type=int, default=3, help="epochs per variant per round")
    p.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: torch's default)")
    p.add_argument("--quick", action="store_true", help="tiny sizes for a smoke check (seconds)")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    sizes = QUICK if args.quick else FULL["benchmarl"]
    args.num_envs, args.frames_per_batch, args.minibatch = (
        sizes["num_envs"],
        sizes["frames_per_batch"],
        sizes["minibatch"],
    )
    args.epochs = args.chunk_epochs
    if args.quick:
        args.rounds, args.chunk_epochs = 2, 1
    return args


def main() -> None:
    args = parse_args()
    cfg = benchmarl_config(args)
    parts = build(cfg)
    router, step = parts.router, parts.step
    losses = list(router.losses.values())  # one group here: no bundles
    if any(float(c) != 0.0 for loss in losses for c in loss.head_entropy_coeffs):
        raise SystemExit("the config trains the entropy: switching its loss term off would change the update")
    spec = parts.groups[GROUP]
    act = spec.agent_action_spec
    n_agents, obs_dim = spec.observation_shape
    floor = Floor(
        obs_dim,
        act.shape[-1],
        n_agents,
        act.space.low[0].clone(),
        act.space.high[0].clone(),
        lr=cfg.train.lr,
        clip=cfg.loss.clip_epsilon,
        max_grad_norm=cfg.train.max_grad_norm,
    )
    collector = build_collector(cfg, parts.env, router.policy, total_frames=args.frames_per_batch)
    batch = parts.reward_table(next(iter(collector)))
    collector.shutdown()
    router.compute_advantages(batch)
    tensors = batch_tensors(batch)
    floor.load_from(router)
    n_steps = args.chunk_epochs * max(args.frames_per_batch // args.minibatch, 1)
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads; BenchMARL's config: navigation x{n_agents}, "
        f"{args.frames_per_batch} frames, minibatch {args.minibatch}; {args.rounds} rounds x {args.chunk_epochs} "
        f"epochs per variant ({n_steps} gradient steps each)"
    )

    def run(name: str) -> float:
        t0 = time.perf_counter()
        if name == "floor":
            floor.update(*tensors, epochs=args.chunk_epochs, minibatch=args.minibatch)
        else:
            entropy, explained_variance = VARIANTS[name]
            for loss in losses:
                loss.entropy_bonus, loss.log_explained_variance = entropy, explained_variance
            ppo_update(router, step, batch, num_epochs=args.chunk_epochs, minibatch_size=args.minibatch)
        return (time.perf_counter() - t0) / n_steps * 1e3

    names = [*VARIANTS, "floor"]
    for name in names:  # warm-up: first-call allocations of each path
        run(name)
    ms: dict[str, list[float]] = {n: [] for n in names}
    for r in range(args.rounds):
        for name in names if r % 2 == 0 else names[::-1]:  # alternate the order too
            ms[name].append(run(name))
    full, fl = ms["full"], ms["floor"]
    print(f"\n  {'variant':<24}{'ms/step':>9}{'/ full':>9}{'/ floor':>9}")
    for name in names:
        v = ms[name]
        to_full = statistics.median(a / b for a, b in zip(v, full))
        to_floor = statistics.median(a / b for a, b in zip(v, fl))
        print(f"  {name:<24}{statistics.median(v):9.2f}{to_full:8.3f}x{to_floor:8.3f}x")


if __name__ == "__main__":
    main()
