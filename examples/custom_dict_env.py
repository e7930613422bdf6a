"""Your own torchrl env through the Trainer: config from Python, checkpoints, evaluation, plots.

The env is defined here: ``CargoCrewEnv``, a batched ``EnvBase`` with one group ``crew`` of two
agents. Each agent sees the vector to its goal and the type of the parcel it holds (one-hot); its
action is a composite ``{"move": Bounded box in [-1, 1]^2, "pick": Categorical(3)}``: move toward
the goal and pick the shelf that matches the parcel. Reward per agent and step:
``-distance to goal + 0.5 * (pick == parcel type)``. The env also writes a root ``team_bonus``
(1 when both agents picked right) that nobody trains on unless the reward table says so.

All it takes to train it:

1. a factory, ``make_cargo_crew(num_envs, seed, max_steps)``: the trainer passes those of
   ``num_envs``, ``device``, ``seed`` and ``max_steps`` its signature names (the evaluation env gets
   its own ``num_envs`` and ``seed``);
2. a config, here built in Python, with a reward table row ``crew <- own reward + 0.5 x team_bonus``;
3. ``Trainer(cfg, env_fn=make_cargo_crew).fit()``: logs, evaluation, checkpoints and plots land in a
   run directory whose ``config.yaml`` names the factory (``env.factory: /.../custom_dict_env.py:make_cargo_crew``),
   so ``marl-ppo eval RUN`` and ``marl-ppo train --resume RUN`` rebuild the env from it alone.

From the command line, the same run is
``marl-ppo train env.kind=custom env.factory=examples/custom_dict_env.py:make_cargo_crew ...``.

Run::

    .venv/bin/python examples/custom_dict_env.py             # ~10 s on 2 CPU cores (return -15.5 -> 4.8)
    .venv/bin/python examples/custom_dict_env.py --tiny      # seconds (smoke test)
"""

from __future__ import annotations

import argparse
import json

import torch
from tensordict import TensorDict, TensorDictBase
from torchrl.data import Bounded, Categorical, Composite, Unbounded
from torchrl.envs import EnvBase

from marl_ppo.config import load_config
from marl_ppo.run.logger import read_scalars
from marl_ppo.run.trainer import Trainer


class CargoCrewEnv(EnvBase):
    """Group ``crew`` of ``n_agents``; action ``{move: box(2), pick: categorical(n_types)}``; root done."""

    batch_locked = True

    def __init__(
        self, num_envs: int = 32, n_agents: int = 2, n_types: int = 3, max_steps: int = 20, seed: int = 0
    ) -> None:
        super().__init__(batch_size=torch.Size([num_envs]))
        self.n_agents, self.n_types, self.max_steps = n_agents, n_types, max_steps
        # torchrl's multi-agent layout: the group map names the agents of each group
        self.group_map = {"crew": [f"crew_{i}" for i in range(n_agents)]}
        B, n = num_envs, n_agents
        self.observation_spec = Composite(
            crew=Composite(observation=Unbounded((B, n, 2 + n_types)), shape=(B, n)), shape=(B,)
        )
        self.action_spec = Composite(
            crew=Composite(
                action=Composite(
                    move=Bounded(-1.0, 1.0, shape=(B, n, 2)),
                    pick=Categorical(n_types, shape=(B, n)),
                    shape=(B, n),
                ),
                shape=(B, n),
            ),
            shape=(B,),
        )
        self.reward_spec = Composite(
            crew=Composite(reward=Unbounded((B, n, 1)), shape=(B, n)),
            team_bonus=Unbounded((B, 1)),
            shape=(B,),
        )
        self.done_spec = Composite(
            done=Categorical(2, (B, 1), dtype=torch.bool),
            terminated=Categorical(2, (B, 1), dtype=torch.bool),
            shape=(B,),
        )
        self._rng = torch.Generator().manual_seed(seed)
        self._pos = torch.zeros(B, n, 2)
        self._goal = torch.zeros(B, n, 2)
        self._parcel = torch.zeros(B, n, dtype=torch.long)
        self._t = torch.zeros(B, 1)

    def _observe(self) -> TensorDict:
        one_hot = torch.nn.functional.one_hot(self._parcel, self.n_types).float()
        obs = torch.cat([self._goal - self._pos, one_hot], dim=-1)
        return TensorDict({"observation": obs}, batch_size=(self.batch_size[0], self.n_agents))

    def _reset(self, tensordict: TensorDictBase | None = None) -> TensorDictBase:
        B, n = self.batch_size[0], self.n_agents
        reset = torch.ones(B, dtype=torch.bool)
        if tensordict is not None and "_reset" in tensordict.keys():
            reset = tensordict.get("_reset").view(B)
        r = reset.view(B, 1, 1)
        self._pos = torch.where(r, torch.rand(B, n, 2, generator=self._rng) * 2 - 1, self._pos)
        self._goal = torch.where(r, torch.rand(B, n, 2, generator=self._rng) * 2 - 1, self._goal)
        self._parcel = torch.where(
            reset.view(B, 1), torch.randint(self.n_types, (B, n), generator=self._rng), self._parcel
        )
        self._t = torch.where(reset.view(B, 1), torch.zeros_like(self._t), self._t)
        done = torch.zeros(B, 1, dtype=torch.bool)
        return TensorDict({"crew": self._observe(), "done": done, "terminated": done.clone()}, self.batch_size)

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        action = tensordict.get(("crew", "action"))
        self._pos = (self._pos + 0.2 * action.get("move")).clamp(-1.5, 1.5)
        right = (action.get("pick") == self._parcel).float()  # [B, n]
        reward = -(self._goal - self._pos).norm(dim=-1) + 0.5 * right
        team_bonus = right.prod(dim=-1, keepdim=True)  # [B, 1]: every agent picked right
        self._parcel = torch.randint(self.n_types, self._parcel.shape, generator=self._rng)
        self._t = self._t + 1
        done = self._t >= self.max_steps
        crew = self._observe()
        crew.set("reward", reward.unsqueeze(-1))  # keep the trailing 1: [B, n_agents, 1]
        return TensorDict(
            {"crew": crew, "team_bonus": team_bonus, "done": done, "terminated": done.clone()},
            self.batch_size,
        )

    def _set_seed(self, seed: int | None) -> None:
        self._rng.manual_seed(0 if seed is None else seed)


