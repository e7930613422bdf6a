"""Env adapters: build a torchrl multi-agent env from an :class:`~marl_ppo.config.EnvConfig`.

Adapters only describe: which env, which groups, which keys. Every env comes back with a
``RewardSum`` transform that accumulates each group's raw reward into
``(group, "episode_reward")`` for reporting (training rewards come from the reward table).

>>> from marl_ppo.config import EnvConfig
>>> env = make_env(EnvConfig(scenario="navigation", num_envs=2, kwargs={"n_agents": 2}), seed=0)
>>> env.group_map
{'agents': ['agent_0', 'agent_1']}
>>> env.rollout(3)["next", "agents", "episode_reward"].shape
torch.Size([2, 3, 2, 1])
"""
from __future__ import annotations

import difflib
import importlib
from functools import partial

import torch
from torchrl.envs import EnvBase, ParallelEnv, RewardSum, SerialEnv, TransformedEnv

from marl_ppo.config import ConfigError, EnvConfig
from marl_ppo.groups import group_map

__all__ = ["make_env", "vmas_scenarios", "mpe_tasks"]


def vmas_scenarios() -> list[str]:
    """Every scenario name that ships with the installed vmas."""
    import vmas

    return sorted(set(vmas.scenarios) | set(vmas.mpe_scenarios) | set(vmas.debug_scenarios))


def mpe_tasks() -> list[str]:
    """PettingZoo MPE tasks from ``mpe2`` (e.g. ``simple_spread_v3``)."""
    import pkgutil

    import mpe2

    return sorted(m.name for m in pkgutil.iter_modules(mpe2.__path__) if m.name.startswith("simple"))


def _unknown(kind: str, name: str, known: list[str]) -> ConfigError:
    close = difflib.get_close_matches(name, known, n=3)
    hint = f"; did you mean {close}?" if close else ""
    return ConfigError(f"unknown {kind} {name!r}{hint} (available: {', '.join(known)})")


def make_env(cfg: EnvConfig, *, seed: int = 0, device: str | torch.device | None = None,
             num_envs: int | None = None) -> EnvBase:
    """The env described by ``cfg``, with episode-return accounting, seeded."""
    num_envs = cfg.num_envs if num_envs is None else num_envs
    if cfg.kind == "vmas":
        env = _make_vmas(cfg, seed=seed, device=device or cfg.device, num_envs=num_envs)
    else:
        env = _make_pettingzoo(cfg, seed=seed, num_envs=num_envs)
    return _with_episode_returns(env)


def _make_vmas(cfg: EnvConfig, *, seed: int, device, num_envs: int) -> EnvBase:
    from torchrl.envs.libs.vmas import VmasEnv

    if cfg.scenario not in vmas_scenarios():
        raise _unknown("VMAS scenario", cfg.scenario, vmas_scenarios())
    kwargs = dict(cfg.kwargs)
    if cfg.multidiscrete_actions:
        kwargs["multidiscrete_actions"] = True
    env = VmasEnv(
        cfg.scenario,
        num_envs=num_envs,
        continuous_actions=cfg.continuous_actions,
        max_steps=cfg.max_steps,
        device=device,
        seed=seed,
        **kwargs,
    )
    if cfg.comm:
        from marl_ppo.comm import CommAdapter

        env = TransformedEnv(env, CommAdapter.for_env(env))
    return env


def _pettingzoo_env(task: str, max_steps: int, continuous: bool, kwargs: dict, seed: int) -> EnvBase:
    from torchrl.envs.libs.pettingzoo import PettingZooWrapper

    module = importlib.import_module(f"mpe2.{task}")
    return PettingZooWrapper(
        module.parallel_env(max_cycles=max_steps, continuous_actions=continuous, **kwargs),
        use_mask=True,
        seed=seed,
        categorical_actions=True,
    )


def _make_pettingzoo(cfg: EnvConfig, *, seed: int, num_envs: int) -> EnvBase:
    # torchrl's PettingZooEnv(task=...) imports the removed pettingzoo.mpe: build the mpe2 env ourselves.
    if cfg.scenario not in mpe_tasks():
        raise _unknown("PettingZoo MPE task", cfg.scenario, mpe_tasks())
    make = partial(_pettingzoo_env, cfg.scenario, cfg.max_steps, cfg.continuous_actions, dict(cfg.kwargs))
    fns = [partial(make, seed + i) for i in range(num_envs)]
    env = (ParallelEnv if cfg.parallel else SerialEnv)(num_envs, fns)
    env.set_seed(seed)
    return env


def _with_episode_returns(env: EnvBase) -> TransformedEnv:
    groups = list(group_map(env))
    reward_keys = [(g, "reward") for g in groups]
    reset_keys = [(g, "_reset") if (g, "_reset") in env.reset_keys else "_reset" for g in groups]
    return TransformedEnv(
        env,
        RewardSum(in_keys=reward_keys, out_keys=[(g, "episode_reward") for g in groups], reset_keys=reset_keys),
    )
