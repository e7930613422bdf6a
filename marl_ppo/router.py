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
>>> from marl_ppo.aggregate import AggregatedStep
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
from typing import Literal

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModule, TensorDictSequential
from torch import nn
from torchrl.objectives import ClipPPOLoss, ValueEstimators
from torchrl.objectives.multiagent import IPPOLoss, MAPPOLoss

from marl_ppo.groups import GroupSpec
from marl_ppo.policies import build_actor, build_critic

__all__ = ["GroupRouter", "LossAlgorithm"]

LossAlgorithm = Literal["mappo", "ippo", "clip_ppo"]
_LOSSES = {"mappo": MAPPOLoss, "ippo": IPPOLoss, "clip_ppo": ClipPPOLoss}


class GroupRouter(nn.Module):
    """One PPO loss per group, advantages per group, ``forward(td) -> TensorDict{group: loss_td}``.

    Args:
        groups: the group specs (see :func:`~marl_ppo.groups.read_group_specs`).
        actors / critics: one policy and one value module per group. The same critic object
            may serve several groups: its parameters are then trained by all of them.
        algorithm: ``"mappo"`` (centralised critic), ``"ippo"`` (decentralised) or ``"clip_ppo"``.
            The loss class is the same torchrl PPO loss; the critic decides centralisation.
        clip_epsilon, entropy_coeff, critic_coeff, loss_critic_type, normalize_advantage,
        clip_value: forwarded to every group's loss. ``entropy_coeff`` may be a mapping
            ``{group: coeff}``.
        gamma, lmbda: ``MultiAgentGAE`` parameters.
    """

    def __init__(
        self,
        groups: Mapping[str, GroupSpec],
        actors: Mapping[str, TensorDictModule],
        critics: Mapping[str, TensorDictModule],
        *,
        algorithm: LossAlgorithm = "mappo",
        clip_epsilon: float = 0.2,
        entropy_coeff: float | Mapping[str, float] = 0.0,
        critic_coeff: float = 1.0,
        loss_critic_type: str = "l2",
        normalize_advantage: bool = True,
        clip_value: float | None = None,
        gamma: float = 0.99,
        lmbda: float = 0.9,
    ) -> None:
        super().__init__()
        if algorithm not in _LOSSES:
            raise ValueError(f"unknown algorithm {algorithm!r}; known: {sorted(_LOSSES)}")
        for name, modules in (("actor", actors), ("critic", critics)):
            missing = [g for g in groups if g not in modules]
            if missing:
                raise KeyError(f"no {name} for group(s) {missing}; {name}s given for {sorted(modules)}")
        self.groups = dict(groups)
        self.algorithm = algorithm
        self.losses = nn.ModuleDict()
        for g, spec in self.groups.items():
            coeff = entropy_coeff.get(g, 0.0) if isinstance(entropy_coeff, Mapping) else entropy_coeff
            kwargs = dict(
                clip_epsilon=clip_epsilon,
                entropy_coeff=float(coeff),
                critic_coeff=critic_coeff,
                loss_critic_type=loss_critic_type,
                normalize_advantage=normalize_advantage,
                clip_value=clip_value,
                functional=False,
            )
            if algorithm == "clip_ppo":
                kwargs["normalize_advantage_exclude_dims"] = (-2,)
            loss = _LOSSES[algorithm](actors[g], critics[g], **kwargs)
            keys = spec.keys
            loss.set_keys(
                action=keys.action,
                value=keys.value,
                advantage=keys.advantage,
                value_target=keys.value_target,
                reward=keys.reward,
                done=keys.done,
                terminated=keys.terminated,
            )
            if not spec.is_composite_action:
                loss.set_keys(sample_log_prob=keys.log_prob)
            loss.loss_mask_key = keys.mask
            loss.make_value_estimator(ValueEstimators.MAGAE, gamma=gamma, lmbda=lmbda)
            self.losses[g] = loss
        self.policy = TensorDictSequential(*[actors[g] for g in self.groups])

    @classmethod
    def from_specs(
        cls,
        groups: Mapping[str, GroupSpec],
        *,
        algorithm: LossAlgorithm = "mappo",
        share_params: bool = True,
        hidden: Sequence[int] = (256, 256),
        activation: str = "tanh",
        device: torch.device | str | None = None,
        **loss_kwargs,
    ) -> "GroupRouter":
        """Builds each group's actor and critic from its specs, then the router."""
        net = dict(share_params=share_params, hidden=hidden, activation=activation, device=device)
        actors = {g: build_actor(s, **net) for g, s in groups.items()}
        critics = {g: build_critic(s, centralized=algorithm == "mappo", **net) for g, s in groups.items()}
        return cls(groups, actors, critics, algorithm=algorithm, **loss_kwargs)

    # -- advantages ---------------------------------------------------------------------

    @torch.no_grad()
    def compute_advantages(self, td: TensorDictBase) -> TensorDictBase:
        """Writes each group's advantage and value target, ``[*B, T, n_agents, 1]``, into ``td``.

        ``td`` is a rollout with its time dim last in the batch and the routed training
        reward/done present (see :class:`~marl_ppo.reward_table.BoundRewardTable`).
        """
        for g, loss in self.losses.items():
            keys = self.groups[g].keys
            for key in (keys.reward, keys.done, keys.terminated):
                if ("next", *key) not in td.keys(include_nested=True):
                    raise KeyError(
                        f"group {g!r}: ('next', {key}) is missing; apply the bound reward table to the "
                        "batch before computing advantages"
                    )
                self._check_trailing_one(td.get("next"), g, key, "training reward/done")
            loss.value_estimator(td)
            self._check_trailing_one(td, g, keys.advantage, "advantage")
        return td

    def _check_trailing_one(self, td: TensorDictBase, group: str, key, what: str) -> None:
        value = td.get(key)
        expected = (*td.get(group).batch_size, 1)
        if tuple(value.shape) != expected:
            hint = (
                " (it is missing its trailing 1; torchrl would sum the log-ratio over agents)"
                if tuple(value.shape) == expected[:-1]
                else ""
            )
            raise ValueError(
                f"group {group!r}: {what} {key} has shape {list(value.shape)}{hint}; "
                f"expected [*batch, n_agents, 1] = {list(expected)}"
            )

    # -- losses -------------------------------------------------------------------------

    def forward(self, td: TensorDictBase) -> TensorDictBase:
        """``{group: loss_td}``: each group's ``loss_*`` terms and scalar, detached diagnostics."""
        out = {}
        for g, loss in self.losses.items():
            keys = self.groups[g].keys
            if keys.advantage not in td.keys(include_nested=True):
                raise KeyError(
                    f"group {g!r}: no advantage at {keys.advantage}; call compute_advantages(batch) "
                    "on the full rollout before splitting it into minibatches"
                )
            self._check_trailing_one(td, g, keys.advantage, "advantage")
            out[g] = _scalar_diagnostics(loss(td))
        return TensorDict(out, batch_size=[])


def _scalar_diagnostics(loss_td: TensorDictBase) -> TensorDictBase:
    """Reduces every non-loss entry to a detached scalar (ESS and explained variance come out per agent/time)."""
    for key, value in list(loss_td.items(include_nested=True, leaves_only=True)):
        name = key if isinstance(key, str) else key[-1]
        if name.startswith("loss_"):
            continue
        if value.ndim or value.requires_grad:
            loss_td.set(key, value.detach().float().mean())
    return loss_td
