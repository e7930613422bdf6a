"""The lean AEC-to-parallel conversion steps a game exactly as PettingZoo's own conversion does.

Two copies of each game, one in PettingZoo's ``aec_to_parallel_wrapper`` and one in
:class:`~marl_ppo.envs.aec_parallel.LeanAecToParallel`, reset on the same seed and given the same
random actions for several episodes: every step's observations, rewards, flags, infos and live
agents are equal, bit for bit, agents that leave mid-episode (knights-archers-zombies) included.
"""

from __future__ import annotations

import importlib

import numpy as np
import pytest
from pettingzoo.utils.conversions import aec_to_parallel_wrapper

from marl_ppo.envs.aec_parallel import LeanAecToParallel, lean_parallel_game

GAMES = {
    "pistonball": ("pettingzoo.butterfly.pistonball_v6", {"n_pistons": 4, "max_cycles": 40}),
    "cooperative_pong": ("pettingzoo.butterfly.cooperative_pong_v6", {"max_cycles": 40}),
    "kaz-agents-die": (
        "pettingzoo.butterfly.knights_archers_zombies_v11",
        {"line_death": True, "max_zombies": 4, "max_arrows": 4, "max_cycles": 60},
    ),
    "simple_tag": ("mpe2.simple_tag_v3", {"max_cycles": 25, "continuous_actions": True}),
}


def _equal(a, b) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    return np.array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("name", list(GAMES))
def test_lean_conversion_steps_as_pettingzoos(name):
    if name != "simple_tag":
        pytest.importorskip("pymunk")
    module, kwargs = GAMES[name]
    plain = importlib.import_module(module).parallel_env(**kwargs)
    lean = lean_parallel_game(importlib.import_module(module).parallel_env(**kwargs))
    assert type(plain) is aec_to_parallel_wrapper and type(lean) is LeanAecToParallel
    rng = np.random.default_rng(0)
    steps = episodes = 0
    departed = False
    for episode in range(3):
        obs_plain, _ = plain.reset(seed=episode)
        obs_lean, _ = lean.reset(seed=episode)
        assert _equal(obs_plain, obs_lean)
        while plain.agents:
            space = {a: plain.action_space(a) for a in plain.agents}
            for a, s in space.items():
                s.seed(int(rng.integers(2**31)))
            actions = {a: s.sample() for a, s in space.items()}
            before = len(plain.agents)
            out_plain, out_lean = plain.step(actions), lean.step(dict(actions))
            for part, (x, y) in enumerate(zip(out_plain, out_lean)):
                assert _equal(dict(x), dict(y)), (name, steps, part)
            assert plain.agents == lean.agents
            departed |= 0 < len(plain.agents) < before
            steps += 1
        episodes += 1
    assert episodes == 3 and steps > 3 * 20
    if name == "kaz-agents-die":
        assert departed, "no agent left mid-episode: the case is not exercised"


def test_other_games_are_left_as_they_are():
    from pettingzoo.butterfly import pistonball_v6

    class OwnStep(aec_to_parallel_wrapper):  # a subclass may step its own way
        pass

    pytest.importorskip("pymunk")
    own = OwnStep(pistonball_v6.raw_env(n_pistons=4))
    assert lean_parallel_game(own) is own
    aec = pistonball_v6.env(n_pistons=4)
    assert lean_parallel_game(aec) is aec
