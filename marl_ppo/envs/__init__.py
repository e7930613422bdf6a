"""Env adapters: build a torchrl multi-agent env from an :class:`~marl_ppo.envs.options.EnvConfig`.

One module per kind, each only describing which env, which groups, which keys:
:mod:`~marl_ppo.envs.vmas` (``env.kind=vmas``), :mod:`~marl_ppo.envs.pettingzoo`
(``env.kind=pettingzoo``: MPE and classic short names, or any PettingZoo env by import path) and
:mod:`~marl_ppo.envs.custom` (``env.kind=custom``: your own factory, or ``env_fn``). Every env
comes back with a ``RewardSum`` transform that accumulates each group's raw reward into
``(group, "episode_reward")`` for reporting (training rewards come from the reward table), and
with ``env.time_limit`` applied (:mod:`~marl_ppo.envs.time_limit`): by default an episode cut at
``env.max_steps`` is ``truncated``, not ``terminated``, so GAE bootstraps there.

>>> from marl_ppo.envs import EnvConfig, make_env
>>> env = make_env(EnvConfig(scenario="navigation", num_envs=2, kwargs={"n_agents": 2}), seed=0)
>>> env.group_map
{'agents': ['agent_0', 'agent_1']}
>>> env.rollout(3)["next", "agents", "episode_reward"].shape
torch.Size([2, 3, 2, 1])
"""

from marl_ppo.lazy import lazy_exports, names_by_module

# module -> the public names it defines (imported on first use: the options load no torch)
_EXPORTS = names_by_module(
    {
        "marl_ppo.envs.make": "make_env eval_num_envs",
        "marl_ppo.envs.options": "EnvConfig",
        "marl_ppo.envs.kinds": "EnvKind ENV_KINDS",
        "marl_ppo.envs.families": "GameFamily FAMILIES mpe_tasks classic_tasks pettingzoo_tasks",
        "marl_ppo.envs.vmas": "vmas_scenarios",
        "marl_ppo.envs.transforms": "FlatObservation",
        "marl_ppo.envs.comm": "CommAdapter",
        "marl_ppo.envs.custom": "EnvFactory load_factory factory_path absolute_factory",
        "marl_ppo.envs.time_limit": "TruncationAsTermination",
    }
)
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
