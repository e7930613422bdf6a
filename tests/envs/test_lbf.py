"""Level-Based Foraging (``env.kind=lbf``): lbforaging's own tasks, two copies stepped in one loop.

* observations, rewards and dones equal the library's own env step for step, over episodes that end
  by eating every food (terminated) and by the step limit (truncated), resets included; the flags
  equal those of torchrl's ``LBForagingWrapper``;
* a run resumes exactly after a crash; the shipped configs train through ``marl-ppo train``;
* a task that does not exist and the missing extra are refused in one line before a run directory exists.
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
from tests.envs.gym_grid_checks import library_game, side_by_side, tiny
from tests.run.test_recovery import assert_straight_equals_crash_then_resume

pytest.importorskip("lbforaging")


@pytest.mark.parametrize(
    "scenario, max_steps, seed, steps",
    [("8x8-2p-2f-coop", 50, 0, 110), ("5x5-2p-1f", 50, 1, 150), ("Foraging-5x5-2p-1f-v3", 20, 1, 60)],
)
def test_each_step_equals_the_library_env(scenario, max_steps, seed, steps):
    seen = side_by_side("lbf", scenario, max_steps=max_steps, seed=seed, steps=steps)
    assert seen["truncated"] >= 2
    if scenario != "8x8-2p-2f-coop":  # random players eat a single food, not two foods together
        assert seen["terminated"] >= 2 and seen["reward"] > 0


def test_episode_ends_are_flagged_as_torchrls_lbforaging_wrapper_flags_them():
    from torchrl.envs.libs.lbforaging import LBForagingWrapper

    seed = int(np.random.SeedSequence([1, 0]).generate_state(1)[0])  # copy 0's seed for train.seed 1
    theirs = LBForagingWrapper(library_game("lbf", "5x5-2p-1f", 50), seed=seed)
    ours = make_env(EnvConfig(kind="lbf", scenario="5x5-2p-1f", num_envs=1, max_steps=50, kwargs={}), seed=1)
    actions = torch.as_tensor(np.random.default_rng(0).integers(0, 6, (150, 2)))
    a, b = theirs.reset(), ours.reset()
    ends = 0
    for act in actions:
        a["agents", "action"], b["agents", "action"] = act, act[None]
        a, a_next = theirs.step_and_maybe_reset(a)
        b, b_next = ours.step_and_maybe_reset(b)
        for key in ("done", "terminated", "truncated"):
            assert bool(a["next", key]) == bool(b["next", key][0])
        assert torch.equal(a["next", "agents", "reward"], b["next", "agents", "reward"][0])
        ends += int(a["next", "done"])
        a, b = a_next, b_next
    assert ends >= 3


def test_a_task_reads_as_one_group_of_cooperating_agents():
    env = make_env(EnvConfig(kind="lbf", scenario="10x10-3p-3f", num_envs=2, max_steps=50, kwargs={}), seed=0)
    try:
        group = read_group_specs(env)["agents"]
        assert group.agents == ("agent_0", "agent_1", "agent_2")
        assert env.observation_spec["agents", "observation"].shape == (2, 3, 18)
        assert env.full_action_spec["agents", "action"].space.n == 6
        td = env.rollout(5)
        assert td["next", "agents", "reward"].shape == (2, 5, 3, 1) and td["next", "done"].shape == (2, 5, 1)
        frame = env.render(mode="rgb_array", env_index=1)  # pyglet, headless through EGL without a DISPLAY
        assert frame.dtype == np.uint8 and frame.ndim == 3 and frame.shape[2] == 3 and frame.std() > 0
    finally:
        env.close()


def test_a_lbf_run_resumes_exactly(tmp_path, monkeypatch):
    cfg = load_config(overrides=[*tiny("lbf", "5x5-2p-1f"), "log.checkpoint_every=2", "log.eval_every=2"])
    assert_straight_equals_crash_then_resume(cfg, tmp_path, monkeypatch, 3, 40)


@pytest.mark.slow
@pytest.mark.parametrize("config", ["lbf_8x8_2p_2f_coop", "lbf_10x10_3p_3f"])
def test_the_shipped_configs_train(tmp_path, capsys, config):
    overrides = ["env.num_envs=2", "train.frames_per_batch=100", "train.total_frames=200", "train.minibatch_size=50"]
    overrides += ["log.eval_every=1", "log.eval_episodes=2", "log.checkpoint_every=1", "model.hidden=[16]"]
    assert main(["train", config, *overrides, "train.num_threads=1", f"log.root={tmp_path}", "log.name=run"]) == 0
    out = capsys.readouterr().out
    summary = json.loads(out[out.index("\n{") + 1 :])
    assert summary["frames"] == 200 and np.isfinite(summary["eval/agents/episode_reward"])


def test_a_task_that_does_not_exist_is_refused_in_one_line(tmp_path, capsys):
    assert main(["train", *tiny("lbf", "8x8-2p-3f-cop"), f"log.root={tmp_path / 'runs'}"]) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err, err
    assert "Level-Based Foraging has no task '8x8-2p-3f-cop'; did you mean ['8x8-2p-3f-coop'" in err
    assert "[2s-]<size>x<size>-<players>p-<food>f[-coop]" in err and "8x8-2p-2f-coop, 10x10-3p-3f" in err
    assert not (tmp_path / "runs").exists()


def test_the_missing_extra_is_named(tmp_path, capsys, monkeypatch):
    import marl_ppo.options

    monkeypatch.setattr(marl_ppo.options, "installed", lambda package: package != "lbforaging")
    assert main(["train", *tiny("lbf", "8x8-2p-2f-coop"), f"log.root={tmp_path / 'runs'}"]) == 1
    assert "pip install 'marl-ppo[lbf]'" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()
