"""One small builder: each group's actor and critic from its spec and the ``model`` config."""

from __future__ import annotations

from collections.abc import Mapping

import torch
from tensordict.nn import TensorDictModule

from marl_ppo.groups.specs import GroupSpec
from marl_ppo.models.actor import build_actor
from marl_ppo.models.critic import build_critic, build_global_critic
from marl_ppo.models.options import ModelConfig

__all__ = ["build_models"]


def build_models(
    groups: Mapping[str, GroupSpec],
    model: ModelConfig,
    *,
    algorithm: str = "mappo",
    value_norm: str = "none",
    popart_beta: float = 0.95,
    device: torch.device | str | None = None,
) -> tuple[dict[str, TensorDictModule], dict[str, TensorDictModule]]:
    """``(actors, critics)``, one of each per group; a ``global`` critic is one module in every entry."""
    unknown = sorted(set(model.groups) - set(groups))
    if unknown:
        raise KeyError(f"model.groups names unknown group(s) {unknown}; the env's groups are {list(groups)}")
    actors, critics = {}, {}
    for g, spec in groups.items():
        m = model.for_group(g)
        actors[g] = build_actor(
            spec,
            share_params=m.share_params,
            hidden=m.hidden,
            activation=m.activation,
            device=device,
            kind=m.kind,
            rnn_hidden=m.rnn_hidden,
        )
        if model.critic == "group":
            critics[g] = build_critic(
                spec,
                centralized=algorithm == "mappo",
                share_params=m.share_params,
                hidden=m.hidden,
                activation=m.activation,
                device=device,
                value_norm=value_norm,
                popart_beta=popart_beta,
                kind=m.group_critic_kind,
                rnn_hidden=m.rnn_hidden,
            )
    if model.critic == "global":
        if algorithm != "mappo":
            raise ValueError(f"model.critic=global is MAPPO's critic; algorithm is {algorithm!r}")
        critic = build_global_critic(
            groups,
            hidden=model.hidden,
            activation=model.activation,
            device=device,
            value_norm=value_norm,
            popart_beta=popart_beta,
        )
        critics = {g: critic for g in groups}
    return actors, critics
