"""MAgent2 battle against a random army: kills, losses and wins of the trained red CNN, several seeds.

Each seed is one ``marl-ppo train battle_vs_random`` child process (``--jobs`` at a time, one
thread each). Then the trained red policy (deterministic) and, for reference, a random red army
play ``--episodes`` episodes against the random blue army on evaluation envs (seed + 10 000). A
kill is a killing blow: a soldier's step reward of at least 4 (MAgent2's battle gives +5 for a
kill; every other reward of a step is within +-0.5). Per episode: red's kills and blue's as a share
of an army (6), and a win where red killed more than it lost. It prints each seed and the mean and
sd over seeds.

    .venv/bin/python examples/benchmarks/battle.py --seeds 0,1,2 --frames 200000 --jobs 2
    .venv/bin/python examples/benchmarks/battle.py --quick            # smoke: a minute
    .venv/bin/python examples/benchmarks/battle.py --self-play ...    # red and blue one CNN, trained by both
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
KILL = 4.0  # a step reward at least this high is a killing blow (+5)


def _train(seeds: list[int], frames: int, jobs: int, root: Path, extra: list[str]) -> dict[int, float]:
    running, walls = {}, {}
    pending = list(seeds)
    while pending or running:
        while pending and len(running) < jobs:
            s = pending.pop(0)
            cmd = [
                sys.executable, "-m", "marl_ppo.cli", "train", "battle_vs_random", f"train.seed={s}",
                f"train.total_frames={frames}", "train.num_threads=1", "log.progress=false", "log.plot=false",
                "log.eval_every=0", f"log.root={root}", f"log.name=seed{s}", *extra,
            ]  # fmt: skip
            running[s] = (
                subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE),
                time.time(),
            )
        time.sleep(1)
        for s, (proc, start) in list(running.items()):
            if proc.poll() is not None:
                if proc.returncode != 0:
                    raise SystemExit(f"seed {s} failed:\n{proc.stderr.read().decode()[-3000:]}")
                walls[s] = time.time() - start
                del running[s]
    return walls


@torch.no_grad()
def _play(run_dir: Path, seed: int, episodes: int, trained: bool) -> dict[str, float]:
    """Kill share, loss share and win rate of red over ``episodes`` finished episodes."""
    from torchrl.envs.utils import ExplorationType, set_exploration_type

    from marl_ppo.envs import make_env
    from marl_ppo.run.build import load_policy

    cfg, parts = load_policy(run_dir)
    env = make_env(cfg.env, seed=seed + 10_000)
    torch.manual_seed(seed)
    copies, army = cfg.env.num_envs, parts.groups["red"].n_agents
    steps = cfg.env.max_steps * (episodes // copies + 2)
    policy = parts.policy if trained else None  # red's policy and the run's random blue
    if trained and cfg.opponents.get("blue") == "self":  # blue played red's policy in training: random here
        policy = _against_random(parts.router.losses["red"].actor_network, env.full_action_spec["blue", "action"])
    with set_exploration_type(ExplorationType.DETERMINISTIC):
        # not trained: both armies random (the env's own actions)
        td = env.rollout(steps, policy, break_when_any_done=False)
    env.close()
    kills = {g: (td["next", g, "reward"].squeeze(-1) >= KILL).sum(-1) for g in ("red", "blue")}  # [copies, T]
    done = td["next", "done"].reshape(copies, -1)
    rows = []
    for c in range(copies):
        start = 0
        for t in torch.nonzero(done[c]).flatten().tolist():
            red, blue = int(kills["red"][c, start : t + 1].sum()), int(kills["blue"][c, start : t + 1].sum())
            rows.append((min(red, army) / army, min(blue, army) / army, float(red > blue)))
            start = t + 1
    rows = rows[:episodes]
    return {
        "episodes": len(rows),
        "kill_share": statistics.fmean(r[0] for r in rows),
        "loss_share": statistics.fmean(r[1] for r in rows),
        "win_rate": statistics.fmean(r[2] for r in rows),
    }


def _against_random(red, blue_spec):
    """Red's trained policy, and a blue army of uniformly random actions (as ``opponents.blue: random``)."""

    def act(td):
        td = red(td)
        td.set(("blue", "action"), blue_spec.rand())
        return td

    return act


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--frames", type=int, default=200_000)
    parser.add_argument("--episodes", type=int, default=64)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--out", type=Path, default=None, help="keep the runs here (default: a temporary folder)")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--self-play", action="store_true", help="train both armies as one CNN (opponents.blue=self); play red v random"
    )
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    extra = ["opponents.blue=self"] if args.self_play else []
    if args.quick:
        seeds, args.frames, args.episodes = seeds[:1], 800, 8
        extra += ["env.num_envs=2", "train.frames_per_batch=400", "train.minibatch_size=200", "train.num_epochs=1"]
    with tempfile.TemporaryDirectory() as tmp:
        root = args.out or Path(tmp)
        walls = _train(seeds, args.frames, args.jobs, root, extra)
        results = {}
        for s in seeds:
            results[s] = {
                "trained": _play(root / f"seed{s}", s, args.episodes, True),
                "random": _play(root / f"seed{s}", s, args.episodes, False),
                "wall_s": round(walls[s]),
            }
            print(json.dumps({"seed": s, **results[s]}), flush=True)
    how = "self-play (opponents.blue=self)" if args.self_play else "battle_vs_random"
    print(f"\n{how}, {args.frames} frames, {len(seeds)} seeds, {args.episodes} episodes each, red v random")
    print("| red | kill share | loss share | win rate |\n|---|---|---|---|")
    for who in ("random", "trained"):
        cells = []
        for key in ("kill_share", "loss_share", "win_rate"):
            xs = [results[s][who][key] for s in seeds]
            sd = statistics.stdev(xs) if len(xs) > 1 else 0.0
            cells.append(f"{statistics.fmean(xs):.2f} ± {sd:.2f}")
        print(f"| {who} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
