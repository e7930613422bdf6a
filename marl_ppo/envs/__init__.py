"""Env adapters: build a torchrl multi-agent env from an :class:`~marl_ppo.envs.options.EnvConfig`.

One module per kind, each only describing which env, which groups, which keys:
:mod:`~marl_ppo.envs.vmas` (``env.kind=vmas``), :mod:`~marl_ppo.envs.pettingzoo`
(``env.kind=pettingzoo``: MPE and classic short names, or any PettingZoo env by import path) and
:mod:`~marl_ppo.envs.custom` (``env.kind=custom``: your own factory, or ``env_fn``). Every env
comes back with a ``RewardSum`` transform that accumulates each group's raw reward into
``(group, "episode_reward")`` for reporting (training rewards come from the reward table), and
with ``env.time_limit`` applied (:mod:`~marl_ppo.envs.time_limit`): by default an episode cut at
``env.max_steps`` is ``truncated``, not ``terminated``, so GAE bootstraps there.

>>> env = make_env(EnvConfig(scenario="navigation", num_envs=2, kwargs={"n_agents": 2}), seed=0)
>>> env.group_map
{'agents': ['agent_0', 'agent_1']}
>>> env.rollout(3)["next", "agents", "episode_reward"].shape
torch.Size([2, 3, 2, 1])
"""

from __future__ import annotations

import torch
from torchrl.envs import EnvBase, Transform, TransformedEnv

from marl_ppo.envs.comm import CommAdapter
from marl_ppo.envs.custom import EnvFactory, absolute_factory, factory_path, load_factory, make_custom
from marl_ppo.envs.options import EnvConfig
from marl_ppo.envs.pettingzoo import classic_tasks, make_pettingzoo, mpe_tasks, pettingzoo_tasks
from marl_ppo.envs.time_limit import TruncationAsTermination, fold_truncation
from marl_ppo.envs.transforms import FlatObservation, with_episode_returns
from marl_ppo.envs.vmas import make_vmas, vmas_scenarios

__all__ = [
    "make_env",
    "vmas_scenarios",
    "mpe_tasks",
    "classic_tasks",
    "pettingzoo_tasks",
    "FlatObservation",
    "CommAdapter",
    "EnvFactory",
    "load_factory",
    "factory_path",
    "absolute_factory",
    "eval_num_envs",
    "EnvConfig",
    "TruncationAsTermination",
]


def make_env(
    cfg: EnvConfig,
    *,
    seed: int = 0,
    device: str | torch.device | None = None,
    num_envs: int | None = None,
    env_fn: EnvFactory | None = None,
) -> EnvBase:
    """The env described by ``cfg`` (or returned by ``env_fn``), with episode-return accounting, seeded.

    ``num_envs`` (default ``cfg.num_envs``) and ``seed`` let the evaluation env differ from the
    training one; ``env_fn`` stands in for ``cfg.factory`` (``env.kind=custom``).
    ``cfg.time_limit=terminate`` on an env that reports its own truncations (PettingZoo, custom)
    adds :class:`TruncationAsTermination`; VMAS applies ``cfg.time_limit`` itself.
    """
    num_envs = cfg.num_envs if num_envs is None else num_envs
    if env_fn is not None or cfg.kind == "custom":
        env = make_custom(cfg, seed=seed, num_envs=num_envs, device=device, env_fn=env_fn)
    elif cfg.kind == "vmas":
        return with_episode_returns(make_vmas(cfg, seed=seed, device=device, num_envs=num_envs))
    else:
        env = make_pettingzoo(cfg, seed=seed, num_envs=num_envs)
    if cfg.time_limit == "terminate":
        fold = fold_truncation(list(env.done_keys))
        if fold is not None:
            env = _append(env, fold)
    return with_episode_returns(env)


def _append(env: EnvBase, transform: Transform) -> TransformedEnv:
    if isinstance(env, TransformedEnv):  # appended, not nested: torchrl warns on a nested one
        env.append_transform(transform)
        return env
    return TransformedEnv(env, transform)


def eval_num_envs(cfg: EnvConfig, episodes: int) -> int:
    """How many env copies an evaluation of ``episodes`` episodes runs on.

    Vectorized envs (VMAS, a custom factory that takes ``num_envs``) run them all at once;
    PettingZoo copies are separate games, at most ``env.num_envs`` of them.
    """
    return min(episodes, cfg.num_envs) if cfg.kind == "pettingzoo" else episodes
