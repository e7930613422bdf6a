"""The group router: one torchrl PPO loss per agent group, each on its own keys.

Every group's loss is the same torchrl class (``MAPPOLoss``, ``IPPOLoss`` or ``ClipPPOLoss``),
differing only in its keys, which :class:`~marl_ppo.groups.GroupKeys` namespaces under the group:
its advantage, value target, value and log-prob never sit at the root, so two groups cannot
overwrite each other. The router computes each group's advantages with ``MultiAgentGAE`` on the
routed reward/done, checks every shape that torchrl would otherwise broadcast silently, and
returns ``{group: loss_td}`` with scalar diagnostics.

>>> import torch
>>> from torchrl.envs.libs.vmas import VmasEnv
>>> from marl_ppo import RewardTable, read_group_specs
>>> from marl_ppo.core.aggregate import AggregatedStep
>>> torch.manual_seed(0) and None
>>> env = VmasEnv("simple_tag", num_envs=4, continuous_actions=True, seed=0, max_steps=8)
>>> groups = read_group_specs(env)
>>> table = RewardTable.own_rewards(groups).bind(groups, env)
>>> router = GroupRouter.from_specs(groups, hidden=(32,))
>>> with torch.no_grad():
...     batch = table(env.rollout(8, router.policy, break_when_any_done=False))
>>> router.compute_advantages(batch)["adversary", "advantage"].shape
torch.Size([4, 8, 3, 1])
>>> losses = router(batch)
>>> sorted(losses.keys()), losses["agent", "loss_objective"].shape
(['adversary', 'agent'], torch.Size([]))
>>> out = AggregatedStep(router, lr=1e-3)(losses)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModule, TensorDictSequential
from torch import nn

from marl_ppo.algorithms import algorithm as algorithm_entry
from marl_ppo.core.advantages import check_trailing_one, compute_advantages, group_estimator
from marl_ppo.core.bundles import GroupBatchNet, GroupBundle, bundle_spec, find_bundles
from marl_ppo.core.diagnostics import Reducer, head_key, masked_diagnostics, per_head_diagnostics
from marl_ppo.core.losses import per_head_loss
from marl_ppo.groups.specs import GroupSpec
from marl_ppo.models import Head, Networks, TensorOutModule, action_heads, build_actor, build_models
from marl_ppo.models.critic import NormalizedValueNet, SlicedValueNorm, value_norms
from marl_ppo.models.options import ModelConfig
from marl_ppo.models.recurrent import recurrent_modules, state_keys

__all__ = ["GroupRouter", "is_legacy_key"]


# The losses' buffers that their arguments set (not training); see GroupRouter.hyperparameters.
HYPERPARAMETER_BUFFERS = frozenset(
    {
        "clip_epsilon",
        "critic_coeff",
        "entropy_coeff",
        "head_entropy_coeffs",
        "gamma",
        "lmbda",
    }
)

# Loss entries a head name must not shadow in the group's loss tensordict.
_RESERVED = {"entropy", "kl_approx", "clip_fraction", "ESS", "explained_variance", "max_ratio", "mean_ratio"}


class GroupRouter(nn.Module):
    """One PPO loss per group, advantages per group, ``forward(td) -> TensorDict{group: loss_td}``.

    Args:
        groups: the group specs (see :func:`~marl_ppo.groups.read_group_specs`).
        actors / critics: one policy and one value module per group. The same critic object
            may serve several groups: its parameters are then trained by all of them.
        algorithm: a name of :data:`~marl_ppo.algorithms.ALGORITHMS` (``"mappo"``, ``"ippo"``,
            ``"clip_ppo"``): its torchrl loss class, with per-head entropy, for every group.
        entropy_coeff: entropy bonus weight of every head of every group.
        head_entropy_coeff: per-head weights by short head name (``{"move": 0.0, "comm": 0.01}``,
            for every group with that head) or ``"group:head"`` for one group; unnamed heads
            keep ``entropy_coeff``. A schedule scales them per call: ``router(td, entropy_scale)``.
        clip_epsilon, critic_coeff, loss_critic_type, normalize_advantage, clip_value:
            forwarded to every group's loss.
        gamma, lmbda: ``MultiAgentGAE`` parameters.
        bundle_groups: run groups with identical specs through one loss call (see
            :mod:`marl_ppo.core.bundles`): the same losses, diagnostics and gradients, without each
            group's fixed per-call cost. Groups whose actor or critic ``networks`` does not
            list, and every group when ``clip_value`` is set, keep their own call.
        networks: which agent MLP each actor and critic runs
            (:class:`~marl_ppo.models.modules.Networks`, as :func:`~marl_ppo.models.build_models`
            and the ``networks=`` of the actor and critic builders record it); kept as
            :attr:`networks`, what bundles, seats and pools read.
        unshared: the groups whose agents each have their own policy parameters (kept as
            :attr:`unshared`; a sequential update mode makes each of their agents a unit of its own).
    """

    def __init__(
        self,
        groups: Mapping[str, GroupSpec],
        actors: Mapping[str, TensorDictModule],
        critics: Mapping[str, TensorDictModule],
        *,
        algorithm: str = "mappo",
        clip_epsilon: float = 0.2,
        entropy_coeff: float = 0.0,
        head_entropy_coeff: Mapping[str, float] | None = None,
        critic_coeff: float = 1.0,
        loss_critic_type: str = "l2",
        normalize_advantage: bool = False,
        clip_value: float | None = None,
        gamma: float = 0.99,
        lmbda: float = 0.9,
        bundle_groups: bool = True,
        networks: Networks | None = None,
        unshared: Sequence[str] = (),
    ) -> None:
        super().__init__()
        self.networks = networks if networks is not None else Networks()  # the agent MLPs the modules run
        entry = algorithm_entry(algorithm)  # a ValueError naming the registered ones
        for name, modules in (("actor", actors), ("critic", critics)):
            missing = [g for g in groups if g not in modules]
            if missing:
                raise KeyError(f"no {name} for group(s) {missing}; {name}s given for {sorted(modules)}")
        self.groups = dict(groups)
        self.unshared = [g for g in self.groups if g in set(unshared)]
        self.algorithm = algorithm
        self.clip_epsilon = clip_epsilon
        self.heads = {g: action_heads(spec) for g, spec in self.groups.items()}
        head_coeffs = _head_coefficients(self.heads, float(entropy_coeff), dict(head_entropy_coeff or {}))
        self._loss_kwargs = dict(
            clip_epsilon=clip_epsilon,
            entropy_coeff=float(entropy_coeff),
            critic_coeff=critic_coeff,
            loss_critic_type=loss_critic_type,
            normalize_advantage=normalize_advantage,
            clip_value=clip_value,
            functional=False,
        )
        self._loss_kwargs.update(entry.loss_kwargs)
        self._loss_class = per_head_loss(entry.loss_class())
        # loss.value_norm: each group's normaliser (and PopArt output layer), from its critic
        self._value_norms = {g: value_norms(critics[g])[g] for g in self.groups if value_norms(critics[g])}
        self.losses = nn.ModuleDict()
        for g, spec in self.groups.items():
            norm = self._value_norms.get(g, (None,))[0]
            critic = _on_group_keys(critics[g], spec)
            # a masked group records per element: its diagnostics count its kept entries (core/diagnostics.py)
            loss = self._make_loss(
                spec, actors[g], critic, head_coeffs[g], value_norm=norm, per_element=bool(spec.keys.mask)
            )
            # the one GAE path (core/advantages.py): torchrl's estimator on the values our call wrote
            loss.make_value_estimator(group_estimator(spec.keys, gamma=gamma, lmbda=lmbda))
            self.losses[g] = loss
        self._critics = {g: loss.critic_network for g, loss in self.losses.items()}
        # Collection runs the actors, and the recurrent critics too: their hidden states are
        # collected with the data, and the advantages and the update start from them.
        self.recurrent_critics = list({id(c): c for c in self._critics.values() if recurrent_modules(c)}.values())
        self.policy = TensorDictSequential(*[actors[g] for g in self.groups], *self.recurrent_critics)
        self.recurrent_keys = state_keys(self.policy)  # stored states + "is_init"; [] without a recurrent model
        self._reads_own_group_only = {
            g: _reads_own_group_only(spec, self.losses[g].critic_network) for g, spec in self.groups.items()
        }
        self._register_load_state_dict_pre_hook(_drop_legacy_keys)
        # Not registered as submodules: a bundle holds no parameters of its own, and the router's
        # state_dict stays the groups' (see _apply for devices).
        self._bundles: list[GroupBundle] = []
        # value clipping's fraction is not split per group; a sequential update mode steps one group at a time
        if bundle_groups and clip_value is None and not entry.sequential:
            members = find_bundles(
                self.groups, actors, critics, head_coeffs, self._reads_own_group_only.get, self.networks
            )
            for i, names in enumerate(members):
                self._bundles.append(self._make_bundle(f"__bundle{i}__", names, actors, critics, head_coeffs))
        self._bundled = {g: b for b in self._bundles for g in b.groups}

    def _make_loss(
        self,
        spec: GroupSpec,
        actor,
        critic,
        coeffs: list[float],
        *,
        value_norm=None,
        per_element: bool = False,
        **extra,
    ) -> nn.Module:
        """One group's torchrl PPO loss, on the group's keys, with its heads' entropy coefficients."""
        keys = spec.keys
        entropy_heads = (
            {head_key(keys.action, h, "_entropy"): i for i, h in enumerate(action_heads(spec))}
            if spec.is_composite_action
            else None
        )
        loss = self._loss_class(
            actor,
            critic,
            head_coeffs=coeffs,
            entropy_heads=entropy_heads,
            value_norm=value_norm,
            mask_key=keys.mask,
            per_element=per_element,
            weight_key=keys.update_weight,
            unit_mask_key=keys.update_mask,
            **self._loss_kwargs,
            **extra,
        )
        loss.set_keys(**keys.value_keys())
        if not spec.is_composite_action:
            loss.set_keys(action=keys.action, sample_log_prob=keys.log_prob)
        return loss

    def _make_bundle(self, name: str, members: list[str], actors, critics, head_coeffs) -> GroupBundle:
        """One loss call for ``members`` (groups with equal signatures, see :mod:`marl_ppo.core.bundles`)."""
        specs = [self.groups[g] for g in members]
        spec = bundle_spec(name, specs)
        n = specs[0].n_agents
        actor = build_actor(spec, net=GroupBatchNet([self.networks.of(actors[g]) for g in members], n))
        net = GroupBatchNet([self.networks.of(critics[g]) for g in members], n)
        norms = [value_norms(critics[g])[g][0] for g in members if value_norms(critics[g])]
        sliced = SlicedValueNorm(norms, n) if norms else None
        if sliced is not None:  # each group's slice de-normalised with its own statistics
            net = NormalizedValueNet(net, {name: sliced}, {})
        critic = TensorOutModule(net, in_keys=[spec.observation_keys[0]], out_keys=[spec.keys.value])
        loss = self._make_loss(
            spec, actor, critic, head_coeffs[members[0]], value_norm=sliced, per_element=True, reduction="none"
        )
        diagnostics = partial(per_head_diagnostics, self.heads[members[0]], self.clip_epsilon)
        return GroupBundle(spec, members, loss, diagnostics)

    @property
    def bundles(self) -> list[tuple[str, ...]]:
        """The groups whose losses run as one call (identical specs), e.g. ``[("g0", "g1", "g2")]``."""
        return [b.groups for b in self._bundles]

    def _apply(self, fn, recurse=True):
        # .to() / .cuda() / .double(): the bundles' own buffers (clip bounds, coefficients) follow
        super()._apply(fn, recurse)
        for bundle in self._bundles:
            bundle.loss._apply(fn)  # LossModule._apply takes no recurse flag
        return self

    def head_entropy_coeffs(self, scale: float | None = None) -> dict[str, list[float]]:
        """Each group's per-head entropy coefficients (in the order of :attr:`heads`), as configured or
        times a schedule's ``scale`` (in the losses' float32, as the update computes them)."""
        return {
            g: (loss.head_entropy_coeffs if scale is None else loss.head_entropy_coeffs * scale).tolist()
            for g, loss in self.losses.items()
        }

    def hyperparameters(self) -> dict[str, torch.Tensor]:
        """The state_dict entries the losses' arguments set, not training (clip, coefficients, gamma,
        lambda), copied: what a resumed run takes from its own arguments instead of the checkpoint."""
        return {k: v.clone() for k, v in self.state_dict().items() if k.rpartition(".")[2] in HYPERPARAMETER_BUFFERS}

    def load_hyperparameters(self, values: Mapping[str, torch.Tensor]) -> None:
        """Writes :meth:`hyperparameters`' entries back in place (onto the buffers' devices)."""
        own = self.state_dict()
        for key, value in values.items():
            own[key].copy_(value)

    @classmethod
    def from_specs(
        cls,
        groups: Mapping[str, GroupSpec],
        *,
        algorithm: str = "mappo",
        share_params: bool = True,
        hidden: Sequence[int] = (256, 256),
        activation: str = "tanh",
        device: torch.device | str | None = None,
        model: ModelConfig | None = None,
        value_norm: str = "none",
        popart_beta: float = 0.95,
        shared: Mapping[str, str] | None = None,
        **loss_kwargs,
    ) -> "GroupRouter":
        """Builds each group's actor and critic from its specs (:func:`~marl_ppo.models.build_models`;
        ``model`` gives every option, else ``share_params``/``hidden``/``activation`` an MLP), then the router.
        ``shared``: groups that play with another group's networks (``{"player_2": "player_1"}``)."""
        if model is None:
            model = ModelConfig(hidden=list(hidden), activation=activation, share_params=share_params)
        actors, critics, networks = build_models(
            groups,
            model,
            centralized=algorithm_entry(algorithm).centralised,
            value_norm=value_norm,
            popart_beta=popart_beta,
            device=device,
            shared=shared,
        )
        unshared = [g for g in groups if not model.for_group(g).share_params]
        router = cls(groups, actors, critics, algorithm=algorithm, networks=networks, unshared=unshared, **loss_kwargs)
        # the losses' own buffers (clip bounds, coefficients) join the networks on the device
        return router if device is None else router.to(device)

    # -- advantages ---------------------------------------------------------------------

    def compute_advantages(self, td: TensorDictBase) -> TensorDictBase:
        """Writes each group's advantage and value target, ``[*B, T, n_agents, 1]``, into ``td``.

        ``td`` is a rollout with its time dim last in the batch and the routed training
        reward/done present (see :class:`~marl_ppo.groups.reward_table.BoundRewardTable`). With value
        normalisation, each group's statistics then take in the batch's value targets (once per
        batch: the epochs of the update see fixed statistics). See :mod:`marl_ppo.core.advantages`.
        """
        estimators = {g: loss.value_estimator for g, loss in self.losses.items()}
        return compute_advantages(td, self.groups, self._critics, estimators, self._value_norms)

    # -- losses -------------------------------------------------------------------------

    def forward(
        self, td: TensorDictBase, entropy_scale: torch.Tensor | None = None, groups: Sequence[str] | None = None
    ) -> TensorDictBase:
        """``{group: loss_td}``: each group's ``loss_*`` terms and scalar, detached diagnostics.

        ``entropy_scale`` (a 0-dim tensor; the training state's schedule value) scales every head's
        entropy coefficient in this call; ``None``: as configured. ``groups``: only these groups'
        losses (a sequential update mode's unit); ``None``: every group's."""
        out = {}
        for g, loss in self.losses.items():
            if groups is not None and g not in groups:
                continue
            keys = self.groups[g].keys
            if keys.advantage not in td.keys(include_nested=True):
                raise KeyError(
                    f"group {g!r}: no advantage at {keys.advantage}; call compute_advantages(batch) "
                    "on the full rollout before splitting it into minibatches"
                )
            check_trailing_one(td, g, keys.advantage, "advantage")
            if g in self._bundled:
                continue
            # the loss clones what it is given: give it its own group's entries, not every group's
            sub = td.select(g) if self._reads_own_group_only[g] else td
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
            if self.groups[g].is_composite_action:
                entropy = loss_td.pop("composite_entropy", None)
                for name, value in per_head_diagnostics(
                    self.heads[g], self.clip_epsilon, keys.action, record.log_prob, td, entropy, reduce
                ).items():
                    loss_td.set(name, value)
            out[g] = _scalar_diagnostics(loss_td)
        for bundle in self._bundles:
            if groups is None or any(g in groups for g in bundle.groups):
                out.update(bundle(td, entropy_scale))
        return TensorDict({g: out[g] for g in self.groups if g in out}, batch_size=[])


