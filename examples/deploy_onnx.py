"""A trained policy outside marl_ppo: its ONNX export in onnxruntime and numpy, in the env's own library.

    marl-ppo train          # or any VMAS, PettingZoo (MPE, MAgent2, butterfly) or MaMuJoCo run
    python examples/deploy_onnx.py RUN_DIR [--episodes 10]

The policy's path holds onnxruntime and numpy only. The script exports the run (``marl-ppo export``),
reads each group's ``policy.json`` (its input names, and ``observation``: what the env did to an
observation before the policy read it, redone here in numpy: flatten (one-hot), cast, grayscale,
frame stack), builds the env from the run's ``config.yaml`` with its own library (``vmas.make_env``;
``mpe2``, a PettingZoo module or ``mamujoco_v1`` ``parallel_env``), and plays the episodes ``marl-ppo
eval`` plays: the same seeds (``train.seed + 10000``; a PettingZoo-API game's copies chained as
torchrl chains them), each episode's return the mean over a group's agents of their summed rewards.
It prints, per group, the onnxruntime return beside ``marl-ppo eval``'s for the same run and checkpoint:

    agents: onnxruntime return 2.722494, marl-ppo eval return 2.722494

A run with opponents (``opponents.<group>``) is refused: marl_ppo's own player draws the opponent
seat's actions (torch's random stream, a snapshot), which this script does not run.
MaMuJoCo's physics is chaotic: onnxruntime's float32 arithmetic differs from torch's by about 1e-7
(``policy.json``'s ``max_abs_diff``), and over a few hundred steps that grows into another gait, so
1 000-step returns differ while the env, seeds, observations and actions are the same (fed torch's
actions, this script's game returns marl-ppo eval's figure); ``--max-steps 50`` plays episodes short
enough to stay together, in both (``marl-ppo eval --max-steps``).

``--tiny --out DIR``: trains a two-iteration run into DIR first (the examples' test; ``--scenario`` a
PettingZoo MPE task instead of VMAS navigation, ``--config`` a shipped config, e.g. halfcheetah_2x3_mappo).
"""

from __future__ import annotations

import argparse
import importlib
import json
import subprocess
import sys
from collections import deque
from pathlib import Path

import numpy as np
import onnxruntime
import yaml

EVAL_SEED_OFFSET = 10_000  # marl_ppo.run.evaluation: evaluation envs are seeded train.seed + this
DRAWS_OBSERVATION = ("butterfly",)  # games that draw their observation only with render_mode="rgb_array"


def marl_ppo(*args: str) -> str:
    """A ``marl-ppo`` command in its own process (this script imports nothing of the package)."""
    proc = subprocess.run([sys.executable, "-m", "marl_ppo", *args], capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"marl-ppo {args[0]} failed:\n{proc.stderr[-2000:]}")
    return proc.stdout


class Policy:
    """One group's exported policy: ``policy.json``'s preprocessing in numpy, then ``policy.onnx``."""

    def __init__(self, folder: Path) -> None:
        self.record = json.loads((folder / "policy.json").read_text())
        self.agents = self.record["agents"]
        self.session = onnxruntime.InferenceSession(str(folder / self.record["files"]["onnx"]["file"]))
        (self.entry,) = self.record["observation"]["entries"]  # one observation input
        if any(s["op"] not in ("flatten", "cast", "grayscale", "frame_stack") for s in self.entry["steps"]):
            sys.exit(f"{folder}: a step of {self.entry['steps']} is not redone here (train with env.image.size=null)")
        if [p["name"] for p in self.record["inputs"]] != [self.entry["input"]]:
            sys.exit(f"{folder}: this script feeds one observation input, not {self.record['inputs']}")
        self.frames: dict[int, deque] = {}

    def prepare(self, obs: np.ndarray, key: int, first: bool) -> np.ndarray:
        """One agent's observation as the run's env gave it to the policy (``key``: its frame history)."""
        x = np.asarray(obs)
        for step in self.entry["steps"]:
            if step["op"] == "flatten" and x.ndim == 0:  # a discrete observation: one-hot, as wide as the input
                x = np.eye(self.record["inputs"][0]["shape"][-1], dtype=np.float32)[int(x)]
            elif step["op"] == "flatten":
                x = x.reshape(-1).astype(np.float32)  # C order, as torch's reshape
            elif step["op"] == "cast":
                x = x.astype(np.float32)
            elif step["op"] == "grayscale":
                gray = (x.astype(np.float32) * np.asarray(step["weights"], dtype=np.float32)).sum(-1, keepdims=True)
                x = np.clip(np.round(gray), 0, 255).astype(x.dtype) if x.dtype == np.uint8 else gray.astype(x.dtype)
            elif step["op"] == "frame_stack":
                if first or key not in self.frames:  # at a reset the first frame fills the stack
                    self.frames[key] = deque([x] * step["frames"], maxlen=step["frames"])
                self.frames[key].append(x)
                x = np.concatenate(self.frames[key], axis=-1)
        return x

    def act(self, rows: np.ndarray) -> np.ndarray:
        """The deterministic actions of ``rows`` ``[batch, n_agents, ...]``."""
        return self.session.run(None, {self.entry["input"]: rows})[0]


