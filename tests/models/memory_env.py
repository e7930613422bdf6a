"""A memory task for the tests: a cue seen only at t=0, to be named at the last step.

``MemoryEnv`` has one group ``agents`` of ``n_agents`` agents in ``num_envs`` batched envs.
Each episode lasts ``length`` steps (t = 0 .. length-1):

* observation per agent, ``[*B, n_agents, n_cues + length]``: the one-hot of the agent's own cue
  at t=0 and zeros at every later step, then the one-hot of the time step t (so a policy knows
  when it must answer);
* action per agent: ``Categorical(n_cues)``;
* reward per agent ``[*B, n_agents, 1]``: 0 for the actions at t < length-1; for the action at
  t = length-1, 1 if it names the agent's cue, else 0. That step ends the episode (root
  ``done`` = ``terminated`` = True, ``[*B, 1]``); the cue is drawn afresh at each reset.

Cues are uniform and independent of everything a memory-less policy sees at the last step (the
cue part is zero then, the time part is the same in every episode), so **any policy without
memory** (an MLP, stochastic or deterministic) **scores exactly 1/n_cues in expectation** per
agent and episode; a policy that remembers the cue scores 1. ``cue_always=True`` shows the cue
at every step instead: a control in which an MLP can score 1 too.

The env draws its cues from its own ``torch.Generator`` (``_set_seed``): same seed, same cues.

>>> env = MemoryEnv(num_envs=3, length=4, seed=0)
>>> td = env.rollout(8, break_when_any_done=False)
>>> td["agents", "observation"].shape, td["next", "agents", "reward"].shape, td["next", "done"].shape
(torch.Size([3, 8, 2, 6]), torch.Size([3, 8, 2, 1]), torch.Size([3, 8, 1]))
>>> td["next", "done"][0, :, 0].tolist()
[False, False, False, True, False, False, False, True]

For the trainer: ``env.kind=custom`` with ``env.factory=tests/models/memory_env.py:make_memory_env``
(``env.max_steps`` is the episode length), or :func:`memory_config` below.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import torch
from tensordict import TensorDict, TensorDictBase
from torchrl.data import Categorical, Composite, Unbounded
from torchrl.envs import EnvBase

if TYPE_CHECKING:
    from marl_ppo.config import Config

__all__ = ["MemoryEnv", "make_memory_env", "memory_config", "chance_band", "FACTORY", "MEMORY_OVERRIDES"]


class MemoryEnv(EnvBase):
    """Group ``agents``: a cue one-hot at t=0 only, a time one-hot, reward at the last step for naming the cue."""

    batch_locked = True

    def __init__(
        self,
        num_envs: int = 16,
        n_agents: int = 2,
        n_cues: int = 2,
        length: int = 4,
        seed: int | None = None,
        cue_always: bool = False,
        device: str | torch.device = "cpu",
    ) -> None:
        if length < 2:
            raise ValueError(
                f"MemoryEnv: length must be >= 2 (with 1 step the cue is visible when answering), got {length}"
            )
        if n_cues < 2:
            raise ValueError(f"MemoryEnv: n_cues must be >= 2, got {n_cues}")
        super().__init__(batch_size=torch.Size([num_envs]), device=device)
        self.n_agents, self.n_cues, self.length, self.cue_always = n_agents, n_cues, length, cue_always
        self.group_map = {"agents": [f"agent_{i}" for i in range(n_agents)]}
        B, n = num_envs, n_agents
        self.observation_spec = Composite(
            agents=Composite(observation=Unbounded((B, n, n_cues + length)), shape=(B, n)),
            shape=(B,),
        )
        self.action_spec = Composite(
            agents=Composite(action=Categorical(n_cues, shape=(B, n)), shape=(B, n)),
            shape=(B,),
        )
        self.reward_spec = Composite(agents=Composite(reward=Unbounded((B, n, 1)), shape=(B, n)), shape=(B,))
        self.done_spec = Composite(
            done=Categorical(2, (B, 1), dtype=torch.bool),
            terminated=Categorical(2, (B, 1), dtype=torch.bool),
            shape=(B,),
        )
        self._generator = torch.Generator().manual_seed(0 if seed is None else seed)
        self._cue = torch.zeros(B, n, dtype=torch.long, device=self.device)
        self._t = torch.zeros(B, dtype=torch.long, device=self.device)

    def _obs(self) -> TensorDict:
        B, n = self.batch_size[0], self.n_agents
        cue = torch.nn.functional.one_hot(self._cue, self.n_cues).float()
        if not self.cue_always:
            cue = cue * (self._t == 0).view(B, 1, 1)
        clock = torch.nn.functional.one_hot(self._t.clamp(max=self.length - 1), self.length).float()
        obs = torch.cat([cue, clock.view(B, 1, self.length).expand(B, n, self.length)], dim=-1)
        return TensorDict({"observation": obs}, batch_size=(B, n), device=self.device)

    def _reset(self, tensordict: TensorDictBase | None = None) -> TensorDictBase:
        B, n = self.batch_size[0], self.n_agents
        mask = torch.ones(B, dtype=torch.bool, device=self.device)
        if tensordict is not None and "_reset" in tensordict.keys():
            mask = tensordict.get("_reset").view(B)
        cues = torch.randint(self.n_cues, (B, n), generator=self._generator).to(self.device)
        self._cue = torch.where(mask.view(B, 1), cues, self._cue)
        self._t = torch.where(mask, torch.zeros_like(self._t), self._t)
        done = torch.zeros(B, 1, dtype=torch.bool, device=self.device)
        return TensorDict(
            {"agents": self._obs(), "done": done, "terminated": done.clone()},
            batch_size=self.batch_size,
            device=self.device,
        )

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        B = self.batch_size[0]
        action = tensordict.get(("agents", "action")).reshape(B, self.n_agents).long()
        last = self._t == self.length - 1
        reward = ((action == self._cue) & last.view(B, 1)).float().unsqueeze(-1)
        self._t = self._t + 1
        done = (self._t >= self.length).view(B, 1)
        agents = self._obs()
        agents.set("reward", reward)
        return TensorDict(
            {"agents": agents, "done": done, "terminated": done.clone()}, batch_size=self.batch_size, device=self.device
        )

    def _set_seed(self, seed: int | None) -> None:
        self._generator.manual_seed(0 if seed is None else seed)


def make_memory_env(
    num_envs: int, seed: int, device: str, max_steps: int, n_agents: int = 2, n_cues: int = 2, cue_always: bool = False
) -> MemoryEnv:
    """The trainer's factory: ``env.max_steps`` is the episode length; ``env.kwargs`` may set
    ``n_agents``, ``n_cues`` and ``cue_always``."""
    return MemoryEnv(
        num_envs=num_envs,
        n_agents=n_agents,
        n_cues=n_cues,
        length=max_steps,
        seed=seed,
        cue_always=cue_always,
        device=device,
    )


# ---------------------------------------------------------------------------------------------
# Shared with the recurrent-policy tests (issue 13): the config of the memory task, and the band
# a memory-less policy stays in. The GRU test reuses these:
#
#     from memory_env import memory_config, chance_band
#     cfg = memory_config(["model.kind=gru", f"log.root={tmp_path}"])
#     summary = Trainer(cfg, run_dir=tmp_path / "gru").fit()
#     ret = summary["eval/agents/episode_reward"]      # mean over log.eval_episodes episodes and the agents
#     assert ret > chance_band(...)[1] + ...           # clearly above what no memory can reach
# ---------------------------------------------------------------------------------------------

FACTORY = f"{Path(__file__).resolve()}:make_memory_env"

# A small, fast config (about 10-20 s on one CPU thread): 64 envs x 4-step episodes, 16 episodes of
# each env per batch. Every entry is an existing config key; add the model's (model.kind=gru, ...) on top.
MEMORY_OVERRIDES = [
    "env.kind=custom",
    f"env.factory={FACTORY}",
    "env.kwargs={n_agents: 2, n_cues: 2}",
    "env.num_envs=64",
    "env.max_steps=4",
    "model.hidden=[64, 64]",
    "loss.algorithm=mappo",
    "loss.entropy_coeff=0.01",
    "loss.gamma=0.99",
    "loss.lmbda=0.95",
    "train.frames_per_batch=1024",
    "train.total_frames=20480",
    "train.num_epochs=4",
    "train.minibatch_size=256",
    "train.lr=1e-3",
    "train.num_threads=1",
    "train.seed=0",
    "log.eval_every=0",
    "log.eval_episodes=1000",
    "log.checkpoint_every=0",
    "log.progress=false",
    "log.plot=false",
    "log.loggers=[csv]",
]


def memory_config(overrides: Sequence[str] = ()) -> "Config":
    """The memory task's training config (:data:`MEMORY_OVERRIDES`), then ``overrides`` (``key=value``,
    applied last: ``model.kind=gru``, ``env.kwargs.n_cues=4``, ``log.root=...``, ...)."""
    from marl_ppo.config import load_config

    return load_config(overrides=[*MEMORY_OVERRIDES, *overrides])


def chance_band(n_cues: int, n_agents: int, episodes: int, z: float = 4.0) -> tuple[float, float]:
    """The interval a memory-less policy's mean return (over ``episodes`` episodes and ``n_agents``
    agents) stays in: ``1/n_cues +- z`` standard deviations of that mean.

    A memory-less policy's last-step actions are independent of the cues (it sees none then, and
    the cues are drawn afresh at each reset). Given any such actions, deterministic or sampled,
    correlated between agents or not, the indicators "action == cue" of the ``episodes x n_agents``
    independent uniform cues are i.i.d. Bernoulli(p = 1/n_cues), so their mean has expectation p and
    standard deviation exactly ``sqrt(p (1-p) / (episodes n_agents))``. By the normal approximation
    (2 000 indicators at p = 1/2 is far inside it) ``z = 4`` is exceeded on either side about
    6e-5 of the time.
    """
    p = 1.0 / n_cues
    sd = math.sqrt(p * (1 - p) / (episodes * n_agents))
    return p - z * sd, p + z * sd
