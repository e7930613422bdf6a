"""What an iteration logs: losses and diagnostics per group and head, returns, coefficients, timings.

Metric names are namespaced as ``docs/metrics.md`` lists them: ``train/<group>/...``,
``collect/<group>/episode_reward`` and ``collect/<group>/train_reward``, ``time/...``.
"""

from __future__ import annotations

from collections.abc import Sequence

from tensordict import TensorDictBase

from marl_ppo.core.router import GroupRouter
from marl_ppo.groups.specs import GroupKeys

__all__ = ["episode_returns", "iteration_metrics"]


def episode_returns(batch: TensorDictBase, groups: Sequence[str]) -> dict[str, float]:
    """Mean return of the episodes that ended in ``batch``, per group (mean over the group's agents)."""
    nxt = batch.get("next")
    done = nxt.get("done").squeeze(-1)
    out = {}
    if not done.any():
        return out
    for g in groups:
        ep = nxt.get(GroupKeys.for_group(g).episode_reward).mean(dim=(-2, -1))
        out[g] = ep[done].mean().item()
    return out


def iteration_metrics(
    batch: TensorDictBase,
    stats: TensorDictBase,
    returns: dict[str, float],
    router: GroupRouter,
    *,
    t_collect: float,
    t_update: float,
    iteration: int,
) -> dict[str, float]:
    """One iteration's metrics: the update's ``stats``, the collected ``returns`` and training
    rewards, each head's entropy coefficient, and the timings."""
    metrics: dict[str, float] = {}
    for key, value in stats.items(include_nested=True, leaves_only=True):
        key = (key,) if isinstance(key, str) else key
        metrics["train/" + "/".join(key)] = value.item()
    for g, r in returns.items():
        metrics[f"collect/{g}/episode_reward"] = r
    for g, spec in router.groups.items():
        metrics[f"collect/{g}/train_reward"] = batch.get(("next", *spec.keys.reward)).mean().item()
    for g, coeffs in router.head_entropy_coeffs().items():
        for head, coeff in zip(router.heads[g], coeffs):
            metrics[f"train/{g}/{head.label}/entropy_coeff"] = coeff
    metrics["time/collect_s"] = t_collect
    metrics["time/update_s"] = t_update
    metrics["time/fps"] = batch.numel() / (t_collect + t_update)
    metrics["time/iteration"] = iteration
    return metrics
