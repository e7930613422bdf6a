"""PettingZoo families on this CPU: collection against the env stepped alone, the update, an image batch's bytes.

For each shipped config named (MAgent2 ``battle_vs_random``, butterfly ``pistonball``, MaMuJoCo
``halfcheetah_2x3_mappo``), one ``marl-ppo train`` child process of two batches (one thread) gives,
for the second batch: the collection time (the run's ``time/collect_s``: env copies stepped by
torchrl's collector with the policy sampling actions, the image transforms included) and the update
time (``time/update_s``: the config's policy and critic, a CNN for the image games). The same number
of env steps is then taken by as many PettingZoo games alone, stepped in turn (their parallel API,
random actions drawn beforehand from their action spaces, no torch): collection / env is what the
framework adds to the games' own stepping. For a game PettingZoo converts from turn-based (AEC)
play (pistonball, MPE), ``env_lean_s`` also times the games through the framework's lean conversion
(``marl_ppo/envs/aec_parallel.py``: PettingZoo's step renders each agent's observation twice and
throws one away), the cheapest stepping of the same games: ``collect_over_env_lean`` is what the
framework adds to that.
Last, the bytes of one batch's image entry as stored (``uint8`` for pistonball) and as float32,
and the child process's peak RSS.

    .venv/bin/python examples/benchmarks/env_families.py                # the three configs
    .venv/bin/python examples/benchmarks/env_families.py --configs pistonball --frames-per-batch 2000
    .venv/bin/python examples/benchmarks/env_families.py --configs halfcheetah_2x3_mappo --num-envs 10,20,40
    .venv/bin/python examples/benchmarks/env_families.py --quick        # smoke: a minute

``--num-envs`` runs each config once per copy count (the frames of a batch unchanged, so more
copies take fewer steps each): the framework's cost per step is spread over more copies.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _train(config: str, fpb: int, root: Path, extra: list[str]) -> dict:
    cmd = [
        sys.executable, "-m", "marl_ppo.cli", "train", config, f"train.frames_per_batch={fpb}",
        f"train.total_frames={2 * fpb}", f"train.minibatch_size={fpb // 4}", "train.num_threads=1",
        "log.eval_every=0", "log.eval_episodes=1", "log.progress=false", "log.plot=false",
        f"log.root={root}", f"log.name={config}", *extra,
    ]  # fmt: skip
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)  # this child's own peak RSS (KiB)
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            err.seek(0)
            raise SystemExit(f"{config} failed:\n{err.read().decode()[-3000:]}")
    scalars = root / config / "logs" / "scalars" / "time"

    def last(name: str) -> float:
        return float((scalars / f"{name}.csv").read_text().splitlines()[-1].split(",")[1])

    return {"collect_s": last("collect_s"), "update_s": last("update_s"), "peak_rss_mib": usage.ru_maxrss / 1024}


def _env_alone(config: str, steps: int, overrides: list[str], lean: bool = False) -> tuple[float, int] | None:
    """Seconds for ``steps`` steps of the config's PettingZoo games alone (random actions), and their agents.

    The games are as many as the run's copies (``env.num_envs``), stepped in turn ``steps / copies``
    times each, as collection steps them: many games' data outgrow the caches that one game's fits in
    (80 HalfCheetahs step 1.1x slower than one), and that cost is the games', not the framework's.
    ``lean``: the games through the framework's lean AEC-to-parallel conversion (``None`` for games
    that PettingZoo does not convert from AEC), which skips the observations PettingZoo's throws away.
    """
    from marl_ppo.config import load_config
    from marl_ppo.envs.aec_parallel import lean_parallel_game

    cfg = load_config(config, overrides)
    copies = cfg.env.num_envs
    if cfg.env.kind == "mamujoco":
        from marl_ppo.envs.mamujoco import _game

        games = [_game(cfg.env) for _ in range(copies)]
    else:
        module = importlib.import_module(cfg.env.scenario)
        games = [module.parallel_env(max_cycles=cfg.env.max_steps, **cfg.env.kwargs) for _ in range(copies)]
    if lean:
        converted = [lean_parallel_game(env) for env in games]
        if all(c is g for c, g in zip(converted, games)):
            return None
        games = converted
    for k, env in enumerate(games):
        env.reset(seed=k)
        for a in env.possible_agents:
            env.action_space(a).seed(k)
    agents = len(games[0].agents)
    # the actions are drawn before the clock starts: gymnasium's ``Space.sample`` costs MaMuJoCo 40 % of
    # its step, which would be counted as the game's own time
    actions = [
        [{a: env.action_space(a).sample() for a in env.possible_agents} for env in games]
        for _ in range(steps // copies)
    ]
    start = time.perf_counter()
    for step in actions:
        for env, act in zip(games, step):
            if not env.agents:
                env.reset()
            env.step({a: act[a] for a in env.agents})
    seconds = time.perf_counter() - start
    for env in games:
        env.close()
    return seconds, agents


def _batch_bytes(config: str, fpb: int, overrides: list[str]) -> tuple[int, int, str]:
    """The stored bytes of one batch's image entries, and the same as float32, with their dtype."""
    from marl_ppo.config import load_config
    from marl_ppo.envs import make_env

    cfg = load_config(config, overrides)
    env = make_env(cfg.env, seed=0)
    spec = env.observation_spec
    keys = [k for k in spec.keys(True, True) if k[-1] == "observation" and spec[k].ndim - spec[k[:-1]].ndim == 3]
    per_step = sum(spec[k].shape.numel() * spec[k].dtype.itemsize for k in keys) if keys else 0
    per_step_f32 = sum(spec[k].shape.numel() * 4 for k in keys) if keys else 0
    env.close()
    dtype = str(spec[keys[0]].dtype).removeprefix("torch.") if keys else "-"
    copies = cfg.env.num_envs
    return per_step * fpb // copies, per_step_f32 * fpb // copies, dtype


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", default="battle_vs_random,pistonball,halfcheetah_2x3_mappo")
    parser.add_argument("--frames-per-batch", type=int, default=None, help="default: each config's own")
    parser.add_argument("--num-envs", default=None, help="comma-separated copy counts; default: each config's own")
    parser.add_argument("--quick", action="store_true", help="small batches, a minute")
    args = parser.parse_args()
    from marl_ppo.config import load_config

    copy_counts = [int(n) for n in args.num_envs.split(",")] if args.num_envs else [None]
    rows = []
    for config, copies in ((c, n) for c in args.configs.split(",") for n in copy_counts):
        fpb = args.frames_per_batch or (400 if args.quick else load_config(config).train.frames_per_batch)
        # a checkpoint at the end only: a checkpoint restarts the episodes, which many copies' short
        # batches would never let reach their end (the config refuses that)
        extra = ["log.checkpoint_every=0", f"train.frames_per_batch={fpb}"]
        extra += ["env.num_envs=2", "train.num_epochs=1"] if args.quick else []
        if copies is not None:
            extra.append(f"env.num_envs={copies}")
        with tempfile.TemporaryDirectory() as tmp:
            run = _train(config, fpb, Path(tmp), extra)
        env_s, agents = _env_alone(config, fpb, extra)  # fpb env steps: copies x steps of the batch
        lean = _env_alone(config, fpb, extra, lean=True)
        stored, as_f32, dtype = _batch_bytes(config, fpb, extra)
        rows.append(
            {
                "config": config,
                "frames_per_batch": fpb,
                "num_envs": load_config(config, extra).env.num_envs,
                "agents": agents,
                "env_alone_s": round(env_s, 2),
                "collect_s": round(run["collect_s"], 2),
                "collect_over_env": round(run["collect_s"] / env_s, 2),
                "env_lean_s": round(lean[0], 2) if lean else "-",
                "collect_over_env_lean": round(run["collect_s"] / lean[0], 2) if lean else "-",
                "collect_frames_per_s": round(fpb / run["collect_s"], 1),
                "update_s": round(run["update_s"], 2),
                "update_frames_per_s": round(fpb / run["update_s"], 1),
                "image_dtype": dtype,
                "batch_image_mib": round(stored / 2**20, 1),
                "batch_image_mib_as_float32": round(as_f32 / 2**20, 1),
                "peak_rss_mib": round(run["peak_rss_mib"]),
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    cols = list(rows[0])
    print("\n| " + " | ".join(cols) + " |\n|" + "---|" * len(cols))
    for r in rows:
        print("| " + " | ".join(str(r[c]) for c in cols) + " |")


if __name__ == "__main__":
    main()
