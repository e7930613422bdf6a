"""Image observations in the PettingZoo adapter: kept, resized, grayed, stacked (``env.image``), MAgent2 and butterfly.

* known answers of :class:`ImageObservation` on hand-made frames: the luma of one RGB pixel, a
  resize that keeps the image's top and bottom where they were, ``uint8`` kept;
* frame stacking on a real MAgent2 battle: after a reset every frame is the first one, after a
  step the stack moves by one frame, and a reset inside a batched env starts it over;
* a real pistonball and cooperative pong copy store ``uint8`` frames of the asked size and channels;
* bad input refused in one line before a run directory exists (grayscale of a 5-channel view,
  ``env.image`` on another env kind, a size that is not two positive integers);
* MAgent2 battle trains against a random army with a CNN, and its trained red policy also plays
  the blue seat (``Reseated``: a trunk policy moved to a group of the same specs); with stacked
  views it resumes exactly.
"""

from __future__ import annotations

import math

import pytest
import torch

from marl_ppo.cli import main
from marl_ppo.config import ConfigError, load_config
from marl_ppo.envs.images import ImageObservation
from marl_ppo.envs.options import EnvConfig, ImageOptions
from marl_ppo.envs.pettingzoo import make_pettingzoo
from marl_ppo.groups import GroupSpecError
from marl_ppo.run.trainer import Trainer
from tests.run.test_recovery import crash_after_logging
from tests.same_run import assert_same_run

pytest.importorskip("magent2")
pytest.importorskip("pymunk")

BATTLE = "magent2.environments.battle_v4"
PISTONBALL = "pettingzoo.butterfly.pistonball_v6"
QUICK = [
    "train.total_frames=200",
    "train.frames_per_batch=200",
    "train.minibatch_size=100",
    "train.num_epochs=1",
    "train.num_threads=1",
    "model.hidden=[16]",
    "log.eval_episodes=2",
    "log.progress=false",
    "log.plot=false",
]


def test_grayscale_is_the_luma_of_each_pixel():
    frame = torch.tensor([100, 50, 200], dtype=torch.uint8).expand(1, 2, 2, 3)  # one agent, 2 x 2, one colour
    out = ImageObservation(["g"], size=None, grayscale=True)._apply_transform(frame)
    # 0.299 * 100 + 0.587 * 50 + 0.114 * 200 = 82.05
    assert out.dtype == torch.uint8 and out.shape == (1, 2, 2, 1)
    assert out.flatten().tolist() == [82] * 4


def test_resize_keeps_rows_as_rows_and_uint8_as_uint8():
    frame = torch.zeros(2, 8, 4, 3, dtype=torch.uint8)  # 2 agents, 8 rows x 4 columns
    frame[:, 4:] = 255  # the bottom half white
    out = ImageObservation(["g"], size=[4, 2], grayscale=False)._apply_transform(frame)
    assert out.dtype == torch.uint8 and out.shape == (2, 4, 2, 3)
    assert (out[:, 0] == 0).all() and (out[:, -1] == 255).all()  # top row black, bottom row white
    floats = ImageObservation(["g"], size=[4, 2], grayscale=False)._apply_transform(frame.float())
    assert floats.dtype == torch.float32
    torch.testing.assert_close(floats, out.float(), atol=0.5, rtol=0)  # the uint8 kernel rounds


def _battle(image: ImageOptions, num_envs: int = 2, max_steps: int = 6) -> object:
    cfg = EnvConfig(
        kind="pettingzoo",
        scenario=BATTLE,
        num_envs=num_envs,
        max_steps=max_steps,
        continuous_actions=False,
        kwargs={"map_size": 12},
        image=image,
    )
    return make_pettingzoo(cfg, seed=0, num_envs=num_envs)


def test_magent2_view_is_flattened_by_default_and_kept_as_an_image_when_asked():
    flat = _battle(ImageOptions())
    assert flat.observation_spec["red", "observation"].shape == (2, 2, 13 * 13 * 5)
    kept = _battle(ImageOptions(observation="image"))
    spec = kept.observation_spec["red", "observation"]
    assert spec.shape == (2, 2, 13, 13, 5) and spec.dtype == torch.float32


def test_stacked_frames_move_by_one_each_step_and_start_over_after_a_reset():
    env = _battle(ImageOptions(observation="image", frames=3), max_steps=4)
    td = env.rollout(7, break_when_any_done=False)
    obs = td["red", "observation"]  # [copies, time, agents, 13, 13, 3 frames x 5 channels]
    assert obs.shape == (2, 7, 2, 13, 13, 15)
    frame = [obs[..., 5 * k : 5 * (k + 1)] for k in range(3)]  # oldest first
    first = frame[2][:, 0]
    assert torch.equal(frame[0][:, 0], first) and torch.equal(frame[1][:, 0], first)  # the reset's frame, thrice
    for t in range(3):  # within an episode: yesterday's newer frames are today's older ones
        assert torch.equal(obs[:, t + 1, ..., :10], obs[:, t, ..., 5:])
    assert td["next", "done"][:, 3].all()  # the episodes end at step 4: step 4 is a reset
    assert torch.equal(frame[0][:, 4], frame[2][:, 4]) and torch.equal(frame[1][:, 4], frame[2][:, 4])
    assert not torch.equal(frame[0][:, 4], frame[2][:, 3])  # and not the last episode's frames


