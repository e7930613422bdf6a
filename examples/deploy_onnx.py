"""A trained VMAS policy outside marl_ppo: its ONNX export, onnxruntime and numpy, in VMAS itself.

    marl-ppo train                                       # or any VMAS run with continuous actions
    python examples/deploy_onnx.py RUN_DIR [--episodes 10]

The policy's path holds onnxruntime and numpy only: the script reads the run's ``config.yaml``
(``yaml.safe_load``) for the scenario and its seed, builds the scenario with ``vmas.make_env`` (VMAS
computes in torch; the script hands it the actions as tensors and nothing else of torch), and runs
``RUN_DIR/export/<group>/policy.onnx`` (written by ``marl-ppo export`` if it is not there). It plays
the episodes ``marl-ppo eval`` plays (the same seed rule: ``train.seed + 10000``, one env copy per
episode, each episode's return the mean of its agents' summed rewards), prints the mean return, and
prints ``marl-ppo eval``'s for the same run, episodes and checkpoint beside it.

``--tiny --out DIR``: trains a two-iteration run into DIR first (the examples' test).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnxruntime
import vmas
import yaml

EVAL_SEED_OFFSET = 10_000  # marl_ppo.run.evaluation: evaluation envs are seeded train.seed + this


def marl_ppo(*args: str) -> str:
    """A ``marl-ppo`` command in its own process (this script imports nothing of the package)."""
    proc = subprocess.run([sys.executable, "-m", "marl_ppo", *args], capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"marl-ppo {args[0]} failed:\n{proc.stderr[-2000:]}")
    return proc.stdout


def play(run_dir: Path, episodes: int) -> dict[str, float]:
    """Each group's mean return over ``episodes`` deterministic episodes of the exported policies."""
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    env_cfg, seed = config["env"], config["train"]["seed"] + EVAL_SEED_OFFSET
    if env_cfg["kind"] != "vmas" or env_cfg.get("comm") or not env_cfg["continuous_actions"]:
        sys.exit("this script runs VMAS runs with continuous actions and no communication heads")
    manifests = {p.parent.name: json.loads(p.read_text()) for p in (run_dir / "export").glob("*/policy.json")}
    env = vmas.make_env(
        env_cfg["scenario"],
        num_envs=episodes,  # one copy per episode, as marl-ppo eval does for a vectorised env
        device="cpu",
        continuous_actions=True,
        max_steps=env_cfg["max_steps"],  # the episode ends at the cap, as the run's time limit ends it
        seed=seed,
        **env_cfg["kwargs"],
    )
    env.seed(seed)
    names = [agent.name for agent in env.agents]
    sessions = {g: onnxruntime.InferenceSession(str(run_dir / "export" / g / "policy.onnx")) for g in manifests}
    rows = {g: [names.index(a) for a in m["agents"]] for g, m in manifests.items()}
    observations = env.reset()
    returns = {g: np.zeros((episodes, len(r))) for g, r in rows.items()}
    finished = {g: np.full(episodes, np.nan) for g in rows}
    ended = np.zeros(episodes, dtype=bool)
    while not ended.all():
        actions = [None] * len(names)
        for g, session in sessions.items():
            obs = np.stack([observations[i].numpy() for i in rows[g]], axis=1)  # [copies, agents, obs]
            (action,) = session.run(None, {manifests[g]["inputs"][0]["name"]: obs.astype(np.float32)})
            for j, i in enumerate(rows[g]):
                actions[i] = action[:, j]
        observations, rewards, dones, _ = env.step([vmas_tensor(a) for a in actions])
        dones = dones.numpy()
        for g in rows:
            returns[g] += np.stack([rewards[i].numpy() for i in rows[g]], axis=1)
            first = dones & ~ended  # each copy's first episode is the one that counts
            finished[g][first] = returns[g][first].mean(axis=1)
        ended |= dones
    return {g: float(finished[g].mean()) for g in rows}


def vmas_tensor(action: np.ndarray):
    """An action as VMAS takes it (a torch tensor): the env's boundary, not the policy's path."""
    import torch

    return torch.from_numpy(np.ascontiguousarray(action))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", nargs="?", help="a VMAS run directory (marl-ppo train)")
    parser.add_argument("--episodes", type=int, default=10)
    parser.add_argument("--checkpoint", default="last.pt")
    parser.add_argument("--tiny", action="store_true", help="train a two-iteration run into --out first")
    parser.add_argument("--out", help="--tiny: where the run goes")
    parser.add_argument("--threads", type=int, default=None, help="(the examples' test passes it; unused)")
    args = parser.parse_args()
    if args.tiny:
        tiny = ["train.total_frames=1200", "train.frames_per_batch=600", "env.num_envs=6", "env.max_steps=50",
                "model.hidden=[32]", "train.minibatch_size=300", "log.progress=false", "log.plot=false",
                "log.eval_every=0", f"log.root={args.out}"]  # fmt: skip
        marl_ppo("train", *tiny)
        args.run_dir = str(next(Path(args.out).glob("*/config.yaml")).parent)
    run_dir = Path(args.run_dir)
    marl_ppo("export", str(run_dir), "--format", "onnx", "--checkpoint", args.checkpoint)
    deployed = play(run_dir, args.episodes)
    evaluated = json.loads(
        marl_ppo("eval", str(run_dir), "--episodes", str(args.episodes), "--checkpoint", args.checkpoint)
    )
    for g, value in deployed.items():
        print(f"{g}: onnxruntime return {value:.6f}, marl-ppo eval return {evaluated['episode_reward'][g]:.6f}")
    print(json.dumps({"onnxruntime": deployed, "marl_ppo_eval": evaluated["episode_reward"]}))


if __name__ == "__main__":
    main()
