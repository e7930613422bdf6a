"""The loss section's options (``loss.*``): the PPO loss of every group and its advantage estimator.

Read by :mod:`marl_ppo.config` (a :class:`~marl_ppo.config.Config` holds one :class:`LossConfig`);
no torch here.

>>> LossConfig(estimator="nstep", nstep=5).estimator
'nstep'
"""

from __future__ import annotations

from dataclasses import dataclass, field

from marl_ppo.algorithms import ALGORITHMS, HappoOptions
from marl_ppo.options import ConfigError, at_least, choice, positive, unit_interval

__all__ = ["LossConfig"]


@dataclass
class LossConfig:
    """PPO loss, one per group.

    Attributes:
        algorithm: a name of :data:`~marl_ppo.algorithms.ALGORITHMS`: ``mappo`` (centralised critic), ``ippo``
            (decentralised), ``clip_ppo`` or ``happo`` (the groups updated one after another).
        clip_epsilon: PPO ratio clip, in (0, 1): the ratio is clipped to [1 - eps, 1 + eps].
        entropy_coeff: entropy bonus weight for every head of every group.
        head_entropy_coeff: per-head weights by short head name (``{move: 0.0, comm: 0.01}``)
            or ``group:head`` for one group; other heads keep ``entropy_coeff``.
        entropy_schedule: ``constant`` or ``linear`` (every coefficient decays to
            ``entropy_final_scale`` times its value over ``total_frames``).
        entropy_final_scale: the linear schedule's end point, as a fraction of the start.
        critic_coeff: critic loss weight.
        loss_critic_type: ``l2``, ``l1`` or ``smooth_l1``.
        gamma: discount.
        lmbda: GAE lambda.
        estimator: the advantage estimator: ``gae`` (torchrl's ``MultiAgentGAE``, ``lmbda``) or ``nstep``
            (``nstep``-step returns bootstrapped from the critic, cut at episode ends: EPyMARL's
            ``q_nstep``, Papoudakis et al. 2021, Table 24).
        nstep: the steps of an ``nstep`` return.
        normalize_advantage: standardise advantages per minibatch (agent dim kept apart).
        group_weights: per-group weight in the aggregated loss (default 1).
        bundle_groups: run groups with identical specs through one loss call (same losses,
            diagnostics and gradients; much less fixed cost per group).
        value_norm: ``none``, ``running`` or ``popart``: each group's critic learns normalised
            value targets (MAPPO's value normalisation); ``running`` keeps the exact mean and
            variance of every target seen, ``popart`` an exponential moving average (rate
            ``1 - popart_beta`` per batch) and rescales the critic's output layer so that its
            values are preserved when the statistics move. Statistics update once per batch.
        popart_beta: the moving average's decay per collected batch (``popart`` only).
        happo: HAPPO's update options (:class:`~marl_ppo.algorithms.HappoOptions`; read with ``algorithm=happo`` only).
    """

    algorithm: str = "mappo"
    clip_epsilon: float = 0.2
    entropy_coeff: float = 0.0
    head_entropy_coeff: dict[str, float] = field(default_factory=dict)
    entropy_schedule: str = "constant"
    entropy_final_scale: float = 0.0
    critic_coeff: float = 1.0
    loss_critic_type: str = "l2"
    gamma: float = 0.99
    lmbda: float = 0.9
    estimator: str = "gae"
    nstep: int = 5
    normalize_advantage: bool = False
    group_weights: dict[str, float] = field(default_factory=dict)
    bundle_groups: bool = True
    value_norm: str = "none"
    popart_beta: float = 0.95
    happo: HappoOptions = field(default_factory=HappoOptions)

    def __post_init__(self) -> None:
        choice("loss.algorithm", self.algorithm, tuple(ALGORITHMS.names()))
        choice("loss.value_norm", self.value_norm, ("none", "running", "popart"))
        if not 0.0 < self.popart_beta < 1.0:
            raise ConfigError(f"loss.popart_beta must be in (0, 1), got {self.popart_beta!r}")
        choice("loss.loss_critic_type", self.loss_critic_type, ("l2", "l1", "smooth_l1"))
        choice("loss.entropy_schedule", self.entropy_schedule, ("constant", "linear"))
        positive("loss.clip_epsilon", self.clip_epsilon)
        if not self.clip_epsilon < 1.0:  # the ratio's clip range [1 - eps, 1 + eps] would reach 0: log(0)
            raise ConfigError(
                f"loss.clip_epsilon must be < 1 (the ratio is clipped to [1 - eps, 1 + eps]), got {self.clip_epsilon!r}"
            )
        unit_interval("loss.gamma", self.gamma)
        unit_interval("loss.lmbda", self.lmbda)
        choice("loss.estimator", self.estimator, ("gae", "nstep"))
        at_least("loss.nstep", self.nstep, 1)
        at_least("loss.critic_coeff", self.critic_coeff, 0)
        at_least("loss.entropy_coeff", self.entropy_coeff, 0)
        unit_interval("loss.entropy_final_scale", self.entropy_final_scale)
        for head, coeff in self.head_entropy_coeff.items():
            at_least(f"loss.head_entropy_coeff.{head}", coeff, 0)
        for group, weight in self.group_weights.items():
            at_least(f"loss.group_weights.{group}", weight, 0)