@pytest.mark.parametrize(
    "scenario, kwargs, image, shape",
    [
        (PISTONBALL, {"n_pistons": 3}, ImageOptions(size=[32, 8], grayscale=True, frames=2), (3, 32, 8, 2)),
        # cooperative pong draws its frame only with a render mode: without one every observation is black
        (
            "pettingzoo.butterfly.cooperative_pong_v6",
            {"render_mode": "rgb_array"},
            ImageOptions(size=[35, 60]),
            (2, 35, 60, 3),
        ),
    ],
    ids=["pistonball", "cooperative_pong"],
)
def test_butterfly_frames_are_stored_uint8_at_the_asked_size(scenario, kwargs, image, shape):
    cfg = EnvConfig(kind="pettingzoo", scenario=scenario, num_envs=2, max_steps=5, kwargs=kwargs, image=image)
    env = make_pettingzoo(cfg, seed=0, num_envs=2)
    (group,) = {g for g, _ in env.observation_spec.keys(True, True)}
    td = env.rollout(3, break_when_any_done=False)
    obs = td[group, "observation"]
    assert obs.dtype == torch.uint8 and obs.shape == (2, 3, *shape)
    assert obs.float().std() > 0  # a picture, not a blank


@pytest.mark.parametrize(
    "overrides, error, expected",
    [
        (
            [
                f"env.scenario={BATTLE}",
                "env.kwargs={map_size: 12}",
                "env.image.observation=image",
                "env.image.grayscale=true",
            ],
            GroupSpecError,
            "env.image.grayscale=true: group 'red''s image has 5 channels, not 3 (RGB)",
        ),
        (
            ["env.kind=vmas", "env.scenario=navigation", "env.image.frames=2"],
            ConfigError,
            "env.image is read by env.kind=pettingzoo",
        ),
        ([f"env.scenario={PISTONBALL}", "env.image.size=[64]"], ConfigError, "env.image.size must be [height, width]"),
        ([f"env.scenario={PISTONBALL}", "env.image.observation=pixels"], ConfigError, "env.image.observation"),
    ],
    ids=["grayscale-of-5-channels", "image-on-vmas", "one-side", "unknown-choice"],
)
def test_bad_image_options_are_refused_before_a_run_directory(tmp_path, overrides, error, expected):
    with pytest.raises(error) as info:
        cfg = load_config(overrides=["env.kind=pettingzoo", "env.continuous_actions=false", *overrides])
        Trainer(cfg, run_dir=tmp_path / "run")
    assert expected in str(info.value)
    assert not (tmp_path / "run").exists()


def test_battle_trains_a_cnn_against_random_and_its_policy_plays_either_army(tmp_path, capsys):
    argv = ["train", "battle_vs_random", "env.kwargs={map_size: 12}", "env.num_envs=2", *QUICK]
    assert main([*argv, f"log.root={tmp_path}", "log.name=battle"]) == 0
    summary = capsys.readouterr().out
    assert '"eval/vs_random/blue/episodes": 2.0' in summary  # red's CNN policy in blue's seat
    run = tmp_path / "battle"
    assert main(["eval", str(run), "--opponent", "random", "--seat", "blue", "--episodes", "2"]) == 0
    assert "against random: blue: 2 episodes, win" in capsys.readouterr().err
    cfg = load_config(run / "config.yaml")
    assert cfg.model.kind == "cnn" and cfg.env.image.observation == "image"
    trainer = Trainer(cfg, run_dir=tmp_path / "again")
    batch = trainer.parts.groups["red"]
    assert batch.observation_shape == (2, 13, 13, 5)
    assert math.isfinite(trainer.fit()["eval/red/episode_reward"])


def test_a_battle_run_with_stacked_views_resumes_exactly(tmp_path, monkeypatch):
    """Two batches straight, and a run that dies after logging its second batch then resumes from the
    first one's checkpoint: the same parameters and logged metrics (a CNN, a random army drawing from the
    checkpointed RNG, views stacked afresh at each episode's start after the reseed)."""
    tiny = ["env.kwargs={map_size: 12}", "env.num_envs=2", "env.max_steps=5", "env.image.frames=2", *QUICK]
    tiny += ["train.frames_per_batch=20", "train.total_frames=40", "train.minibatch_size=10", "log.eval_every=1"]
    tiny += ["log.checkpoint_every=1"]
    cfg = load_config("battle_vs_random", tiny)
    straight = Trainer(cfg, run_dir=tmp_path / "straight")
    straight.fit()
    crash_after_logging(monkeypatch, 2, frames_per_batch=20)
    with pytest.raises(RuntimeError, match="simulated crash"):
        Trainer(cfg, run_dir=tmp_path / "run").fit()
    monkeypatch.undo()
    resumed = Trainer(cfg, run_dir=tmp_path / "run", resume=True)
    assert resumed.iteration == 1
    resumed.fit()
    assert_same_run(straight, resumed, tmp_path / "straight", tmp_path / "run")
