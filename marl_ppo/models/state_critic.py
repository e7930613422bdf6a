"""A group critic on the env's global state (``model.critic_inputs``): HARL's ``EP`` and ``FP`` inputs.

An env with ``env.state=true`` gives its global state once per step, at the root entry ``state``
``[*B, S]`` (MaMuJoCo: every joint's position and velocity, which no agent observes whole). The
critic puts it beside each agent, ``(group, "global_state")`` ``[*B, n_agents, S]`` (an expanded
view: the batch stores the state once), and runs an ordinary per-agent MLP critic on it: on the
state alone (``state``: with shared parameters every agent gets the same ``V(s)``, HARL's ``EP``) or
on each agent's own observation followed by the state (``state_and_observation``: HARL's ``FP``).
The policies never read the state; the evaluation and exported policies need none.

>>> import torch
>>> from torchrl.data import Unbounded
>>> from marl_ppo.groups.specs import GroupSpec
>>> spec = GroupSpec("g", ("a", "b"), (("g", "observation"),), Unbounded(shape=(2, 1)), 0, ("g", "reward"),
...                  observation_shape=(2, 3), state_spec=Unbounded(shape=(5,)))
>>> critic = build_state_critic(spec, "state_and_observation", hidden=[8])
>>> td = critic(TensorDict({"state": torch.zeros(4, 5), "g": {"observation": torch.zeros(4, 2, 3)}}, [4]))
>>> td["g", "global_state"].shape, td["g", "state_value"].shape
(torch.Size([4, 2, 5]), torch.Size([4, 2, 1]))
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from tensordict import TensorDict  # noqa: F401 (the example)
from tensordict.nn import TensorDictModule, TensorDictSequential
from torch import nn
from torchrl.data import Unbounded

from marl_ppo.groups.specs import GroupSpec, inputs_spec
from marl_ppo.models.critic import build_critic
from marl_ppo.models.modules import TensorOutModule

__all__ = ["build_state_critic", "state_critic_spec", "StateToAgents", "STATE_KEY"]

STATE_KEY = "state"  # the env's root entry (torchrl's PettingZoo wrapper, return_state=True)


class StateToAgents(nn.Module):
    """``[*B, S]`` -> ``[*B, n_agents, S]`` float32: the global state beside each agent (a view)."""

    def __init__(self, n_agents: int) -> None:
        super().__init__()
        self.n_agents = n_agents

    def forward(self, state: torch.Tensor) -> torch.Tensor:
        return state.float().unsqueeze(-2).expand(*state.shape[:-1], self.n_agents, state.shape[-1])


def state_critic_spec(group: GroupSpec, inputs: str) -> GroupSpec:
    """``group`` as its state critic sees it: ``(group, "global_state")``, after the agent's own
    observation entries for ``state_and_observation``. A ValueError where the env gives no vector state."""
    state = group.state_spec
    if state is None:
        raise ValueError(
            f"group {group.name!r}: model.critic_inputs={inputs} reads the env's global state, but the env gives "
            f"no root {STATE_KEY!r} entry (env.state=true; a custom env gives it itself)"
        )
    if len(state.shape) != 1:
        raise ValueError(
            f"group {group.name!r}: model.critic_inputs={inputs} reads a vector state, but the env's "
            f"{STATE_KEY!r} has per-step shape {list(state.shape)}"
        )
    key, n = (group.name, "global_state"), group.n_agents
    entries = {} if inputs == "state" else {k: group.inputs[k] for k in group.observation_keys}
    entries[key] = Unbounded(shape=(n, state.shape[0]), dtype=torch.float32)
    return dataclasses.replace(
        group,
        observation_keys=tuple(entries),
        observation_spec=inputs_spec(entries, n),
        observation_shape=(n, state.shape[0]) if inputs == "state" else group.observation_shape,
    )


def build_state_critic(group: GroupSpec, inputs: str, **kwargs: Any) -> TensorDictModule:
    """A per-agent critic (``centralized=False``) on the state, and the agent's observation for
    ``state_and_observation``; ``kwargs`` go to :func:`~marl_ppo.models.critic.build_critic`
    (widths, activation, sharing, value normalisation). It writes ``(group, "state_value")``."""
    spec = state_critic_spec(group, inputs)
    beside = TensorOutModule(StateToAgents(group.n_agents), in_keys=[STATE_KEY], out_keys=[spec.observation_keys[-1]])
    return TensorDictSequential(beside, build_critic(spec, centralized=False, **kwargs))
