"""One small builder: each group's actor and critic from its spec and the ``model`` config."""

from __future__ import annotations

from collections.abc import Mapping

import torch
from tensordict.nn import TensorDictModule

from marl_ppo.groups.specs import GroupSpec, seat_difference
from marl_ppo.models.actor import build_actor
from marl_ppo.models.critic import build_critic, build_global_critic
from marl_ppo.models.image_checks import check_images, check_param_count, count_parameters
from marl_ppo.models.modules import Networks, share_networks
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
    actor and critic are built as the other's, on its own keys, and run the other's networks (any model
    kind: :func:`~marl_ppo.models.modules.share_networks`); the router trains the shared parameters
    from both groups' losses.

    Refused before anything is built: a conv stack too deep for a group's image; warned: a model over
    ``model.max_params`` parameters (:mod:`~marl_ppo.models.image_checks`).
    """
    unknown = sorted(set(model.groups) - set(groups))
    if unknown:
        raise KeyError(f"model.groups names unknown group(s) {unknown}; the env's groups are {list(groups)}")
    shared = dict(shared or {})
    for g, source in shared.items():
        _check_shared(groups, model, value_norm, g, source)
    # from the specs, before any weight is allocated: a conv stack too deep for an image, a huge image model
    warned = check_images(groups, model, centralized=centralized, shared=shared)
    actors, critics, networks = {}, {}, Networks()
    kw = dict(centralized=centralized, value_norm=value_norm, popart_beta=popart_beta, device=device)
    for g, spec in groups.items():
        # a seat on another group's networks is built as that group's, then tied to them (share_networks)
        actors[g], critic = _group_models(spec, model.for_group(shared.get(g, g)), model, networks, **kw)
        if critic is not None:
            critics[g] = critic
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
    for g, source in shared.items():  # the same architecture on g's keys: tie it to the source's networks
        for modules in (actors, critics):
            share_networks(modules[g], modules[source])
            if networks.of(modules[source]) is not None:
                networks.record(modules[g], networks.of(modules[source]))
    if not warned:
        check_param_count(count_parameters(*actors.values(), *critics.values()), model)
    return actors, critics, networks


def _group_models(
    spec: GroupSpec,
    m: ModelConfig,
    model: ModelConfig,
    networks: Networks,
    *,
    centralized,
    value_norm,
    popart_beta,
    device,
) -> tuple[TensorDictModule, TensorDictModule | None]:
    """One group's actor, and its critic unless the critic is ``global`` (built for all groups at once)."""
    actor = build_actor(
        spec,
        share_params=m.share_params,
        hidden=m.hidden,
        activation=m.activation,
        device=device,
        kind=m.kind,
        options=m.options_by_kind(m.kind),
        networks=networks,
        agent_id=m.agent_id,
    )
    net = dict(
        share_params=m.share_params, hidden=m.hidden, activation=m.activation, device=device, agent_id=m.agent_id
    )
    if model.critic != "group":
        return actor, None
    if m.critic_inputs != "observation":  # the env's global state
        return actor, build_state_critic(spec, m.critic_inputs, **net, value_norm=value_norm, popart_beta=popart_beta)
    critic = build_critic(
        spec,
        centralized=centralized,
        **net,
        value_norm=value_norm,
        popart_beta=popart_beta,
        kind=m.group_critic_kind,
        options=m.options_by_kind(m.group_critic_kind),
        networks=networks,
    )
    return actor, critic


def _check_shared(groups: Mapping[str, GroupSpec], model: ModelConfig, value_norm: str, g: str, source: str) -> None:
    """Whether group ``g`` can play with ``source``'s networks; a ValueError saying why not."""
    why = seat_difference(groups[g], groups[source]) if source in groups else f"no group {source!r}"
    if why is None and g in model.groups:
        why = f"model.groups.{g} gives it a model of its own; set the model of {source!r} instead"
    if why is None and model.critic_inputs != "observation":
        why = f"model.critic_inputs={model.critic_inputs}: each group has its own state critic"
    if why is None and model.critic != "group":
        why = "model.critic=global already serves every group"
    if why is None and value_norm != "none":
        why = f"loss.value_norm={value_norm} keeps statistics per group, not per shared critic"
    if why is not None:
        raise ValueError(f"opponents.{g}: plays with the networks of group {source!r} (self or pool), but {why}")
