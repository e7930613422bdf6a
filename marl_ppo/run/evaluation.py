"""Deterministic evaluation: exactly ``episodes`` episodes, their mean return per group.

Works on any batched or unbatched env: the episodes are shared out between the env's copies
(copy ``i`` runs ``episodes // copies`` of them, one more for the first ``episodes % copies``),
each copy resets itself when an episode ends, and only the first episodes of each copy count,
so short episodes are not over-represented.

>>> from marl_ppo.envs import EnvConfig, make_env
>>> env = make_env(EnvConfig(scenario="navigation", num_envs=3, max_steps=5, kwargs={"n_agents": 2}))
>>> result = evaluate(None, env, max_steps=5, groups=["agents"], episodes=7)
>>> result.episodes, sorted(result.returns)
(7, ['agents'])
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from tensordict import TensorDictBase
from torchrl.envs import EnvBase, ExplorationType, set_exploration_type

__all__ = ["EvalResult", "evaluate"]


@dataclass
class EvalResult:
    """Mean return per group over ``episodes`` completed episodes (0: none ended, return so far)."""

    returns: dict[str, float]
    episodes: int


@torch.no_grad()
def evaluate(policy: Callable[[TensorDictBase], TensorDictBase] | None, env: EnvBase, max_steps: int,
             groups: list[str], *, episodes: int, callback: Callable | None = None) -> EvalResult:
    """Runs ``policy`` (``None``: random actions) deterministically until ``episodes`` episodes ended.

    Stops after ``(episodes per copy + 1) * max_steps`` steps at most (an env whose episodes never
    end); ``EvalResult.episodes`` is then the number that did. ``callback(env, td)`` is called after
    the reset and after every step but the last (e.g. to grab video frames).
    """
    copies = max(env.batch_size.numel(), 1)
    quota = torch.full((copies,), episodes // copies, dtype=torch.long)
    quota[: episodes % copies] += 1
    ended = torch.zeros(copies, dtype=torch.long)
    totals = {g: torch.zeros(()) for g in groups}
    counted = 0
    with set_exploration_type(ExplorationType.DETERMINISTIC):
        td = env.reset()
        if callback is not None:
            callback(env, td)
        for _ in range((int(quota.max()) + 1) * max_steps):
            td = policy(td) if policy is not None else env.rand_action(td)
            td, td_next = env.step_and_maybe_reset(td)
            nxt = td.get("next")
            done = nxt.get("done").reshape(copies).cpu()
            count = done & (ended < quota)
            for g in groups:
                ep = nxt.get((g, "episode_reward")).mean(dim=(-2, -1)).reshape(copies).cpu()
                totals[g] += ep[count].sum()
            counted += int(count.sum())
            ended += done.long()
            if bool((ended >= quota).all()):
                break
            if callback is not None:  # as torchrl's rollout: not after the last step
                callback(env, td)
            td = td_next
    if counted == 0:  # no episode ended: report the return so far
        returns = {g: nxt.get((g, "episode_reward")).mean().item() for g in groups}
        return EvalResult(returns, 0)
    return EvalResult({g: (totals[g] / counted).item() for g in groups}, counted)