def _scalar_diagnostics(loss_td: TensorDictBase) -> TensorDictBase:
    """Reduces every non-loss entry to a detached scalar (ESS and explained variance come out per agent/time)."""
    for key, value in list(loss_td.items(include_nested=True, leaves_only=True)):
        name = key if isinstance(key, str) else key[-1]
        if name.startswith("loss_"):
            continue
        if value.ndim or value.requires_grad:
            loss_td.set(key, value.detach().float().mean())
    return loss_td


def _reads_own_group_only(spec: GroupSpec, critic: TensorDictModule) -> bool:
    """Whether every entry the group's loss reads lives under the group's own key."""
    keys = [
        *spec.observation_keys,
        *critic.in_keys,
        spec.action_mask_key,
        spec.keys.mask,
        spec.keys.action,
        spec.keys.log_prob,
        spec.keys.advantage,
        spec.keys.value_target,
        spec.keys.value,
    ]
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
    heads: Mapping[str, list[Head]], default: float, given: dict[str, float]
) -> dict[str, list[float]]:
    """Each group's per-head entropy coefficients from ``{"head": c}`` / ``{"group:head": c}``."""
    known = {}
    for g, group_heads in heads.items():
        for h in group_heads:
            if (
                "/" in "".join(h.name)
                or h.name[:1]
                and h.name[0] in _RESERVED
                or any(n.startswith("loss_") for n in h.name)
            ):
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


# Checkpoints written before the one GAE path held a second estimator for recurrent and global
# critics (``_estimators.<group>.gamma/lmbda``, the same values as the loss's), and before the
# entropy schedule became the training state's value each loss's configured coefficients twice
# (``base_head_entropy_coeffs``; the coefficients are taken from the config on resume anyway):
# dropped on load.
LEGACY_STATE_PREFIXES = ("_estimators.",)
LEGACY_STATE_SUFFIXES = (".base_head_entropy_coeffs",)


def is_legacy_key(key: str, prefix: str = "") -> bool:
    """Whether a router state-dict entry is one older checkpoints hold and today's router does not."""
    return key.startswith(tuple(prefix + p for p in LEGACY_STATE_PREFIXES)) or key.endswith(LEGACY_STATE_SUFFIXES)


def _drop_legacy_keys(state_dict, prefix, *args) -> None:
    for key in [k for k in state_dict if k.startswith(prefix) and is_legacy_key(k, prefix)]:
        del state_dict[key]
