"""Multi-Agent MuJoCo (``env.kind=mamujoco``): real scenarios of gymnasium-robotics, tiny runs.

* HalfCheetah 2x3 reads as one group ``agent`` of two agents, each its three joints in [-1, 1];
* HAPPO with one set of weights per agent trains on it through ``marl-ppo train`` (the two agents are
  two units) and the run resumes exactly after a crash;
* a scenario or split that does not exist, and the missing extra, are refused in one line before a
  run directory exists.
"""

from __future__ import annotations

import json

import pytest

from marl_ppo.cli import main
from marl_ppo.config import load_config
from marl_ppo.envs import make_env
from marl_ppo.groups import read_group_specs
from tests.run.test_recovery import assert_straight_equals_crash_then_resume

pytest.importorskip("gymnasium_robotics")

TINY = [
    "env.kind=mamujoco", "env.scenario=HalfCheetah", "env.kwargs={agent_conf: 2x3}", "env.num_envs=2",
    "env.max_steps=20", "train.frames_per_batch=40", "train.total_frames=160", "train.minibatch_size=20",
    "train.num_epochs=2", "train.num_threads=1", "model.hidden=[16]", "model.share_params=false",
    "loss.algorithm=happo", "log.eval_episodes=2", "log.progress=false", "log.plot=false",
]  # fmt: skip


def test_halfcheetah_2x3_is_one_group_of_two_agents():
    cfg = load_config(overrides=TINY)
    env = make_env(cfg.env, seed=0)
    try:
        group = read_group_specs(env)["agent"]
        assert group.agents == ("agent_0", "agent_1")
        assert tuple(group.agent_action_spec.shape) == (2, 3)
        assert group.agent_action_spec.space.low.min() == -1 and group.agent_action_spec.space.high.max() == 1
        td = env.rollout(5)
        assert td["next", "agent", "reward"].shape == (2, 5, 2, 1)
    finally:
        env.close()


def test_happo_trains_the_two_agents_of_halfcheetah(tmp_path, capsys):
    assert main(["train", *TINY, f"log.root={tmp_path}", "log.name=hc"]) == 0
    out = capsys.readouterr().out
    assert json.loads(out[out.index("\n{") + 1 :])["frames"] == 160


def test_a_mamujoco_run_resumes_exactly(tmp_path, monkeypatch):
    cfg = load_config(overrides=[*TINY, "log.checkpoint_every=2", "log.eval_every=2"])
    assert_straight_equals_crash_then_resume(cfg, tmp_path, monkeypatch, 3, 40)


@pytest.mark.parametrize(
    "overrides, words",
    [
        (
            ["env.scenario=HalfChetah"],
            ["MaMuJoCo has no scenario 'HalfChetah' with agent_conf '2x3'", "HalfCheetah ['2x3'"],
        ),
        (["env.kwargs={agent_conf: 5x9}"], ["no scenario 'HalfCheetah' with agent_conf '5x9'", "Ant ['2x4'"]),
    ],
)
def test_a_scenario_that_does_not_exist_is_refused_in_one_line(tmp_path, capsys, overrides, words):
    assert main(["train", *TINY, *overrides, f"log.root={tmp_path / 'runs'}"]) == 1
    err = capsys.readouterr().err
    assert all(w in err for w in words), err
    assert not (tmp_path / "runs").exists()


def test_the_missing_extra_is_named(tmp_path, capsys, monkeypatch):
    import marl_ppo.options

    monkeypatch.setattr(marl_ppo.options, "installed", lambda package: package != "gymnasium_robotics")
    assert main(["train", *TINY, f"log.root={tmp_path / 'runs'}"]) == 1
    assert "pip install 'marl-ppo[mamujoco]'" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


def test_a_frame_opengl_cannot_draw_names_mujoco_gl(monkeypatch):
    from marl_ppo.envs.mamujoco import _game, _without_infos
    from marl_ppo.envs.options import EnvConfig

    monkeypatch.setenv("MUJOCO_GL", "nonsense")
    kwargs = {"agent_conf": "2x3", "render_mode": "rgb_array", "width": 32, "height": 32}
    game = _without_infos(_game(EnvConfig(kind="mamujoco", scenario="HalfCheetah", kwargs=kwargs)))
    game.reset(seed=0)
    with pytest.raises(RuntimeError, match=r"OpenGL \(MUJOCO_GL='nonsense'\) and could not: .* Set MUJOCO_GL=egl"):
        game.render()
    game.close()
