"""PettingZoo's AEC-to-parallel conversion, without the observation its step computes and throws away.

Why it exists: most PettingZoo games are written turn-based (AEC) and reach the parallel API through
``pettingzoo.utils.conversions.aec_to_parallel_wrapper`` (butterfly's pistonball and cooperative
pong, every MPE task). Its ``step`` (PettingZoo 1.27) calls ``aec_env.last()`` before each agent's
turn and discards the result, and ``last()`` renders that agent's observation: each step observes
every agent twice. For pistonball an observation is a copy cut out of the game's screen, and the
discarded ones were 40 % of the game's own step (about 2.3 ms of 5.7 ms on an AMD EPYC).
:class:`LeanAecToParallel` is the same step without that call; nothing else changes: the game's
state, the returned dicts and the order of every other call are those of PettingZoo's wrapper
(``tests/envs/test_aec_parallel.py`` compares whole episodes, agents that leave included).
An observation that changes the game when computed would make the two differ: none of
PettingZoo's does, and :func:`lean_parallel_game` converts only PettingZoo's own wrapper (a
subclass may have its own step).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from pettingzoo.utils.conversions import aec_to_parallel_wrapper

__all__ = ["LeanAecToParallel", "lean_parallel_game"]


def lean_parallel_game(game: Any) -> Any:
    """``game`` itself, or, where it is PettingZoo's plain AEC-to-parallel wrapper, the lean one around its AEC env."""
    return LeanAecToParallel(game.aec_env) if type(game) is aec_to_parallel_wrapper else game


class LeanAecToParallel(aec_to_parallel_wrapper):
    """``aec_to_parallel_wrapper`` whose ``step`` observes each agent once, after every agent has acted."""

    def step(self, actions):
        # PettingZoo 1.27's step, line for line, less its ``self.aec_env.last()`` before each turn
        rewards = defaultdict(int)
        for agent in self.aec_env.agents:
            if agent != self.aec_env.agent_selection:
                if self.aec_env.terminations[agent] or self.aec_env.truncations[agent]:
                    raise AssertionError(
                        f"expected agent {agent} got termination or truncation agent {self.aec_env.agent_selection}. "
                        "Parallel environment wrapper expects all agent death (setting an agent's "
                        "self.terminations or self.truncations entry to True) to happen only at the end of a cycle."
                    )
                raise AssertionError(
                    f"expected agent {agent} got agent {self.aec_env.agent_selection}, Parallel environment "
                    "wrapper expects agents to step in a cycle."
                )
            self.aec_env.step(actions[agent])
            for agent in self.aec_env.agents:
                rewards[agent] += self.aec_env.rewards[agent]
        terminations = dict(**self.aec_env.terminations)
        truncations = dict(**self.aec_env.truncations)
        infos = dict(**self.aec_env.infos)
        observations = {agent: self.aec_env.observe(agent) for agent in self.aec_env.agents}
        while self.aec_env.agents and (
            self.aec_env.terminations[self.aec_env.agent_selection]
            or self.aec_env.truncations[self.aec_env.agent_selection]
        ):
            self.aec_env.step(None)
        self.agents = self.aec_env.agents
        return observations, rewards, terminations, truncations, infos
