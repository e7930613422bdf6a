"""Env copies stepped in one loop where that gives torchrl's data: the turn-based and the parallel steppers.

>>> from marl_ppo.envs import EnvConfig
>>> from marl_ppo.envs.pettingzoo import copy_factory
>>> make = copy_factory(EnvConfig(kind="pettingzoo", scenario="tictactoe_v3", kwargs={}))
>>> env = in_one_loop(make, seed=0, num_envs=2)
>>> type(env).__name__
'AecGames'
>>> env.close()
"""

from __future__ import annotations

from typing import Callable

from torchrl.envs import EnvBase

from marl_ppo.envs.aec_games import AecGames, aec_games_refusal
from marl_ppo.envs.parallel_games import ParallelGames, parallel_games_refusal

__all__ = ["in_one_loop"]


def in_one_loop(make: Callable[[int], EnvBase], *, seed: int, num_envs: int) -> EnvBase | None:
    """The copies ``make(seed + i)`` stepped by :class:`~marl_ppo.envs.aec_games.AecGames` (a turn-based game)
    or :class:`~marl_ppo.envs.parallel_games.ParallelGames` (a parallel one), seeded as ``SerialEnv`` seeds
    them; ``None`` where neither takes the game (then a ``SerialEnv`` steps it)."""
    first = make(seed)
    for stepper, refusal in ((AecGames, aec_games_refusal), (ParallelGames, parallel_games_refusal)):
        if refusal(first) is None:
            env = stepper([first] + [make(seed + i) for i in range(1, num_envs)])
            env.set_seed(seed)
            return env
    first.close()
    return None
