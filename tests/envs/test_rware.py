"""The multi-robot warehouse (``env.kind=rware``): rware's own tasks, two copies stepped in one loop.

* observations, rewards (deliveries included) and dones equal the library's own env step for step,
  over episodes cut by the step limit (truncated, never terminated), resets included;
* a run resumes exactly after a crash; the shipped configs train through ``marl-ppo train``;
* a task that does not exist, an option of the wrong name and the missing extra are refused in one line
  before a run directory exists.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from marl_ppo.cli import main
from marl_ppo.config import load_config
from marl_ppo.envs import EnvConfig, make_env
from marl_ppo.groups import read_group_specs
from tests.envs.gym_grid_checks import side_by_side, tiny
from tests.run.test_recovery import assert_straight_equals_crash_then_resume

pytest.importorskip("rware")

MOVING = [0.05, 0.45, 0.2, 0.2, 0.1]  # none, forward, left, right, toggle load: robots that go places


@pytest.mark.parametrize(
    "scenario, max_steps, seed, steps, delivered",
    [("tiny-4ag-easy", 120, 9, 150, True), ("rware-tiny-2ag-v2", 500, 0, 510, False), ("tiny-2ag", 30, 3, 70, False)],
)
def test_each_step_equals_the_library_env(scenario, max_steps, seed, steps, delivered):
    seen = side_by_side("rware", scenario, max_steps=max_steps, seed=seed, steps=steps, p=MOVING)
    assert seen["terminated"] == 0 and seen["truncated"] == 2 * (steps // max_steps)
    assert (seen["reward"] > 0) == delivered  # seed 9's robots deliver a shelf in each copy


def test_a_task_reads_as_one_group_of_robots():
    env = make_env(EnvConfig(kind="rware", scenario="tiny-4ag", num_envs=2, max_steps=500, kwargs={}), seed=0)
    try:
        group = read_group_specs(env)["agents"]
        assert group.agents == ("agent_0", "agent_1", "agent_2", "agent_3")
        assert env.observation_spec["agents", "observation"].shape == (2, 4, 71)
        assert env.full_action_spec["agents", "action"].space.n == 5
        td = env.rollout(5)
        assert td["next", "agents", "reward"].shape == (2, 5, 4, 1) and td["next", "done"].shape == (2, 5, 1)
        frame = env.render(mode="rgb_array", env_index=0)  # pyglet, headless through EGL without a DISPLAY
        assert frame.dtype == np.uint8 and frame.ndim == 3 and frame.shape[2] == 3 and frame.std() > 0
    finally:
        env.close()


def test_rewards_by_name_reach_the_warehouse():
    from rware.warehouse import RewardType

    cfg = EnvConfig(kind="rware", scenario="tiny-2ag", num_envs=1, max_steps=10, kwargs={"reward_type": "global"})
    env = make_env(cfg, seed=0)
    assert env.base_env.games[0].reward_type is RewardType.GLOBAL
    env.close()


def test_a_rware_run_resumes_exactly(tmp_path, monkeypatch):
    cfg = load_config(overrides=[*tiny("rware", "tiny-2ag"), "log.checkpoint_every=2", "log.eval_every=2"])
    assert_straight_equals_crash_then_resume(cfg, tmp_path, monkeypatch, 3, 40)


@pytest.mark.slow
@pytest.mark.parametrize("config", ["rware_tiny_2ag", "rware_tiny_4ag"])
def test_the_shipped_configs_train(tmp_path, capsys, config):
    overrides = ["env.num_envs=2", "env.max_steps=25", "train.frames_per_batch=100", "train.total_frames=200"]
    overrides += ["train.minibatch_size=50", "log.eval_every=1", "log.eval_episodes=2", "log.checkpoint_every=1"]
    overrides += ["model.hidden=[16]", "train.num_threads=1", f"log.root={tmp_path}", "log.name=run"]
    assert main(["train", config, *overrides]) == 0
    out = capsys.readouterr().out
    summary = json.loads(out[out.index("\n{") + 1 :])
    assert summary["frames"] == 200 and np.isfinite(summary["eval/agents/episode_reward"])


@pytest.mark.parametrize(
    "overrides, words",
    [
        (["env.scenario=tiny-2a"], ["RWARE has no task 'tiny-2a'; did you mean ['tiny-2ag'", "tiny-2ag, tiny-4ag"]),
        (["env.kwargs={reward_type: shared}"], ["env.kwargs.reward_type must be one of ['global', 'individual'"]),
        (["env.kwargs={max_steps: 20}"], ["env.kwargs.max_steps is env.max_steps: set env.max_steps=20"]),
        (["env.parallel=true"], ["env.parallel=true: env.kind=rware steps its copies in one loop"]),
    ],
)
def test_a_task_or_option_that_does_not_exist_is_refused_in_one_line(tmp_path, capsys, overrides, words):
    assert main(["train", *tiny("rware", "tiny-2ag"), *overrides, f"log.root={tmp_path / 'runs'}"]) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and all(w in err for w in words), err
    assert not (tmp_path / "runs").exists()


def test_the_missing_extra_is_named(tmp_path, capsys, monkeypatch):
    import marl_ppo.options

    monkeypatch.setattr(marl_ppo.options, "installed", lambda package: package != "rware")
    assert main(["train", *tiny("rware", "tiny-2ag"), f"log.root={tmp_path / 'runs'}"]) == 1
    assert "pip install 'marl-ppo[rware]'" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()
