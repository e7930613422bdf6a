"""Where one collected batch's time goes: the games, ``ParallelGames``, torchrl's step, the policy, the collector.

A config whose copies ``ParallelGames`` steps (MAgent2, MPE, MaMuJoCo) is built as ``marl-ppo train``
builds it (one thread), and its fourth batch (``--warmup``: three before it; the second still pays
for growing the allocator, about 1.5 ms a step with 8 copies) is collected with clocks around each
game's ``step`` and ``reset``, ``ParallelGames._step``, the env's ``step_and_maybe_reset`` and the
policy's forward.
What is left of the batch is the collector's own work (torchrl's ``Collector``: a tensordict per
step kept and stacked into its buffer, which the trainer reuses; ``--clone``: the batch cloned at
the end as well, as in a run with an ``on_batch_collected`` callback). A clock costs about a
microsecond; the figures are per collection step (all copies), in milliseconds.

    .venv/bin/python examples/benchmarks/collection_split.py                       # battle_vs_random, 8 copies
    .venv/bin/python examples/benchmarks/collection_split.py --num-envs 128 --frames-per-batch 16000
"""

from __future__ import annotations

import argparse
import functools
import time
from collections import defaultdict


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="battle_vs_random")
    parser.add_argument("--num-envs", type=int, default=None, help="default: the config's own")
    parser.add_argument("--frames-per-batch", type=int, default=None, help="default: the config's own")
    parser.add_argument("--clone", action="store_true", help="each batch cloned (a run with on_batch_collected)")
    parser.add_argument(
        "--warmup",
        type=int,
        default=3,
        help="batches collected before the timed one (the first starts the episodes, the next grow the allocator)",
    )
    args = parser.parse_args()
    from marl_ppo.config import load_config
    from marl_ppo.envs.parallel_games import ParallelGames
    from marl_ppo.run.build import build, build_collector

    overrides = ["train.num_threads=1", "log.checkpoint_every=0"]
    overrides += [f"env.num_envs={args.num_envs}"] if args.num_envs else []
    if args.frames_per_batch:
        overrides += [f"train.frames_per_batch={args.frames_per_batch}"]
        overrides += [f"train.minibatch_size={args.frames_per_batch // 4}"]
    cfg = load_config(args.config, overrides)
    parts = build(cfg)
    env, policy = parts.env, parts.policy
    games = getattr(env, "base_env", env)
    if not isinstance(games, ParallelGames):
        raise SystemExit(f"{args.config}: its copies are stepped by {type(games).__name__}, not ParallelGames")
    seconds: dict[str, float] = defaultdict(float)

    def clocked(name, fn):
        @functools.wraps(fn)
        def run(*a, **k):
            start = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                seconds[name] += time.perf_counter() - start

        return run

    for game in games.games:
        game.step, game.reset = clocked("games", game.step), clocked("game resets", game.reset)
    games._step = clocked("ParallelGames._step", games._step)
    env.step_and_maybe_reset = clocked("env step", env.step_and_maybe_reset)
    policy.forward = clocked("policy", policy.forward)
    collector = build_collector(
        cfg, env, policy, total_frames=(args.warmup + 2) * cfg.train.frames_per_batch, reuse_batch=not args.clone
    )
    batches = iter(collector)
    for _ in range(args.warmup):
        next(batches)
    seconds.clear()
    start = time.perf_counter()
    next(batches)
    total = time.perf_counter() - start
    collector.shutdown()
    steps = cfg.train.frames_per_batch // cfg.env.num_envs
    rows = {
        "games (their step)": seconds["games"],
        "ParallelGames (reading and writing the games' values)": seconds["ParallelGames._step"] - seconds["games"],
        "torchrl's step, transforms, resets": seconds["env step"] - seconds["ParallelGames._step"],
        "policy (every group's, opponents included)": seconds["policy"],
        "collector (steps kept, stacked" + (", the batch cloned)" if args.clone else " into its buffer)"): total
        - seconds["env step"]
        - seconds["policy"],
        "collection": total,
    }
    print(f"{args.config}: {cfg.env.num_envs} copies, {cfg.train.frames_per_batch} frames, {steps} steps a copy")
    print("| part | ms a collection step | share |\n|---|---|---|")
    for name, s in rows.items():
        print(f"| {name} | {s / steps * 1e3:.2f} | {s / total:.0%} |")


if __name__ == "__main__":
    main()
