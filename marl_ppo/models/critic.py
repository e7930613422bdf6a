"""Value networks: per group (MAPPO's centralised or IPPO's decentralised critic).

>>> from torchrl.envs.libs.vmas import VmasEnv
>>> from marl_ppo.groups import read_group_specs
>>> env = VmasEnv("navigation", num_envs=2, n_agents=2, continuous_actions=True, seed=0)
>>> group = read_group_specs(env)["agents"]
>>> build_critic(group, centralized=True)(env.reset())["agents", "state_value"].shape
torch.Size([2, 2, 1])
"""
from __future__ import annotations

from collections.abc import Sequence

import torch
from tensordict.nn import TensorDictModule
from torch import nn

from marl_ppo.groups import GroupSpec
from marl_ppo.models.mlp import agent_mlp
from marl_ppo.models.modules import TensorOutModule, stamp_network

__all__ = ["build_critic"]


def build_critic(
    group: GroupSpec,
    *,
    centralized: bool = True,
    share_params: bool = True,
    hidden: Sequence[int] = (256, 256),
    activation: str = "tanh",
    device: torch.device | str | None = None,
    net: nn.Module | None = None,
) -> TensorDictModule:
    """A value network writing ``(group, "state_value")`` ``[*B, n_agents, 1]``.

    ``centralized=True`` is MAPPO's critic (each agent's value sees all the group's observations);
    ``False`` is IPPO's (each agent's value sees its own). ``net`` replaces the MLP.
    """
    if net is None:
        net = agent_mlp(group, 1, centralized=centralized, share_params=share_params,
                   hidden=hidden, activation=activation, device=device)
    critic = TensorOutModule(net, in_keys=[group.observation_keys[0]], out_keys=[group.keys.value])
    return stamp_network(critic, net)


