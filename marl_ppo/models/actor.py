"""Decentralised policies: one network over each agent's observation, heads from the action spec.

>>> from torchrl.envs.libs.vmas import VmasEnv
>>> from marl_ppo.groups.specs import read_group_specs
>>> env = VmasEnv("navigation", num_envs=2, n_agents=2, continuous_actions=True, seed=0)
>>> group = read_group_specs(env)["agents"]
>>> td = build_actor(group)(env.reset())
>>> td["agents", "action"].shape, td["agents", "action_log_prob"].shape
(torch.Size([2, 2, 2]), torch.Size([2, 2]))
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from tensordict import TensorDictBase
from tensordict.nn import (
    CompositeDistribution,
    InteractionType,
    NormalParamExtractor,
    TensorDictModuleBase,
    TensorDictSequential,
)
from tensordict.utils import NestedKey
from torch import nn
from torchrl.modules import ProbabilisticActor

from marl_ppo.groups.specs import GroupSpec
from marl_ppo.models.chain import trunk_of
from marl_ppo.models.distributions import Head, action_heads
from marl_ppo.models.inputs import flat_inputs
from marl_ppo.models.mlp import agent_mlp
from marl_ppo.models.modules import Networks, TensorOutModule
from marl_ppo.models.registry import model_kind

__all__ = ["build_actor", "seat_actor", "Reseated"]


def build_actor(
    group: GroupSpec,
    *,
    share_params: bool = True,
    hidden: Sequence[int] = (256, 256),
    activation: str = "tanh",
    device: torch.device | str | None = None,
    net: nn.Module | None = None,
    kind: str | Sequence[str] = "mlp",
    options: Mapping[str, Mapping[str, Any]] | None = None,
    networks: Networks | None = None,
    agent_id: bool = False,
) -> ProbabilisticActor:
    """A decentralised policy for ``group``: one MLP over each agent's observation, heads from its action spec.

    Writes ``(group, "action")`` and its log-prob: ``(group, "action_log_prob")`` for a plain action,
    one ``<head>_log_prob`` entry beside each head for a composite action.

    The policy samples its actions unless told otherwise (``set_exploration_type(DETERMINISTIC)``
    gives the mode): torchrl's default outside a collector would be the mode, and PPO trained on
    rollouts of the mode silently stops exploring.

    ``net`` replaces the MLP (``[*B, n_agents, obs_dim] -> [*B, n_agents, n_params]``); the
    network arguments are then unused. ``networks`` records which MLP the actor runs (a bundle or
    another seat reads it there; :class:`~marl_ppo.models.modules.Networks`). ``kind`` names a registered model kind
    (:mod:`~marl_ppo.models.registry`), or a chain of them (:mod:`~marl_ppo.models.chain`), and ``options``
    each kind's own, by kind: a kind with a trunk (``gru``/``lstm``: the MLP of ``hidden`` into a
    recurrent cell of ``rnn_hidden`` units) reports its output width, and a linear layer maps it to the
    heads' parameters. Several vector observation entries are concatenated.
    """
    heads = action_heads(group)
    n_out = sum(h.n_params for h in heads)
    obs_key, trunk, width = group.observation_keys[0], None, None
    built = trunk_of(
        group, kind, role="actor", centralized=False, share_params=share_params, hidden=hidden,
        activation=activation, device=device, options=options or {},
    )  # fmt: skip
    if built is not None:
        (trunk, obs_key, width), net, hidden = built, None, ()
    elif net is None:
        trunk, obs_key, width = flat_inputs(group, kind=kind)
    if net is None:
        net = agent_mlp(
            group,
            n_out,
            centralized=False,
            share_params=share_params,
            hidden=hidden,
            activation=activation,
            device=device,
            n_inputs=width,
            agent_id=agent_id,
        )
    actor = _actor_on(group, heads, net, obs_key, trunk)
    # a bundle rebuilds the actor around the bare network: only a kind without state allows it
    if networks is not None and isinstance(kind, str) and model_kind(kind).bundleable and trunk is None:
        networks.record(actor, net)
    return actor


def _actor_on(
    group: GroupSpec, heads: list[Head], net: nn.Module, obs_key: NestedKey, trunk: TensorDictSequential | None
) -> ProbabilisticActor:
    """The probabilistic actor: ``net`` on ``obs_key`` (after ``trunk``, if any) gives the heads' parameters."""
    g = group.name
    if not group.is_composite_action:
        head = heads[0]
        if head.param_names == ("loc", "scale"):
            module = TensorOutModule(
                nn.Sequential(net, NormalParamExtractor()),
                in_keys=[obs_key],
                out_keys=[(g, "loc"), (g, "scale")],
            )
            in_keys = {"loc": (g, "loc"), "scale": (g, "scale")}
        else:
            module = TensorOutModule(net, in_keys=[obs_key], out_keys=[(g, "logits")])
            in_keys = {"logits": (g, "logits")}
            if group.action_mask_key is not None:
                in_keys["mask"] = group.action_mask_key
        if trunk is not None:
            module = TensorDictSequential(trunk, module)
        return ProbabilisticActor(
            module,
            in_keys=in_keys,
            out_keys=[group.keys.action],
            distribution_class=head.dist_class,
            distribution_kwargs=head.dist_kwargs,
            return_log_prob=True,
            log_prob_key=group.keys.log_prob,
            default_interaction_type=InteractionType.RANDOM,
        )
    return _composite_actor(group, heads, net, obs_key, trunk)


