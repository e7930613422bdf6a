"""A small batched multi-agent env with a hybrid ``{move, choice}`` action, for tests and examples.

Each agent sees a target point and a target symbol (one-hot). Its action is a composite of a
continuous ``move`` in ``[-1, 1]^2`` and a discrete ``choice`` among ``n_symbols``. Reward per agent
and step: ``choice == symbol`` (0 or 1) minus ``|move - target|`` (mean over the 2 dims).
A random policy scores about ``1/n_symbols - 0.6`` per step; a good one approaches 1.
Targets are redrawn every step; episodes last ``max_steps``.

>>> env = HybridTargetEnv(num_envs=4, n_agents=2, seed=0)
>>> td = env.rollout(3)
>>> td["agents", "action", "move"].shape, td["agents", "action", "choice"].shape
(torch.Size([4, 3, 2, 2]), torch.Size([4, 3, 2]))
"""

from __future__ import annotations

import torch
from tensordict import TensorDict, TensorDictBase
from torchrl.data import Bounded, Categorical, Composite, Unbounded
from torchrl.envs import EnvBase

__all__ = ["HybridTargetEnv"]


class HybridTargetEnv(EnvBase):
    """One group ``agents`` of ``n_agents``; action ``{move: box(2), choice: categorical(n_symbols)}``."""

    batch_locked = True

    def __init__(
        self,
        num_envs: int = 16,
        n_agents: int = 2,
        n_symbols: int = 3,
        max_steps: int = 10,
        seed: int | None = None,
        device: str | torch.device = "cpu",
    ) -> None:
        super().__init__(batch_size=torch.Size([num_envs]), device=device)
        self.n_agents, self.n_symbols, self.max_steps = n_agents, n_symbols, max_steps
        self.group_map = {"agents": [f"agent_{i}" for i in range(n_agents)]}
        B, n = num_envs, n_agents
        self.observation_spec = Composite(
            agents=Composite(observation=Unbounded((B, n, 2 + n_symbols)), shape=(B, n)),
            step=Unbounded((B, 1)),
            shape=(B,),
        )
        self.action_spec = Composite(
            agents=Composite(
                action=Composite(
                    move=Bounded(-1.0, 1.0, shape=(B, n, 2)),
                    choice=Categorical(n_symbols, shape=(B, n)),
                    shape=(B, n),
                ),
                shape=(B, n),
            ),
            shape=(B,),
        )
        self.reward_spec = Composite(agents=Composite(reward=Unbounded((B, n, 1)), shape=(B, n)), shape=(B,))
        self.done_spec = Composite(
            done=Categorical(2, (B, 1), dtype=torch.bool),
            terminated=Categorical(2, (B, 1), dtype=torch.bool),
            shape=(B,),
        )
        self._targets = torch.zeros(B, n, 2)
        self._symbols = torch.zeros(B, n, dtype=torch.long)
        self._steps = torch.zeros(B, 1)
        self._generator = torch.Generator().manual_seed(0 if seed is None else seed)

    def _draw(self, mask: torch.Tensor) -> None:
        B, n = self.batch_size[0], self.n_agents
        targets = torch.rand(B, n, 2, generator=self._generator) * 1.6 - 0.8
        symbols = torch.randint(self.n_symbols, (B, n), generator=self._generator)
        self._targets = torch.where(mask.view(B, 1, 1), targets, self._targets)
        self._symbols = torch.where(mask.view(B, 1), symbols, self._symbols)

    def _obs(self) -> TensorDict:
        one_hot = torch.nn.functional.one_hot(self._symbols, self.n_symbols).float()
        obs = torch.cat([self._targets, one_hot], dim=-1)
        return TensorDict({"observation": obs}, batch_size=(self.batch_size[0], self.n_agents))

    def _reset(self, tensordict: TensorDictBase | None = None) -> TensorDictBase:
        B = self.batch_size[0]
        mask = torch.ones(B, dtype=torch.bool)
        if tensordict is not None and "_reset" in tensordict.keys():
            mask = tensordict.get("_reset").view(B)
        self._steps = torch.where(mask.view(B, 1), torch.zeros_like(self._steps), self._steps)
        self._draw(mask)
        done = torch.zeros(B, 1, dtype=torch.bool)
        return TensorDict(
            {"agents": self._obs(), "step": self._steps.clone(), "done": done, "terminated": done.clone()},
            batch_size=self.batch_size,
        )

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        action = tensordict.get(("agents", "action"))
        move, choice = action.get("move"), action.get("choice")
        hit = (choice == self._symbols).float()
        dist = (move - self._targets).abs().mean(-1)
        reward = (hit - dist).unsqueeze(-1)
        self._steps = self._steps + 1
        done = self._steps >= self.max_steps
        self._draw(torch.ones(self.batch_size[0], dtype=torch.bool))
        agents = self._obs()
        agents.set("reward", reward)
        return TensorDict(
            {"agents": agents, "step": self._steps.clone(), "done": done, "terminated": done.clone()},
            batch_size=self.batch_size,
        )

    def _set_seed(self, seed: int | None) -> None:
        self._generator.manual_seed(0 if seed is None else seed)
