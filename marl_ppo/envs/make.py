"""``make_env``: the env an :class:`~marl_ppo.envs.options.EnvConfig` describes, from the adapter of its kind."""

from __future__ import annotations

import torch
from torchrl.envs import EnvBase, Transform, TransformedEnv

from marl_ppo.envs.custom import EnvFactory, make_custom
from marl_ppo.envs.kinds import env_kind
from marl_ppo.envs.options import EnvConfig
from marl_ppo.envs.time_limit import fold_truncation
from marl_ppo.envs.transforms import with_episode_returns

__all__ = ["make_env", "eval_num_envs"]


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
    The env comes from the kind's line of :data:`~marl_ppo.envs.kinds.ENV_KINDS`.
    ``cfg.time_limit=terminate`` on an env that reports its own truncations (PettingZoo, custom)
    adds :class:`TruncationAsTermination`; a kind with its own time limit (VMAS) applies it itself.
    """
    num_envs = cfg.num_envs if num_envs is None else num_envs
    kind = env_kind(cfg.kind)
    if env_fn is not None:
        env = make_custom(cfg, seed=seed, num_envs=num_envs, device=device, env_fn=env_fn)
    else:
        env = kind.build(cfg, seed=seed, num_envs=num_envs, device=device)
        if kind.own_time_limit:
            return with_episode_returns(env)
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

    Vectorized envs (VMAS, a custom factory that takes ``num_envs``) run them all at once; the
    copies of a kind that is not (PettingZoo) are separate games, at most ``env.num_envs`` of them.
    """
    return episodes if env_kind(cfg.kind).vectorised else min(episodes, cfg.num_envs)