def vmas_returns(config: dict, policies: dict[str, Policy], episodes: int) -> dict[str, float]:
    """Each group's mean return over ``episodes`` episodes in VMAS, one env copy per episode."""
    import vmas

    env_cfg, seed = config["env"], config["train"]["seed"] + EVAL_SEED_OFFSET
    if env_cfg.get("comm") or not env_cfg["continuous_actions"]:
        sys.exit("this script runs VMAS runs with continuous actions and no communication heads")
    env = vmas.make_env(
        env_cfg["scenario"], num_envs=episodes, device="cpu", continuous_actions=True,
        max_steps=env_cfg["max_steps"], seed=seed, **env_cfg["kwargs"],
    )  # fmt: skip
    env.seed(seed)
    names = [agent.name for agent in env.agents]
    rows = {g: [names.index(a) for a in p.agents] for g, p in policies.items()}
    observations = env.reset()
    returns = {g: np.zeros((episodes, len(r))) for g, r in rows.items()}
    finished = {g: np.full(episodes, np.nan) for g in rows}
    ended = np.zeros(episodes, dtype=bool)
    while not ended.all():
        actions = [None] * len(names)
        for g, policy in policies.items():
            action = policy.act(np.stack([observations[i].numpy() for i in rows[g]], axis=1))
            for j, i in enumerate(rows[g]):
                actions[i] = action[:, j]
        observations, rewards, dones, _ = env.step([as_tensor(a) for a in actions])
        dones = dones.numpy()
        for g in rows:
            returns[g] += np.stack([rewards[i].numpy() for i in rows[g]], axis=1)
            first = dones & ~ended  # each copy's first episode is the one that counts
            finished[g][first] = returns[g][first].mean(axis=1)
        ended |= dones
    return {g: float(finished[g].mean()) for g in rows}


def as_tensor(action: np.ndarray):
    """An action as VMAS takes it (a torch tensor): the env's boundary, not the policy's path."""
    import torch

    return torch.from_numpy(np.ascontiguousarray(action))


def next_seed(seed: int) -> int:
    """torchrl's seed chain (``torchrl._utils.seed_generator``): the next copy's seed."""
    return int.from_bytes(np.random.default_rng(seed).bytes(8), "big") % (2**32 - 1)


def make_game(env_cfg: dict):
    """``(game, seed_mask)``: the run's PettingZoo-API game, built as marl_ppo builds one copy."""
    kind, scenario, kwargs, cap = env_cfg["kind"], env_cfg["scenario"], dict(env_cfg["kwargs"]), env_cfg["max_steps"]
    if kind == "mamujoco":
        from gymnasium_robotics import mamujoco_v1

        kwargs = {"agent_conf": None, "agent_obsk": 1, **kwargs, "max_episode_steps": cap}
        return mamujoco_v1.parallel_env(scenario, **kwargs), 2**31
    if "." not in scenario:  # an MPE task, from mpe2; its seed is not taken within 31 bits
        module = importlib.import_module(f"mpe2.{scenario}")
        return module.parallel_env(max_cycles=cap, continuous_actions=env_cfg["continuous_actions"], **kwargs), None
    module = importlib.import_module(scenario)
    if any(f".{family}." in f".{scenario}." for family in DRAWS_OBSERVATION):
        kwargs.setdefault("render_mode", "rgb_array")
    kwargs.pop("group_map", None)
    try:
        return module.parallel_env(max_cycles=cap, **kwargs), 2**31
    except TypeError:
        return module.parallel_env(**kwargs), 2**31


