"""One small builder: each group's actor and critic from its spec and the ``model`` config."""

from __future__ import annotations

from collections.abc import Mapping

import torch
from tensordict.nn import TensorDictModule

from marl_ppo.groups.specs import GroupSpec, seat_difference
from marl_ppo.models.actor import build_actor
from marl_ppo.models.critic import build_critic, build_global_critic
from marl_ppo.models.modules import Networks
from marl_ppo.models.options import ModelConfig
from marl_ppo.models.state_critic import build_state_critic

__all__ = ["build_models"]


def build_models(
    groups: Mapping[str, GroupSpec],
    model: ModelConfig,
    *,
    centralized: bool = True,
    value_norm: str = "none",
    popart_beta: float = 0.95,
    device: torch.device | str | None = None,
    shared: Mapping[str, str] | None = None,
) -> tuple[dict[str, TensorDictModule], dict[str, TensorDictModule], Networks]:
    """``(actors, critics, networks)``: one actor and one critic per group (a ``global`` critic is one
    module in every entry), and the table of the agent MLPs they run (the router keeps it).

    ``centralized``: a group critic sees the group's joint observation (the algorithm's critic kind,
    :mod:`marl_ppo.algorithms`), else each agent's own.

    ``shared`` maps a group to another whose networks it plays with (``opponents: {g: self}``): its
    actor runs the other's network on its own keys, and the same critic object serves both (the
    router trains the shared parameters from both groups' losses).
    """
    unknown = sorted(set(model.groups) - set(groups))
    if unknown:
        raise KeyError(f"model.groups names unknown group(s) {unknown}; the env's groups are {list(groups)}")
    actors, critics, networks = {}, {}, Networks()
    for g, spec in groups.items():
        m = model.for_group(g)
        actors[g] = build_actor(
            spec,
            share_params=m.share_params,
            hidden=m.hidden,
            activation=m.activation,
            device=device,
            kind=m.kind,
            options=m.options_by_kind(m.kind),
            networks=networks,
        )
        if model.critic == "group" and m.critic_inputs != "observation":  # the env's global state
            critics[g] = build_state_critic(
                spec,
                m.critic_inputs,
                share_params=m.share_params,
                hidden=m.hidden,
                activation=m.activation,
                device=device,
                value_norm=value_norm,
                popart_beta=popart_beta,
            )
        elif model.critic == "group":
            critics[g] = build_critic(
                spec,
                centralized=centralized,
                share_params=m.share_params,
                hidden=m.hidden,
                activation=m.activation,
                device=device,
                value_norm=value_norm,
                popart_beta=popart_beta,
                kind=m.group_critic_kind,
                options=m.options_by_kind(m.group_critic_kind),
                networks=networks,
            )
    if model.critic == "global":
        if not centralized:
            raise ValueError("model.critic=global is a centralised critic; the algorithm's critic is decentralised")
        critic = build_global_critic(
            groups,
            hidden=model.hidden,
            activation=model.activation,
            device=device,
            value_norm=value_norm,
            popart_beta=popart_beta,
        )
        critics = {g: critic for g in groups}
    for g, source in (shared or {}).items():
        _check_shared(groups, model, value_norm, g, source)
        actors[g] = build_actor(groups[g], net=networks.of(actors[source]), networks=networks)
        critics[g] = critics[source]
    return actors, critics, networks


def _check_shared(groups: Mapping[str, GroupSpec], model: ModelConfig, value_norm: str, g: str, source: str) -> None:
    """Whether group ``g`` can play with ``source``'s networks; a ValueError saying why not."""
    why = seat_difference(groups[g], groups[source]) if source in groups else f"no group {source!r}"
    kind = model.for_group(source).kind
    if why is None and (model.recurrent or kind != "mlp" or len(groups[g].observation_keys) > 1):
        why = "only an MLP on one observation entry is shared between seats yet (model.kind=mlp, no recurrent critic)"
    if why is None and model.critic_inputs != "observation":
        why = f"model.critic_inputs={model.critic_inputs}: each group has its own state critic"
    if why is None and model.critic != "group":
        why = "model.critic=global already serves every group"
    if why is None and value_norm != "none":
        why = f"loss.value_norm={value_norm} keeps statistics per group, not per shared critic"
    if why is not None:
        raise ValueError(f"opponents.{g}: plays with the networks of group {source!r} (self or pool), but {why}")
