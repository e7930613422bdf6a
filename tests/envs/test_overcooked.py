"""Overcooked (``env.kind=overcooked``): the library's kitchens, copies stepped in one loop.

* a scripted episode of cramped_room (one soup cooked and delivered, then seeded random moves to the
  horizon) equals the library's own env (``overcooked.Overcooked``) step for step: the lossless grid and
  its urgency flag, the legal moves, the team's reward (deliveries plus shaping) and the end at the
  horizon; the features are the library's ``featurize_state`` of the same state;
* the two cooks are two groups, each given the team's reward (the soup one of them delivered pays both),
  its own deliveries and shaping as infos; the shipped table trains each on the team's reward and its shaping;
* a run resumes exactly after a crash; the shipped configs train through ``marl-ppo train`` (features with
  an MLP, the grid with a CNN);
* a layout that does not exist, a bad option and the missing extra are refused in one line before a run
  directory exists.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from marl_ppo.cli import main
from marl_ppo.config import load_config
from marl_ppo.envs import EnvConfig, make_env
from marl_ppo.groups import read_group_specs
from tests.run.test_recovery import assert_straight_equals_crash_then_resume

pytest.importorskip("overcooked")

N, S, E, W, STAY, INTERACT = range(6)
AGENTS = ("agent_0", "agent_1")
ONION = [E, INTERACT, W, N, INTERACT]  # agent_1, from its start: fetch an onion, drop it in the pot
# agent_1 fills the pot and starts it; agent_0 fetches a dish, waits, takes the soup and serves it at step 49
SOUP = {
    "agent_0": [S, INTERACT, N] + [STAY] * 40 + [E, N, INTERACT, S, E, S, INTERACT],
    "agent_1": ONION * 3 + [INTERACT, E] + [STAY] * 33,
}
TINY = [
    "env.num_envs=2", "env.max_steps=30", "train.frames_per_batch=60", "train.total_frames=180",
    "train.minibatch_size=30", "train.num_epochs=2", "train.num_threads=1", "model.hidden=[16]",
    "log.eval_episodes=2", "log.progress=false", "log.plot=false",
]  # fmt: skip


def script(steps: int, seed: int = 0) -> np.ndarray:
    """``[steps, 2]`` moves: the soup, then seeded random moves."""
    soup = np.stack([SOUP["agent_0"], SOUP["agent_1"]], axis=1)
    rest = np.random.default_rng(seed).integers(0, 6, (steps - len(soup), 2))
    return np.concatenate([soup, rest])


def kitchen(observation: str, max_steps: int = 400, num_envs: int = 1, **kwargs):
    cfg = EnvConfig(
        kind="overcooked", scenario="cramped_room", num_envs=num_envs, max_steps=max_steps,
        kwargs={"observation": observation, **kwargs},
    )  # fmt: skip
    return make_env(cfg, seed=0)


def test_each_step_equals_the_library_env(monkeypatch):
    import overcooked
    from overcooked.planning.planners import MotionPlanner

    class Planner(MotionPlanner):  # what the library's env computes its potential with, at every step
        def min_cost_to_feature(self, start, features):  # 0.2.1 fails on no features (both pots full)
            return super().min_cost_to_feature(start, features) if features else (np.inf, None)

    # the library's env reads its planner from (or pickles it into) its own folder: built in memory here
    monkeypatch.setattr(
        MotionPlanner, "from_pickle_or_compute", staticmethod(lambda mdp, goals, **_: Planner(mdp, goals))
    )
    theirs = overcooked.Overcooked.from_layout("cramped_room", horizon=400, reward_shaping_factor=1.0)
    grid, features = kitchen("grid"), kitchen("featurized")
    base = features.base_env
    obs, _ = theirs.reset()
    a, b = grid.reset(), features.reset()
    sparse = 0.0
    for t, moves in enumerate(script(400)):
        for group, move in zip(("agent_0", "agent_1"), moves):
            a[group, "action"] = b[group, "action"] = torch.tensor([[move]])
        a, b, step = grid.step(a)["next"], features.step(b)["next"], theirs.step(moves)
        assert base.states[0] == theirs.state, t
        lib_features = theirs._mdp.featurize_state(theirs.state, base.planner)
        for p, group in enumerate(("agent_0", "agent_1")):
            ours = a[group, "observation"][0, 0].numpy()
            assert np.array_equal(ours[:25].transpose(0, 2, 1), step.obs.data[p]), (t, group)  # [C, W, H] there
            assert bool(ours[25].all()) == bool(step.obs.extras[p, 1]) and ours[25].min() == ours[25].max()
            assert np.array_equal(a[group, "action_mask"][0, 0].numpy(), step.obs.available_actions[p])
            assert np.array_equal(b[group, "observation"][0, 0].numpy(), np.float32(lib_features[p]))
        team = float(a["agent_0", "reward"])
        assert team == float(a["agent_1", "reward"]) == sum(float(a[g, "info", "delivered"]) for g in AGENTS)
        assert team + sum(float(a[g, "info", "shaped_reward"]) for g in AGENTS) == pytest.approx(float(step.reward[0]))
        sparse += team
        assert bool(a["done"]) == bool(b["done"]) == step.done
        assert not step.done or (bool(a["truncated"]) and not bool(a["terminated"]))  # the horizon: a truncation
    assert step.done and t == 399 and sparse == 20.0  # one soup, delivered by agent_0 at step 49


def test_the_planner_answers_featurize_state_as_overcooked_ai():
    from overcooked.mdp import OvercookedGridworld
    from overcooked.planning.planners import MotionPlanner

    from marl_ppo.envs.overcooked import _Planner

    mdp = OvercookedGridworld.from_layout_name("cramped_room")
    planner = _Planner(MotionPlanner(mdp, []))
    start = mdp.get_standard_start_state().players[0].pos_and_or
    assert planner.min_cost_to_feature(start, [], with_argmin=True) == (np.inf, None)
    cost, best = planner.min_cost_to_feature(start, mdp.get_pot_locations(), with_argmin=True)
    assert best in mdp.get_pot_locations() and cost == planner.min_cost_to_feature(start, mdp.get_pot_locations())


def test_the_cooks_are_two_groups_paid_the_teams_reward_and_the_shipped_table_adds_each_ones_shaping():
    from marl_ppo.groups.reward_table import RewardTable

    env = kitchen("featurized", max_steps=60, num_envs=2, old_dynamics=True)
    try:
        specs = read_group_specs(env)
        assert list(specs) == list(AGENTS) and specs["agent_0"].observation_shape == (1, 96)
        assert specs["agent_0"].action_mask_key == ("agent_0", "action_mask") and specs["agent_0"].keys.mask is None
        table = RewardTable.from_dict(load_config("overcooked_cramped_room").reward_table).bind(specs, env)
        moves = torch.as_tensor(script(60))
        td, seen = env.reset(), []
        for move in moves:
            for j, g in enumerate(AGENTS):
                td[g, "action"] = move[j].expand(2, 1).clone()
            td, next_td = env.step_and_maybe_reset(td)
            seen.append(table(td))
            td = next_td
        out = torch.stack(seen, 1)["next"]
        assert out["agent_0", "info", "delivered"].sum() == 2 * 20 and out["agent_1", "info", "delivered"].sum() == 0
        for g in AGENTS:  # the soup agent_0 delivers at step 49 pays both cooks
            assert out[g, "reward"][:, 49].flatten().tolist() == [20.0, 20.0] and out[g, "reward"].sum() == 2 * 20
            assert torch.equal(out[g, "train_reward"], out[g, "reward"] + out[g, "info", "shaped_reward"])
            assert out[g, "info", "shaped_reward"].sum() > 0
            assert out[g, "episode_reward"][:, -1].flatten().tolist() == [20.0, 20.0]  # the team's score
        frame = env.render(mode="rgb_array", env_index=1)
        assert frame.dtype == np.uint8 and frame.ndim == 3 and frame.shape[2] == 3 and frame.std() > 0
    finally:
        env.close()


@pytest.mark.slow
def test_an_overcooked_run_resumes_exactly(tmp_path, monkeypatch):
    cfg = load_config(
        "overcooked_cramped_room",
        overrides=[*TINY, "train.total_frames=240", "log.checkpoint_every=2", "log.eval_every=2"],
    )
    assert_straight_equals_crash_then_resume(cfg, tmp_path, monkeypatch, 3, 60)


@pytest.mark.slow
@pytest.mark.parametrize(
    "config, overrides",
    [
        ("overcooked_cramped_room", []),
        ("overcooked_coordination_ring", []),
        (
            "overcooked_cramped_room",
            [
                "env.kwargs={old_dynamics: true, observation: grid}", "model.kind=cnn", "model.critic=group",
                "model.options={cnn: {channel_order: chw, channels: [8, 8], paddings: [1, 1]}}",
            ],
        ),
    ],
)  # fmt: skip
def test_each_shipped_config_trains(tmp_path, capsys, config, overrides):
    assert main(["train", config, *TINY, *overrides, f"log.root={tmp_path}", "log.name=run"]) == 0
    out = capsys.readouterr().out
    summary = json.loads(out[out.index("\n{") + 1 :])
    assert summary["frames"] == 180 and "eval/agent_0/episode_reward" in summary


@pytest.mark.parametrize(
    "overrides, words",
    [
        (
            ["env.scenario=cramped_rom"],
            ["unknown Overcooked layout 'cramped_rom'", "cramped_room", "coordination_ring"],
        ),
        (["env.kwargs.observation=pixels"], ["env.kwargs.observation must be one of ['featurized', 'grid']"]),
        (["env.kwargs.cook_tme=5"], ["env.kwargs ['cook_tme'] are not Overcooked options", "cook_time"]),
        (["env.scenario=multiplayer_schelling"], ["layout 'multiplayer_schelling' has 4 cooks; the env takes 2"]),
    ],
)
def test_a_layout_or_option_that_does_not_exist_is_refused_in_one_line(tmp_path, capsys, overrides, words):
    assert main(["train", "overcooked_cramped_room", *TINY, *overrides, f"log.root={tmp_path / 'runs'}"]) == 1
    err = capsys.readouterr().err
    assert all(w in err for w in words), err
    assert len([line for line in err.splitlines() if "Overcooked" in line or "env.kwargs" in line]) == 1, err
    assert not (tmp_path / "runs").exists()


def test_the_missing_extra_is_named(tmp_path, capsys, monkeypatch):
    import marl_ppo.options

    monkeypatch.setattr(marl_ppo.options, "installed", lambda package: package != "overcooked")
    assert main(["train", "overcooked_cramped_room", *TINY, f"log.root={tmp_path / 'runs'}"]) == 1
    err = capsys.readouterr().err
    assert "env.kind: overcooked needs the 'overcooked' package" in err and "pip install 'marl-ppo[overcooked]'" in err
    assert not (tmp_path / "runs").exists()
