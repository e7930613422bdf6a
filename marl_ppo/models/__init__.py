"""Policies and critics, built from a group's specs and the config.

One file per part: :mod:`~marl_ppo.models.distributions` (action spec -> heads and their
distributions), :mod:`~marl_ppo.models.mlp` (agent MLPs), :mod:`~marl_ppo.models.actor`
(policies), :mod:`~marl_ppo.models.critic` (value networks, value normalisation),
:mod:`~marl_ppo.models.builder` (all of them from the config). The router sees actors and critics only.
"""

from marl_ppo.models.actor import build_actor
from marl_ppo.models.builder import build_models
from marl_ppo.models.critic import build_critic, build_global_critic, value_norms
from marl_ppo.models.distributions import Head, MultiCategorical, StableTanhNormal, action_heads
from marl_ppo.models.mlp import SharedAgentMLP, agent_mlp
from marl_ppo.models.modules import TensorOutModule, group_network

__all__ = [
    "build_models",
    "build_global_critic",
    "value_norms",
    "Head",
    "action_heads",
    "build_actor",
    "build_critic",
    "group_network",
    "SharedAgentMLP",
    "agent_mlp",
    "TensorOutModule",
    "StableTanhNormal",
    "MultiCategorical",
]
