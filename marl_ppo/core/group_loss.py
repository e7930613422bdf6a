"""Each group's PPO loss, as the router builds it and calls it.

Built by :class:`LossBuilder`: the algorithm's torchrl loss class with the overrides of
:mod:`marl_ppo.core.losses` mixed in, set on the group's keys (:class:`~marl_ppo.groups.GroupKeys`),
with its heads' entropy coefficients, its critic's value normaliser and torchrl's GAE estimator
(:mod:`marl_ppo.core.advantages`); or one loss for the groups of a bundle (:mod:`marl_ppo.core.bundles`).
Called by :func:`group_loss`: torchrl's loss on the group's entries, then what torchrl does not
report: a masked group's diagnostics over its kept entries only, each head's diagnostics for a
composite action, and every entry but the ``loss_*`` terms as a detached scalar.

>>> from torchrl.data import Bounded
>>> from marl_ppo.algorithms import algorithm
>>> from marl_ppo.groups import GroupSpec
>>> from marl_ppo.models import Networks, action_heads, build_actor, build_critic
>>> spec = GroupSpec(name="red", agents=("red_0", "red_1"), observation_keys=(("red", "observation"),),
...                  action_spec=Bounded(-1.0, 1.0, shape=(2, 2)), env_batch_ndim=0,
...                  raw_reward_key=("red", "reward"), observation_shape=(2, 6))
>>> build = LossBuilder(algorithm("ippo"), {"red": action_heads(spec)}, 0.01, {"red:action": 0.02}, Networks(),
...                     gamma=0.99, lmbda=0.9, clip_epsilon=0.2)
>>> loss = build.group("red", spec, build_actor(spec, hidden=(8,)), build_critic(spec, hidden=(8,)))
>>> type(loss).__name__, loss.head_entropy_coeffs, loss.tensor_keys.advantage
('IPPOLoss', tensor([0.0200]), ('red', 'advantage'))
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModule
from torch import nn

from marl_ppo.algorithms import Algorithm
from marl_ppo.core.advantages import group_estimator
from marl_ppo.core.bundles import GroupBatchNet, GroupBundle, bundle_spec, find_bundles
from marl_ppo.core.diagnostics import Reducer, head_key, masked_diagnostics, per_head_diagnostics
from marl_ppo.core.losses import per_head_loss
from marl_ppo.groups.specs import GroupSpec
from marl_ppo.models import Head, Networks, TensorOutModule, action_heads, build_actor
from marl_ppo.models.critic import NormalizedValueNet, SlicedValueNorm, value_norms

__all__ = ["LossBuilder", "group_loss", "reads_own_group_only"]

# Loss entries a head name must not shadow in the group's loss tensordict.
_RESERVED = {"entropy", "kl_approx", "clip_fraction", "ESS", "explained_variance", "max_ratio", "mean_ratio"}


class LossBuilder:
    """Builds one router's losses: one algorithm's loss class, the same arguments for every group.

    Args:
        entry: the algorithm: its torchrl loss class, its own ``loss_kwargs``, and whether its update
            mode steps one group at a time (then no group is bundled).
        heads: each group's action heads; ``entropy_coeff`` and ``head_entropy_coeff`` give each
            head's coefficient (as :class:`~marl_ppo.core.router.GroupRouter` takes them).
        networks: the agent MLPs the actors and critics run (a bundle's modules run them).
        gamma, lmbda: torchrl's GAE estimator's.
        estimator, nstep: ``gae`` (torchrl's ``MultiAgentGAE``) or ``nstep`` (``nstep``-step returns,
            :class:`~marl_ppo.core.advantages.NStepReturns`).
        **loss_kwargs: torchrl's arguments of every group's loss (``clip_epsilon``, ``critic_coeff``, ...).
    """

    def __init__(
        self,
        entry: Algorithm,
        heads: Mapping[str, list[Head]],
        entropy_coeff: float,
        head_entropy_coeff: Mapping[str, float] | None,
        networks: Networks,
        *,
        gamma: float,
        lmbda: float,
        estimator: str = "gae",
        nstep: int = 5,
        **loss_kwargs: Any,
    ) -> None:
        self.heads, self.networks, self.gamma, self.lmbda = heads, networks, gamma, lmbda
        self.estimator = dict(gamma=gamma, lmbda=lmbda, estimator=estimator, nstep=nstep)
        self.head_coeffs = _head_coefficients(heads, float(entropy_coeff), dict(head_entropy_coeff or {}))
        # value clipping's fraction is not split per group; a sequential update mode steps one group at a time
        self.bundled = loss_kwargs.get("clip_value") is None and not entry.sequential
        self.clip_epsilon = loss_kwargs["clip_epsilon"]
        self.kwargs = {**loss_kwargs, "entropy_coeff": float(entropy_coeff), "functional": False, **entry.loss_kwargs}
        self.loss_class = per_head_loss(entry.loss_class())

    def loss(self, spec: GroupSpec, actor, critic, coeffs: list[float], **extra) -> nn.Module:
        """A torchrl PPO loss on ``spec``'s keys, with its heads' entropy coefficients ``coeffs``;
        ``extra``: :class:`~marl_ppo.core.losses.per_head_loss`'s and torchrl's further arguments."""
        keys = spec.keys
        heads = action_heads(spec) if spec.is_composite_action else []  # a plain action: entropy_coeff
        entropy_heads = {head_key(keys.action, h, "_entropy"): i for i, h in enumerate(heads)} or None
        loss = self.loss_class(
            actor,
            critic,
            head_coeffs=coeffs,
            entropy_heads=entropy_heads,
            mask_key=keys.mask,
            weight_key=keys.update_weight,
            unit_mask_key=keys.update_mask,
            **self.kwargs,
            **extra,
        )
        loss.set_keys(**keys.value_keys())
        if not spec.is_composite_action:
            loss.set_keys(action=keys.action, sample_log_prob=keys.log_prob)
        return loss

    def group(self, g: str, spec: GroupSpec, actor, critic) -> nn.Module:
        """Group ``g``'s loss, with its critic's value normaliser (loss.value_norm), if it has one."""
        norm = value_norms(critic)[g][0] if value_norms(critic) else None
        # a masked group records per element: its diagnostics count its kept entries (core/diagnostics.py)
        critic, per_element = _on_group_keys(critic, spec), bool(spec.keys.mask)
        loss = self.loss(spec, actor, critic, self.head_coeffs[g], value_norm=norm, per_element=per_element)
        # the one advantage path (core/advantages.py): the estimator on the values our call wrote
        loss.make_value_estimator(group_estimator(spec.keys, **self.estimator))
        return loss

    def bundles(self, groups: Mapping[str, GroupSpec], actors, critics, own_only: Callable) -> list[GroupBundle]:
        """One loss call for each set of groups with equal signatures (:func:`~marl_ppo.core.bundles.find_bundles`;
        ``own_only(g)``: whether group ``g`` reads only its own entries)."""
        if not self.bundled:
            return []
        members = find_bundles(groups, actors, critics, self.head_coeffs, own_only, self.networks)
        return [self.bundle(f"__bundle{i}__", names, groups, actors, critics) for i, names in enumerate(members)]

    def bundle(self, name: str, members: list[str], groups: Mapping[str, GroupSpec], actors, critics) -> GroupBundle:
        """One loss call for the groups ``members`` (equal signatures), each on its own networks."""
        specs = [groups[g] for g in members]
        spec, n = bundle_spec(name, specs), specs[0].n_agents
        actor = build_actor(spec, net=GroupBatchNet([self.networks.of(actors[g]) for g in members], n))
        net = GroupBatchNet([self.networks.of(critics[g]) for g in members], n)
        norms = [value_norms(critics[g])[g][0] for g in members if value_norms(critics[g])]
        sliced = SlicedValueNorm(norms, n) if norms else None
        if sliced is not None:  # each group's slice de-normalised with its own statistics
            net = NormalizedValueNet(net, {name: sliced}, {})
        critic = TensorOutModule(net, in_keys=[spec.observation_keys[0]], out_keys=[spec.keys.value])
        coeffs = self.head_coeffs[members[0]]
        loss = self.loss(spec, actor, critic, coeffs, value_norm=sliced, per_element=True, reduction="none")
        diagnostics = partial(per_head_diagnostics, self.heads[members[0]], self.clip_epsilon)
        return GroupBundle(spec, members, loss, diagnostics)


def group_loss(
    loss: nn.Module,
    spec: GroupSpec,
    heads: list[Head],
    clip_epsilon: float,
    td: TensorDictBase,
    own_only: bool,
    entropy_scale: torch.Tensor | None = None,
) -> TensorDictBase:
    """One group's ``loss_*`` terms and detached scalar diagnostics on the minibatch ``td``.

    ``own_only``: the group's loss reads only its own entries, and is given only those (the loss clones
    what it is given). ``entropy_scale``: every entropy coefficient's factor in this call (``None``: 1).
    """
    keys = spec.keys
    sub = td.select(spec.name) if own_only else td
    if keys.mask is not None and loss.normalize_advantage and keys.mask in td.keys(include_nested=True):
        # torchrl standardises the advantage over the entries "shifted_valid" marks:
        # padding (agents that left the episode) stays out of the statistics
        sub = sub.copy() if sub is td else sub
        sub.set("shifted_valid", td.get(keys.mask))
    loss_td = loss(sub, entropy_scale=entropy_scale)
    record, reduce = loss.record.take(), torch.mean
    mask = td.get(keys.mask, None) if record.per_element else None
    if mask is not None:  # torchrl's diagnostics count the padding too
        reducer = Reducer(mask)
        for name, value in masked_diagnostics(record, loss_td.keys(), reducer, loss._clip_bounds).items():
            loss_td.set(name, value[0])
        reduce = lambda x: reducer.mean(x)[0]  # noqa: E731
    if spec.is_composite_action:
        entropy = loss_td.pop("composite_entropy", None)
        for name, value in per_head_diagnostics(
            heads, clip_epsilon, keys.action, record.log_prob, td, entropy, reduce
        ).items():
            loss_td.set(name, value)
    # every non-loss entry a detached scalar (ESS and explained variance come out per agent/time)
    for key, value in list(loss_td.items(include_nested=True, leaves_only=True)):
        name = key if isinstance(key, str) else key[-1]
        if not name.startswith("loss_") and (value.ndim or value.requires_grad):
            loss_td.set(key, value.detach().float().mean())
    return loss_td


def reads_own_group_only(spec: GroupSpec, critic: TensorDictModule) -> bool:
    """Whether every entry the group's loss reads lives under the group's own key."""
    own = spec.keys
    keys = [*spec.observation_keys, *critic.in_keys, spec.action_mask_key, own.mask, own.action, own.log_prob]
    keys += [own.advantage, own.value_target, own.value]
    return all(k is None or (isinstance(k, tuple) and len(k) > 1 and k[0] == spec.name) for k in keys)


def _on_group_keys(critic: TensorDictModule, spec: GroupSpec) -> TensorDictModule:
    """A critic reading this group's observation and writing its value key.

    A critic object shared by several groups is re-wrapped per group around the same network,
    so its parameters are shared while each group's values land under its own keys.
    """
    in_keys, out_keys = list(spec.observation_keys), [spec.keys.value]
    if list(critic.out_keys) == out_keys:  # built for this group (on its observations, or the state too)
        return critic
    if len(critic.out_keys) > 1 and out_keys[0] in critic.out_keys:  # one critic writing every group's value
        return critic
    return TensorOutModule(critic.module, in_keys=in_keys, out_keys=out_keys)


def _head_coefficients(
    heads: Mapping[str, Sequence[Head]], default: float, given: dict[str, float]
) -> dict[str, list[float]]:
    """Each group's per-head entropy coefficients from ``{"head": c}`` / ``{"group:head": c}``."""
    known = {}
    for g, group_heads in heads.items():
        for h in group_heads:
            if "/" in "".join(h.name) or set(h.name[:1]) & _RESERVED or any(n.startswith("loss_") for n in h.name):
                raise ValueError(
                    f"group {g!r}: action head {h.name} cannot be logged without colliding with another "
                    f"metric name (no '/' in head names, none of {sorted(_RESERVED)}, no 'loss_' prefix)"
                )
            known.setdefault(h.label, []).append(g)
    unknown = []
    for name in given:
        group, _, head = name.rpartition(":")
        if head not in known or (group and group not in known[head]):
            unknown.append(name)
    if unknown:
        listing = ", ".join(f"{h} (groups {gs})" for h, gs in known.items())
        raise KeyError(f"entropy coefficient(s) for unknown head(s) {unknown}; known heads: {listing}")
    return {
        g: [float(given.get(f"{g}:{h.label}", given.get(h.label, default))) for h in group_heads]
        for g, group_heads in heads.items()
    }
