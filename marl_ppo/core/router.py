"""The group router: one torchrl PPO loss per agent group, each on its own keys.

Every group's loss is the same torchrl class (``MAPPOLoss``, ``IPPOLoss`` or ``ClipPPOLoss``),
differing only in its keys, which :class:`~marl_ppo.groups.GroupKeys` namespaces under the group:
its advantage, value target, value and log-prob never sit at the root, so two groups cannot
overwrite each other. The router computes each group's advantages with ``MultiAgentGAE`` on the
routed reward/done, checks every shape that torchrl would otherwise broadcast silently, and
returns ``{group: loss_td}`` with scalar diagnostics. How each group's loss is built and called
(the PPO objective and our overrides of it) is :mod:`marl_ppo.core.group_loss`.

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

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModule, TensorDictSequential
from torch import nn

from marl_ppo.algorithms import algorithm as algorithm_entry
from marl_ppo.core.advantages import check_trailing_one, compute_advantages
from marl_ppo.core.group_loss import LossBuilder, group_loss, reads_own_group_only
from marl_ppo.groups.specs import GroupSpec
from marl_ppo.models import Networks, action_heads, build_models
from marl_ppo.models.critic import value_norms
from marl_ppo.models.options import ModelConfig
from marl_ppo.models.recurrent import recurrent_modules, state_keys

__all__ = ["GroupRouter"]


# The losses' buffers that their arguments set (not training); see GroupRouter.hyperparameters.
HYPERPARAMETER_BUFFERS = frozenset(
    {"clip_epsilon", "critic_coeff", "entropy_coeff", "head_entropy_coeffs", "gamma", "lmbda"}
)


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
        estimator, nstep: the advantage estimator, ``gae`` or ``nstep`` (``nstep``-step returns).
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
        estimator: str = "gae",
        nstep: int = 5,
        bundle_groups: bool = True,
        networks: Networks | None = None,
        unshared: Sequence[str] = (),
    ) -> None:
        super().__init__()
        entry = algorithm_entry(algorithm)  # a ValueError naming the registered ones
        for name, modules in (("actor", actors), ("critic", critics)):
            if missing := [g for g in groups if g not in modules]:
                raise KeyError(f"no {name} for group(s) {missing}; {name}s given for {sorted(modules)}")
        self.groups, self.algorithm, self.clip_epsilon = dict(groups), algorithm, clip_epsilon
        self.networks = networks if networks is not None else Networks()  # the agent MLPs the modules run
        self.unshared = [g for g in self.groups if g in set(unshared)]
        self.heads = {g: action_heads(spec) for g, spec in self.groups.items()}
        build = LossBuilder(
            entry, self.heads, entropy_coeff, head_entropy_coeff, self.networks, gamma=gamma, lmbda=lmbda,
            estimator=estimator, nstep=nstep, clip_epsilon=clip_epsilon, critic_coeff=critic_coeff,
            loss_critic_type=loss_critic_type, normalize_advantage=normalize_advantage, clip_value=clip_value,
        )  # fmt: skip
        # each group's value normaliser (and PopArt output layer), from its critic
        self._value_norms = {g: value_norms(critics[g])[g] for g in self.groups if value_norms(critics[g])}
        self.losses = nn.ModuleDict({g: build.group(g, s, actors[g], critics[g]) for g, s in self.groups.items()})
        self._critics = {g: loss.critic_network for g, loss in self.losses.items()}
        # Collection runs the actors, and the recurrent critics too: their hidden states are
        # collected with the data, and the advantages and the update start from them.
        self.recurrent_critics = list({id(c): c for c in self._critics.values() if recurrent_modules(c)}.values())
        self.policy = TensorDictSequential(*[actors[g] for g in self.groups], *self.recurrent_critics)
        self.recurrent_keys = state_keys(self.policy)  # stored states + "is_init"; [] without a recurrent model
        self._own_only = {g: reads_own_group_only(spec, self._critics[g]) for g, spec in self.groups.items()}
        # Not registered as submodules: a bundle holds no parameters of its own, and the router's
        # state_dict stays the groups' (see _apply for devices).
        self._bundles = build.bundles(self.groups, actors, critics, self._own_only.get) if bundle_groups else []
        self._bundled = {g: b for b in self._bundles for g in b.groups}

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
            if g not in self._bundled:  # torchrl's loss and our diagnostics (core/group_loss.py)
                out[g] = group_loss(
                    loss, self.groups[g], self.heads[g], self.clip_epsilon, td, self._own_only[g], entropy_scale
                )
        for bundle in self._bundles:
            if groups is None or any(g in groups for g in bundle.groups):
                out.update(bundle(td, entropy_scale))
        return TensorDict({g: out[g] for g in self.groups if g in out}, batch_size=[])