def make_cargo_crew(num_envs: int, seed: int, max_steps: int) -> CargoCrewEnv:
    """The factory the trainer calls (for training, and again for evaluation)."""
    return CargoCrewEnv(num_envs=num_envs, max_steps=max_steps, seed=seed)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tiny", action="store_true", help="a few seconds: smoke-test sizes")
    parser.add_argument("--iterations", type=int, default=40)
    parser.add_argument("--num-envs", type=int, default=64)
    parser.add_argument("--max-steps", type=int, default=20, help="episode length (one episode per iteration)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: torch's default)")
    parser.add_argument("--out", default="runs", help="parent folder of the run directory")
    args = parser.parse_args(argv)
    if args.tiny:
        args.iterations, args.num_envs, args.max_steps = 4, 8, 10
    frames = args.num_envs * args.max_steps  # one episode per iteration
    cfg = load_config(
        overrides=[
            f"env.num_envs={args.num_envs}",
            f"env.max_steps={args.max_steps}",
            f"train.frames_per_batch={frames}",
            f"train.total_frames={frames * args.iterations}",
            "train.num_epochs=4",
            f"train.minibatch_size={min(320, frames)}",
            "train.lr=3e-3",
            f"train.seed={args.seed}",
            f"train.num_threads={args.threads}",
            "model.hidden=[64, 64]",
            "loss.head_entropy_coeff={move: 0.0, pick: 0.01}",
            f"log.root={args.out}",
            "log.eval_every=0",
            "log.eval_episodes=16",
            "log.progress=false",
        ]
    )
    cfg.reward_table = {"crew": {"reward": [{"own": 1.0}, {"key": "team_bonus", "weight": 0.5}]}}
    trainer = Trainer(cfg, env_fn=make_cargo_crew)  # everything is checked before the run directory exists
    group = trainer.parts.groups["crew"]
    heads = dict(group.agent_action_spec.items())
    print(
        f"group 'crew': agents {list(group.agents)}, observation {list(group.observation_shape)}, action heads "
        + ", ".join(f"{k}: {type(v).__name__}{list(v.shape)}" for k, v in heads.items())
    )
    print(trainer.parts.reward_table)
    print(f"env.factory recorded in {trainer.run_dir / 'config.yaml'}: {trainer.cfg.env.factory}")
    summary = trainer.fit()

    returns = [v for _, v in read_scalars(trainer.run_dir)["collect/crew/episode_reward"]]
    k = max(1, len(returns) // 5)
    first, last = sum(returns[:k]) / k, sum(returns[-k:]) / k
    print(
        f"\nreturn: first {k} iterations {first:.3f} -> last {k} iterations {last:.3f} "
        f"({'rising' if last > first else 'not rising'}); evaluation over {summary['eval/episodes']} episodes "
        f"{summary['eval/crew/episode_reward']:.3f}"
    )
    (trainer.run_dir / "returns.json").write_text(json.dumps({"returns": returns, "first": first, "last": last}))
    print(f"run directory: {trainer.run_dir} (marl-ppo eval {trainer.run_dir})")
    return summary


if __name__ == "__main__":
    main()