def game_returns(config: dict, policies: dict[str, Policy], episodes: int) -> dict[str, float]:
    """Each group's mean return over ``episodes`` episodes of a PettingZoo-API game, shared out between
    ``min(episodes, env.num_envs)`` copies as ``marl-ppo eval`` shares them."""
    env_cfg = config["env"]
    copies = min(episodes, env_cfg["num_envs"])
    seed, counted = config["train"]["seed"] + EVAL_SEED_OFFSET, {g: [] for g in policies}
    for i in range(copies):
        game, mask = make_game(env_cfg)
        game.reset(seed=seed % mask if mask else seed)  # set_seed: the copy's game reset with its seed
        for _ in range(episodes // copies + (i < episodes % copies)):
            for g, value in play_episode(game, policies, copy=i).items():
                counted[g].append(value)
        game.close()
        seed = next_seed(seed)
    return {g: float(np.mean(v)) for g, v in counted.items()}


def play_episode(game, policies: dict[str, Policy], copy: int) -> dict[str, float]:
    """One episode from ``game.reset()``: each group's mean over its agents of their summed rewards
    (an agent that has left scores 0 from then on, and is fed zeros)."""
    observations, _ = game.reset()
    totals = {g: np.zeros(len(p.agents)) for g, p in policies.items()}
    first = True
    while game.agents:
        actions = {}
        for g, policy in policies.items():
            rows = []
            for j, agent in enumerate(policy.agents):
                obs = observations.get(agent)
                obs = np.zeros_like(game.observation_space(agent).sample()) if obs is None else obs
                rows.append(policy.prepare(obs, key=hash((copy, agent)), first=first))
            action = policy.act(np.stack(rows)[None])[0]
            actions |= {a: action[j] for j, a in enumerate(policy.agents) if a in game.agents}
        observations, rewards, *_ = game.step(actions)
        for g, policy in policies.items():
            totals[g] += [rewards.get(a, 0.0) for a in policy.agents]
        first = False
    return {g: float(t.mean()) for g, t in totals.items()}


def refuse_opponents(config: dict) -> None:
    """Exits, in one line, on a run whose ``opponents`` play a seat: their actions are not the export's."""
    opponents = config.get("opponents") or {}
    if opponents:
        seats = ", ".join(f"opponents.{g}: {source}" for g, source in opponents.items())
        sys.exit(
            f"this run has opponents ({seats}): the opponent seat's actions are drawn by marl_ppo's own player, "
            "which this script does not run, so its episodes could not be marl-ppo eval's; deploy a run without"
        )


def train_tiny(args: argparse.Namespace) -> str:
    """``--tiny``: a two-iteration run of navigation, an MPE task (``--scenario``) or a shipped config, its folder."""
    tiny = ["train.total_frames=1200", "train.frames_per_batch=600", "env.num_envs=6", "env.max_steps=50",
            "model.hidden=[32]", "train.minibatch_size=300", "log.progress=false", "log.plot=false",
            "log.eval_every=0", "train.num_threads=1", f"log.root={args.out}"]  # fmt: skip
    if args.scenario:
        tiny += ["env.kind=pettingzoo", f"env.scenario={args.scenario}", "train.frames_per_batch=300"]
    marl_ppo("train", *([args.config] if args.config else []), *tiny)
    return str(next(Path(args.out).glob("*/config.yaml")).parent)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", nargs="?", help="a run directory (marl-ppo train)")
    parser.add_argument("--episodes", type=int, default=10)
    parser.add_argument("--checkpoint", default="last.pt")
    parser.add_argument("--tiny", action="store_true", help="train a two-iteration run into --out first")
    parser.add_argument("--scenario", help="--tiny: a PettingZoo MPE task (e.g. simple_spread_v3) instead of VMAS")
    parser.add_argument("--config", help="--tiny: a shipped config (e.g. halfcheetah_2x3_mappo) at tiny sizes")
    parser.add_argument("--max-steps", type=int, help="episodes of at most N steps, here and in marl-ppo eval")
    parser.add_argument("--out", help="--tiny: where the run goes")
    parser.add_argument("--threads", type=int, default=None, help="(the examples' test passes it; unused)")
    args = parser.parse_args()
    if args.tiny:
        args.run_dir = train_tiny(args)
    run_dir = Path(args.run_dir)
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    refuse_opponents(config)
    marl_ppo("export", str(run_dir), "--format", "onnx", "--checkpoint", args.checkpoint)
    policies = {p.parent.name: Policy(p.parent) for p in (run_dir / "export").glob("*/policy.json")}
    cap = [] if args.max_steps is None else ["--max-steps", str(args.max_steps)]
    if args.max_steps is not None:  # as marl-ppo eval --max-steps: the episodes' cap
        config["env"]["max_steps"] = args.max_steps
    play = vmas_returns if config["env"]["kind"] == "vmas" else game_returns
    deployed = play(config, policies, args.episodes)
    evaluated = json.loads(
        marl_ppo("eval", str(run_dir), "--episodes", str(args.episodes), "--checkpoint", args.checkpoint, *cap)
    )["episode_reward"]
    if config["env"]["kind"] == "mamujoco" and args.max_steps is None:
        gap = max(p.record["files"]["onnx"].get("max_abs_diff", 1e-7) for p in policies.values())
        print(f"note: MaMuJoCo is chaotic; onnxruntime's actions differ from torch's by up to {gap:.1e}, which "
              "a long episode grows into another trajectory: --max-steps 50 compares short ones")  # fmt: skip
    for g, value in deployed.items():
        print(f"{g}: onnxruntime return {value:.6f}, marl-ppo eval return {evaluated[g]:.6f}")


if __name__ == "__main__":
    main()
