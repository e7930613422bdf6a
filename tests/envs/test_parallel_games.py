"""``ParallelGames`` gives, value for value, what torchrl's ``SerialEnv`` of the wrapped copies gives.

The reference is torchrl's own path: a ``SerialEnv`` of the adapter's copies with torchrl's per-agent
step (the lean step switched off). On the same seed and the same random actions, whole rollouts over
several episode ends must be equal in every entry, with the same specs: Knights-Archers-Zombies
(agents that leave mid-episode, a flattened ``float64`` observation),
MAgent2's battle (float views kept as images), MPE with discrete and with continuous actions (the
root flags when any agent is done) and MaMuJoCo's Walker2d (continuous, the root flags when every agent
is; a walker that falls ends its episode, so the copies end apart and are reset alone).
A short MaMuJoCo training run ends with the same parameters and logs either way, and what the one
loop cannot reproduce is left to ``SerialEnv``.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch
from torchrl.envs import SerialEnv

import marl_ppo.envs.mamujoco as mamujoco_adapter
from marl_ppo.config import load_config
from marl_ppo.envs.lean_step import LeanParallelStep
from marl_ppo.envs.mamujoco import make_mamujoco
from marl_ppo.envs.options import EnvConfig, ImageOptions
from marl_ppo.envs.parallel_games import ParallelGames, _WholeCopies, parallel_games_refusal
from marl_ppo.envs.pettingzoo import copy_factory, make_pettingzoo
from marl_ppo.run.trainer import Trainer
from tests.same_run import assert_same_run

pytest.importorskip("pymunk")
pytest.importorskip("magent2")
pytest.importorskip("gymnasium_robotics")

CASES = {
    "kaz-agents-leave": EnvConfig(
        kind="pettingzoo",
        scenario="pettingzoo.butterfly.knights_archers_zombies_v11",
        max_steps=40,
        continuous_actions=False,
        kwargs={"line_death": True, "max_zombies": 4, "max_arrows": 4},
    ),
    "battle-images": EnvConfig(
        kind="pettingzoo",
        scenario="magent2.environments.battle_v4",
        max_steps=15,
        continuous_actions=False,
        kwargs={"map_size": 12},
        image=ImageOptions(observation="image"),
    ),
    "mpe-discrete": EnvConfig(kind="pettingzoo", scenario="simple_spread_v3", max_steps=12, kwargs={"N": 3}),
    "mpe-continuous": EnvConfig(
        kind="pettingzoo", scenario="simple_tag_v3", max_steps=12, continuous_actions=True, kwargs={}
    ),
    "mamujoco-falls": EnvConfig(
        kind="mamujoco",
        scenario="Walker2d",
        max_steps=60,
        state=True,
        kwargs={"agent_conf": "2x3", "agent_obsk": 1},
    ),
}


def _make(cfg: EnvConfig, lean: bool):
    make = make_mamujoco if cfg.kind == "mamujoco" else make_pettingzoo
    return make(cfg, seed=11, num_envs=3, lean=lean)


def _rollout(cfg: EnvConfig, lean: bool, monkeypatch):
    monkeypatch.setattr(LeanParallelStep, "lean", lean)  # off: torchrl's own per-agent step in each copy
    env = _make(cfg, lean)
    assert isinstance(env, ParallelGames if lean else SerialEnv)
    torch.manual_seed(0)  # the random actions
    td = env.rollout(cfg.max_steps * 3 + 4, break_when_any_done=False)
    specs = [env.full_observation_spec, env.full_action_spec, env.full_reward_spec, env.full_done_spec]
    env.close()
    return td, specs


@pytest.mark.parametrize("name", list(CASES))
def test_parallel_games_give_serial_envs_data(name, monkeypatch):
    cfg = CASES[name]
    expected, expected_specs = _rollout(cfg, False, monkeypatch)
    got, specs = _rollout(cfg, True, monkeypatch)
    assert specs == expected_specs
    keys = sorted(expected.keys(True, True), key=str)
    assert sorted(got.keys(True, True), key=str) == keys
    for key in keys:
        assert got.get(key).dtype == expected.get(key).dtype, key
        assert torch.equal(got.get(key), expected.get(key)), key
    done = expected.get(("next", "done")).squeeze(-1)  # [envs, T]
    assert done.sum() >= 3  # episodes ended, so the copies were reset mid-rollout
    if name == "kaz-agents-leave":  # agents left mid-episode
        masks = [expected["next", g, "mask"] for g in ("archer", "knight")]
        assert any((~m & ~expected["next", "done"]).any() for m in masks)
    if name == "mamujoco-falls":  # a walker that falls ends its episode: copies end apart, so some are reset alone
        assert (done.any(0) & ~done.all(0)).any()


def test_rewards_given_as_one_element_arrays_are_read_as_numbers(monkeypatch):
    # some games reward each agent with a shape-(1,) array: the same rollout as with plain floats
    cfg = CASES["mpe-discrete"]
    plain, _ = _rollout(cfg, True, monkeypatch)
    env = _make(cfg, True)
    for game in env.games:
        step = game.step

        def arrays(actions, step=step):
            obs, rewards, terminations, truncations, infos = step(actions)
            return obs, {a: np.array([r]) for a, r in rewards.items()}, terminations, truncations, infos

        game.step = arrays
    torch.manual_seed(0)
    got = env.rollout(cfg.max_steps * 3 + 4, break_when_any_done=False)
    env.close()
    assert torch.equal(got["next", "agent", "reward"], plain["next", "agent", "reward"])
    assert plain["next", "agent", "reward"].abs().sum() > 0


def test_what_the_one_loop_cannot_reproduce_is_left_to_serial_env():
    pistonball = EnvConfig(
        kind="pettingzoo",
        scenario="pettingzoo.butterfly.pistonball_v6",
        max_steps=5,
        continuous_actions=False,
        kwargs={"n_pistons": 3},
        image=ImageOptions(size=[16, 16], grayscale=True),
    )
    copy = copy_factory(pistonball)(0)
    assert "transforms other than one FlatObservation" in parallel_games_refusal(copy)
    copy.close()
    env = make_pettingzoo(pistonball, seed=0, num_envs=2)
    assert isinstance(env, SerialEnv)
    env.close()
    tictactoe = copy_factory(EnvConfig(kind="pettingzoo", scenario="tictactoe_v3", kwargs={}))(0)
    assert "not a parallel PettingZoo game" in parallel_games_refusal(tictactoe)
    tictactoe.close()


def test_a_mamujoco_run_is_the_same_either_way(tmp_path, monkeypatch):
    overrides = [
        "env.num_envs=2",
        "env.max_steps=20",
        "train.frames_per_batch=60",
        "train.total_frames=180",
        "train.minibatch_size=30",
        "train.num_epochs=2",
        "train.num_threads=1",
        "model.hidden=[16]",
        "log.eval_every=2",
        "log.eval_episodes=2",
        "log.progress=false",
        "log.plot=false",
    ]
    cfg = load_config("halfcheetah_2x3_happo", overrides)
    lean = Trainer(cfg, run_dir=tmp_path / "lean")
    assert isinstance(lean.parts.env.base_env, ParallelGames)
    lean.fit()
    # the env kinds' table looks the adapter up when it builds: patched there, every env of the run is plain
    monkeypatch.setattr(mamujoco_adapter, "make_mamujoco", functools.partial(make_mamujoco, lean=False))
    plain = Trainer(cfg, run_dir=tmp_path / "serial")
    assert isinstance(plain.parts.env.base_env, SerialEnv)
    plain.fit()
    # closing a SerialEnv (the collector does at total_frames) leaves train.num_threads in force
    assert torch.get_num_threads() == 1
    assert_same_run(plain, lean, tmp_path / "serial", tmp_path / "lean")
    notes = (tmp_path / "lean" / "run.log").read_text()
    assert "env: 2 copies of" in notes and "stepped by ParallelGames" in notes


def test_whole_copies_write_what_the_per_copy_write_writes():
    """The two write paths of a step, on hand-made game outputs: flags set on live agents (a game may
    keep a finished agent in ``agents``), rewards given as numbers and one-element arrays, two groups.

    The rollouts above never reach such a step through the whole-copy path (their games drop an agent
    that ends), so it is fed by hand here: every entry must equal ``_write``'s, copy by copy.
    """
    env = make_pettingzoo(CASES["mpe-continuous"], seed=0, num_envs=3)
    games = env.base_env if hasattr(env, "base_env") else env
    layouts = games._layouts
    assert len(layouts) == 2  # adversaries and the agent
    names = [a for grp in layouts for a in grp.agents]
    rng = np.random.default_rng(0)
    steps = []
    for i in range(3):
        observations = {
            a: rng.normal(size=games.full_observation_spec[g.name, "observation"].shape[-1])
            for g in layouts
            for a in g.agents
        }
        rewards = {a: (float(rng.normal()) if k % 2 else np.array([rng.normal()])) for k, a in enumerate(names)}
        terminations = {a: bool(rng.integers(2)) for a in names}
        truncations = {a: bool(rng.integers(2)) for a in names}
        steps.append((observations, rewards, terminations, truncations, {}))
    game = type("Game", (), {"agents": list(names)})()
    whole_arrays = [grp.arrays(3, step=True) for grp in layouts]
    plain_arrays = [grp.arrays(3, step=True) for grp in layouts]
    whole = _WholeCopies(layouts)
    for i, step in enumerate(steps):
        assert whole.take(i, game, step)
        games._write(i, game, step, plain_arrays)
    whole.write(whole_arrays)
    assert any(f for s in steps for f in s[2].values()) and any(f for s in steps for f in s[3].values())
    for grp, ours, theirs in zip(layouts, whole_arrays, plain_arrays):
        assert ours.keys() == theirs.keys()
        for key in ours:
            np.testing.assert_array_equal(ours[key], theirs[key], err_msg=f"{grp.name}/{key}")
    # a copy with an agent gone is not taken (the per-copy write handles its departed agents)
    gone = type("Game", (), {"agents": names[1:]})()
    assert not _WholeCopies(layouts).take(0, gone, steps[0])
    env.close()
