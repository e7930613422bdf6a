"""Videos of PettingZoo games: the evaluation's envs draw the games' own frames, wherever the copies run.

Each game is built with ``render_mode="rgb_array"`` for an evaluation that records (the env kind's
``render_kwargs``), and ``render(env_index=i)`` draws copy ``i``: in ``ParallelGames`` (MPE),
``AecGames`` (tic-tac-toe) and the adapter's ``SerialEnv`` (pistonball, whose copies resize their
frames); MaMuJoCo's robots in ``ParallelGames``, drawn by MuJoCo offscreen. Drawing changes nothing
the policy sees: the returns are the same with and without video.
"""

from __future__ import annotations

import json
import os
from ctypes.util import find_library

import numpy as np
import pytest

from marl_ppo.cli import main
from marl_ppo.config import load_config
from marl_ppo.envs.aec_games import AecGames
from marl_ppo.envs.game_copies import render_game
from marl_ppo.envs.parallel_games import ParallelGames
from marl_ppo.envs.serial import SerialEnvKeepingThreads
from marl_ppo.run.build import build
from marl_ppo.run.evaluation import Evaluator
from marl_ppo.run.video import FrameRecorder

QUICK = ["model.hidden=[16]", "log.eval_episodes=1", "log.progress=false", "log.plot=false"]


def _record(cfg):
    parts = build(cfg)
    groups = list(parts.groups)
    plain = Evaluator(cfg, parts.policy, groups, episodes=1)
    drawn = Evaluator(cfg, parts.policy, groups, episodes=1, video=True)
    recorder = FrameRecorder()
    try:
        expected, got = plain(), drawn(callback=recorder)
        stepper = drawn.env.base_env
    finally:
        plain.close()
        drawn.close()
        parts.env.close()
    assert got.returns == expected.returns and got.episodes == expected.episodes == 1
    return recorder.frames, stepper


@pytest.mark.parametrize(
    "config, overrides, stepper",
    [
        ("simple_spread", ["env.max_steps=6"], ParallelGames),
        ("tictactoe", [], AecGames),
        (
            "pistonball",
            ["env.max_steps=5", "env.kwargs={n_pistons: 3}", "env.image.size=[32, 8]", "env.image.frames=1"],
            SerialEnvKeepingThreads,
        ),
        (
            "halfcheetah_2x3_mappo",
            ["env.max_steps=4", "env.num_envs=1", "env.kwargs={agent_conf: 2x3, width: 64, height: 48}"],
            ParallelGames,
        ),
    ],
    ids=["mpe-parallel-games", "tictactoe-aec-games", "pistonball-serial-env", "mamujoco-parallel-games"],
)
def test_an_evaluation_records_the_games_frames_and_plays_the_same(config, overrides, stepper):
    """(MaMuJoCo draws offscreen through OpenGL: EGL, as ``MUJOCO_GL`` defaults to.)"""
    pytest.importorskip({"pistonball": "pymunk", "halfcheetah_2x3_mappo": "gymnasium_robotics"}.get(config, "numpy"))
    if config == "halfcheetah_2x3_mappo" and not os.environ.get("MUJOCO_GL") and find_library("EGL") is None:
        pytest.skip("no libEGL to draw MuJoCo's frames with (and no MUJOCO_GL set)")
    frames, used = _record(load_config(config, [*QUICK, *overrides]))
    assert isinstance(used, stepper)
    assert len(frames) >= 2 and all(f.dtype == np.uint8 and f.ndim == 3 and f.shape[-1] == 3 for f in frames)
    if config == "halfcheetah_2x3_mappo":
        assert frames[0].shape == (48, 64, 3)  # the size env.kwargs asked for
    assert any(not np.array_equal(frames[0], f) for f in frames[1:])  # the game moved on


def test_a_copy_that_plays_several_episodes_is_recorded_for_its_first():
    # one copy, three evaluation episodes of 6 steps: the GIF is the first (its reset and 5 steps'
    # frames; torchrl draws none after an episode's last step), not 17 frames over three episodes
    cfg = load_config("simple_spread", [*QUICK, "env.max_steps=6", "env.num_envs=1"])
    parts = build(cfg)
    evaluator = Evaluator(cfg, parts.policy, list(parts.groups), episodes=3, video=True)
    recorder = FrameRecorder()
    try:
        result = evaluator(callback=recorder)
    finally:
        evaluator.close()
        parts.env.close()
    assert result.episodes == 3 and recorder.ended
    assert len(recorder.frames) == 6


def test_eval_video_writes_a_gif_of_a_pettingzoo_run(tmp_path, capsys):
    from PIL import Image

    argv = ["train", "tictactoe", "train.frames_per_batch=64", "train.total_frames=64", "train.minibatch_size=32"]
    assert main([*argv, "env.num_envs=4", "log.eval_every=0", *QUICK, f"log.root={tmp_path}", "log.name=t"]) == 0
    capsys.readouterr()
    gif = tmp_path / "game.gif"
    assert main(["eval", str(tmp_path / "t"), "--episodes", "1", "--video", str(gif)]) == 0
    assert str(gif) in capsys.readouterr().out
    with Image.open(gif) as image:
        assert image.n_frames > 1
    # against an opponent: the first match's first episode (the trained policy against random, first seat)
    match = tmp_path / "match.gif"
    argv = ["eval", str(tmp_path / "t"), "--episodes", "2", "--opponent", "random", "--video", str(match)]
    assert main(argv) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["video"] == {"file": str(match), "opponent": "random", "seat": "player_1"}
    assert [m["opponent"] for m in result["matches"]] == ["random", "random"]  # both seats played, one video
    with Image.open(match) as image:
        assert image.n_frames > 1


def test_a_game_built_without_a_render_mode_is_named_in_the_error():
    from pettingzoo.classic import tictactoe_v3

    game = tictactoe_v3.env()
    game.reset(seed=0)
    with pytest.raises(ValueError, match="drew no frame: its render_mode is None, not 'rgb_array'"):
        render_game(game)


def test_a_video_of_a_game_that_cannot_draw_fails_before_the_run_directory(tmp_path):
    from marl_ppo.run.trainer import Trainer

    overrides = [*QUICK, "env.scenario=tests.run.drawless_game", "env.kwargs={N: 2}", "log.video=true"]
    cfg = load_config("simple_spread", overrides)
    with pytest.raises(ValueError, match="cannot draw frames.*render_mode"):
        Trainer(cfg, run_dir=tmp_path / "run")
    assert not (tmp_path / "run").exists()
    Trainer(load_config("simple_spread", [*overrides[:-1]]), run_dir=tmp_path / "plain").close()