class _SplitHeads(nn.Module):
    """Splits the MLP output into each head's distribution parameters (loc/scale or logits)."""

    def __init__(self, heads: list[Head]) -> None:
        super().__init__()
        self.sizes = [h.n_params for h in heads]
        self.kinds = [h.param_names for h in heads]
        self.normal = NormalParamExtractor()

    def forward(self, out: torch.Tensor) -> tuple[torch.Tensor, ...]:
        params: list[torch.Tensor] = []
        for chunk, kind in zip(out.split(self.sizes, dim=-1), self.kinds):
            if kind == ("loc", "scale"):
                params.extend(self.normal(chunk))
            else:
                params.append(chunk)
        return tuple(params)


def _composite_actor(
    group: GroupSpec, heads: list[Head], net: nn.Module, obs_key: NestedKey, trunk: TensorDictSequential | None = None
) -> ProbabilisticActor:
    g = group.name
    params_key = (g, "params")
    out_keys = [params_key + h.name + (p,) for h in heads for p in h.param_names]
    module = TensorOutModule(nn.Sequential(net, _SplitHeads(heads)), in_keys=[obs_key], out_keys=out_keys)
    if trunk is not None:
        module = TensorDictSequential(trunk, module)
    return ProbabilisticActor(
        module,
        in_keys={"params": params_key},
        out_keys=[group.keys.action + h.name for h in heads],
        distribution_class=CompositeDistribution,
        distribution_kwargs={
            "distribution_map": {h.key: h.dist_class for h in heads},
            "name_map": {h.key: group.keys.action + h.name for h in heads},
            "extra_kwargs": {h.key: h.dist_kwargs for h in heads if h.dist_kwargs},
        },
        return_log_prob=True,
        default_interaction_type=InteractionType.RANDOM,
    )


def seat_actor(
    spec: GroupSpec, actor: nn.Module, networks: Networks, *, frozen: bool = False, what: str = "the policy"
) -> nn.Module:
    """``actor``'s network (as ``networks`` records it) in a policy on ``spec``'s keys: a trained policy
    playing another group's seat.

    ``frozen``: a copy of the network without gradients (an opponent); else the network itself, shared.
    An actor built around one of our MLPs is rebuilt on ``spec``'s keys; any other (a trunk: ``cnn``,
    ``deepsets``, ``gnn``, a chain) is wrapped in :class:`Reseated`. A ValueError (``what`` names the
    actor) for one that writes no group's action.
    """
    net = networks.of(actor)
    if net is None:  # a policy with a trunk (cnn, deepsets, gnn, a chain): reads the seat as its own group
        source = _group_of(actor, what)
        if frozen:
            actor = copy.deepcopy(actor).requires_grad_(False)
        return actor if source == spec.name else Reseated(actor, source=source, seat=spec.name)
    if frozen:
        net = copy.deepcopy(net).requires_grad_(False)
    return build_actor(spec, net=net)


class Reseated(TensorDictModuleBase):
    """Group ``source``'s actor playing group ``seat`` (of the same specs): the seat's entries are handed to
    the actor under ``source``'s name, and what it writes (action, log-prob, recurrent state) comes back
    under ``seat``'s. Entries outside the groups (a recurrent policy's ``is_init``) pass as they are."""

    def __init__(self, actor: nn.Module, *, source: str, seat: str) -> None:
        super().__init__()
        self.actor, self.source, self.seat = actor, source, seat
        self.in_keys = [self._moved(k, source, seat) for k in actor.in_keys]
        self.out_keys = [self._moved(k, source, seat) for k in actor.out_keys]

    @staticmethod
    def _moved(key: NestedKey, old: str, new: str) -> NestedKey:
        return (new, *key[1:]) if isinstance(key, tuple) and key[0] == old else key

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        view = tensordict.exclude(self.seat, self.source)
        view.set(self.source, tensordict.get(self.seat))
        out = self.actor(view)
        tensordict.set(self.seat, out.get(self.source))
        return tensordict


def _group_of(actor: nn.Module, what: str) -> str:
    """The group an actor acts for: the first entry of its first output key."""
    keys = [k for k in getattr(actor, "out_keys", []) if isinstance(k, tuple)]
    if not keys:
        raise ValueError(f"{what} writes no group action (out_keys {getattr(actor, 'out_keys', None)})")
    return keys[0][0]
