"""What an iteration logs: losses and diagnostics per group and head, returns, coefficients, timings.

Metric names are namespaced as ``docs/metrics.md`` lists them: ``train/<group>/...``,
``collect/<group>/episode_reward`` and ``collect/<group>/train_reward``, ``time/...``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from tensordict import TensorDictBase

from marl_ppo.core.router import GroupRouter
from marl_ppo.groups.specs import GroupKeys, GroupSpec

__all__ = ["episode_returns", "iteration_metrics", "constant_sum_metrics"]


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


def _constant(total: torch.Tensor) -> bool:
    """Whether the values (one per finished episode, at least two) are all the same, to float precision."""
    return len(total) >= 2 and bool((total - total[0]).abs().max() <= 1e-5 * (1.0 + total.abs().max()))


def constant_sum_metrics(batch: TensorDictBase, groups: Mapping[str, GroupSpec]) -> dict[str, float]:
    """What a mean would hide in a constant-sum game, from the batch's finished episodes.

    When the groups' returns (each the mean over its agents) sum to the same value in every finished
    episode (tic-tac-toe's players, rock-paper-scissors' seats): each group's ``win_rate``,
    ``draw_rate`` and ``loss_rate`` (a win: its return is higher than every other group's). When a
    group's own agents' returns do (both players of a game in one group, whose mean is 0 by
    construction): each agent's return, ``collect/<group>/<agent>/episode_reward``.
    """
    nxt = batch.get("next")
    done = nxt.get("done").squeeze(-1)
    if int(done.sum()) < 2:
        return {}
    per_agent = {g: nxt.get(GroupKeys.for_group(g).episode_reward)[done].squeeze(-1) for g in groups}  # [E, n]
    out: dict[str, float] = {}
    for g, returns in per_agent.items():
        if groups[g].n_agents > 1 and _constant(returns.sum(-1)) and not _constant(returns[:, 0]):
            for i, agent in enumerate(groups[g].agents):
                out[f"collect/{g}/{agent}/episode_reward"] = returns[:, i].mean().item()
    means = {g: r.mean(-1) for g, r in per_agent.items()}
    if len(means) < 2 or not _constant(sum(means.values())):
        return out
    for g, mine in means.items():
        best = torch.stack([r for other, r in means.items() if other != g]).max(0).values
        out[f"collect/{g}/win_rate"] = (mine > best).float().mean().item()
        out[f"collect/{g}/draw_rate"] = (mine == best).float().mean().item()
        out[f"collect/{g}/loss_rate"] = (mine < best).float().mean().item()
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
    groups: Mapping[str, GroupSpec] | None = None,
    entropy_scale: float | None = None,
) -> dict[str, float]:
    """One iteration's metrics: the update's ``stats``, the collected ``returns`` and training
    rewards, each head's entropy coefficient, the timings, and for a constant-sum game over the env's
    ``groups`` (default: the router's) the outcomes (:func:`constant_sum_metrics`)."""
    metrics: dict[str, float] = constant_sum_metrics(batch, groups if groups is not None else router.groups)
    for key, value in stats.items(include_nested=True, leaves_only=True):
        key = (key,) if isinstance(key, str) else key
        metrics["train/" + "/".join(key)] = value.item()
    for g, r in returns.items():
        metrics[f"collect/{g}/episode_reward"] = r
    for g, spec in router.groups.items():
        metrics[f"collect/{g}/train_reward"] = batch.get(("next", *spec.keys.reward)).mean().item()
    for g, coeffs in router.head_entropy_coeffs(entropy_scale).items():  # as the update used them
        for head, coeff in zip(router.heads[g], coeffs):
            metrics[f"train/{g}/{head.label}/entropy_coeff"] = coeff
    metrics["time/collect_s"] = t_collect
    metrics["time/update_s"] = t_update
    metrics["time/fps"] = batch.numel() / (t_collect + t_update)
    metrics["time/iteration"] = iteration
    return metrics
