"""The core: one PPO loss per group, advantages per group, one aggregated step, the update.

Takes built parts (group specs, actors and critics) and plain arguments, never the run's config:
:mod:`~marl_ppo.core.router` (the group router), :mod:`~marl_ppo.core.losses` (torchrl's PPO
losses with per-head coefficients and diagnostics), :mod:`~marl_ppo.core.bundles` (same-spec
groups in one loss call), :mod:`~marl_ppo.core.aggregate` (one backward, one clip, one step) and
:mod:`~marl_ppo.core.update` (the PPO epochs).
"""
