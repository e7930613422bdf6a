"""The lean step of a parallel PettingZoo game gives torchrl's tensordicts, value for value.

:class:`~marl_ppo.envs.lean_step.LeanParallelStep` writes each group's entries at once; with
``lean = False`` the same wrapper takes torchrl's own per-agent step. On the same seed and the same
actions, both rollouts must be equal in every entry: Knights-Archers-Zombies with agents that die
at the walls (masks, a dead agent's flags), MAgent2's battle (float views kept as images, every
agent alive), an MPE task (vectors), MaMuJoCo's Walker2d with its global state, and a turn-based
game keeps torchrl's step.
"""

from __future__ import annotations

import pytest
import torch

from marl_ppo.envs.lean_step import LeanParallelStep
from marl_ppo.envs.mamujoco import make_mamujoco
from marl_ppo.envs.options import EnvConfig, ImageOptions
from marl_ppo.envs.pettingzoo import copy_factory, make_pettingzoo

pytest.importorskip("pymunk")
pytest.importorskip("magent2")
pytest.importorskip("gymnasium_robotics")

CASES = {
    "kaz-agents-die": EnvConfig(
        kind="pettingzoo",
        scenario="pettingzoo.butterfly.knights_archers_zombies_v11",
        num_envs=2,
        max_steps=60,
        continuous_actions=False,
        kwargs={"line_death": True, "max_zombies": 4, "max_arrows": 4},
    ),
    "battle-images": EnvConfig(
        kind="pettingzoo",
        scenario="magent2.environments.battle_v4",
        num_envs=2,
        max_steps=30,
        continuous_actions=False,
        kwargs={"map_size": 12},
        image=ImageOptions(observation="image"),
    ),
    "mpe": EnvConfig(kind="pettingzoo", scenario="simple_spread_v3", num_envs=2, max_steps=30, kwargs={"N": 2}),
    "mamujoco-state": EnvConfig(
        kind="mamujoco", scenario="Walker2d", num_envs=2, max_steps=30, state=True, kwargs={"agent_conf": "2x3"}
    ),
}


def _rollout(cfg: EnvConfig, lean: bool, monkeypatch) -> torch.Tensor:
    monkeypatch.setattr(LeanParallelStep, "lean", lean)
    if cfg.kind == "mamujoco":  # the lean step in each copy of a SerialEnv, with the global state
        env = make_mamujoco(cfg, seed=3, num_envs=cfg.num_envs, lean=False)
    else:
        env = make_pettingzoo(cfg, seed=3, num_envs=cfg.num_envs)
    torch.manual_seed(0)  # the random actions
    td = env.rollout(cfg.max_steps * 2, break_when_any_done=False)
    env.close()
    return td


@pytest.mark.parametrize("name", list(CASES))
def test_lean_step_equals_torchrls_step(name, monkeypatch):
    cfg = CASES[name]
    lean, plain = _rollout(cfg, True, monkeypatch), _rollout(cfg, False, monkeypatch)
    assert set(lean.keys(True, True)) == set(plain.keys(True, True))
    for key in plain.keys(True, True):
        assert lean[key].dtype == plain[key].dtype, key
        assert torch.equal(lean[key], plain[key]), key
    if name == "mamujoco-state":
        assert plain["next", "state"].shape[-1] == 17 and plain["next", "state"].std() > 0
    if name == "kaz-agents-die":  # the case that matters: agents left mid-episode
        masks = [plain["next", g, "mask"] for g in ("archer", "knight")]
        assert any((~m & ~plain["next", "done"]).any() for m in masks)


def test_turn_based_games_keep_torchrls_step():
    rps = EnvConfig(kind="pettingzoo", scenario="pettingzoo.classic.rps_v2", continuous_actions=False, kwargs={})
    assert _wrapper(copy_factory(rps)(0)).lean_plan() is None  # an AEC game: torchrl's step
    battle = _wrapper(copy_factory(CASES["battle-images"])(0))
    assert [g for g, *_ in battle.lean_plan()] == ["red", "blue"]


def _wrapper(env):
    return env.base_env if hasattr(env, "base_env") else env
