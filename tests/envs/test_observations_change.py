"""Image games that see: each copy is built as its game needs to draw its observation, for training, evaluation
and video alike, and a run whose images do not change stops in one line naming the group.

The reference is PettingZoo's own game: built with ``render_mode="rgb_array"`` it draws the screen its pistons and
paddles observe; built without, pistonball and cooperative pong observe one frozen frame (DESIGN.md, trap 23).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from marl_ppo.cli import main
from marl_ppo.config import load_config
from marl_ppo.envs.pettingzoo import make_pettingzoo

pytest.importorskip("pymunk")

# the games of PettingZoo's butterfly family with image observations, and the kwargs that give their images
BUTTERFLY = {
    "pettingzoo.butterfly.pistonball_v6": {"n_pistons": 3},
    "pettingzoo.butterfly.cooperative_pong_v6": {},
    "pettingzoo.butterfly.knights_archers_zombies_v11": {"obs_method": "image"},
}
QUICK = ["log.progress=false", "log.plot=false", "train.num_threads=1", "model.hidden=[16]"]


def _changed_pixels(first: np.ndarray, frames: list[np.ndarray]) -> int:
    return max(int((f != first).any(axis=-1).sum()) for f in frames)


@pytest.mark.parametrize("scenario", list(BUTTERFLY), ids=lambda s: s.rsplit(".", 1)[-1])
def test_a_butterfly_copy_observes_what_the_game_draws_step_for_step(scenario):
    """Our copy's first agent sees, step for step, what PettingZoo's own game sees when it renders (same seed and
    actions); the game built without a render mode (pistonball, cooperative pong) sees one frozen frame."""
    from importlib import import_module

    cfg = load_config(
        "pistonball", [f"env.scenario={scenario}", "env.max_steps=40", "env.image.frames=1", "env.image.size=null"]
    ).env
    cfg.kwargs = dict(BUTTERFLY[scenario])
    cfg.image.grayscale = False
    cfg.continuous_actions = scenario.endswith("pistonball_v6")
    env = make_pettingzoo(cfg, seed=3, num_envs=1)
    game = import_module(scenario).parallel_env(max_cycles=40, render_mode="rgb_array", **BUTTERFLY[scenario])
    blind = import_module(scenario).parallel_env(max_cycles=40, **BUTTERFLY[scenario])
    try:
        group = next(iter(env.group_map))
        td = env.reset()
        # the copy was seeded (a reset with seed 3) when it was built, and env.reset() started its second episode
        game.reset(seed=3)
        blind.reset(seed=3)
        obs, _ = game.reset()
        blind_obs, _ = blind.reset()
        agent = game.agents[0]
        first, blind_first, seen, blind_seen = obs[agent], blind_obs[agent], [], []
        for _ in range(12):
            td = env.rand_action(td)  # the same actions, read back per agent, for PettingZoo's game
            actions = {
                agent: td[g, "action"][0, i].numpy()
                for g, agents in env.group_map.items()
                for i, agent in enumerate(agents)
                if agent in game.agents
            }
            actions = {a: v if cfg.continuous_actions else int(v) for a, v in actions.items()}
            td = env.step(td)["next"]
            obs, *_ = game.step(actions)
            blind_obs, *_ = blind.step(actions)
            if agent not in obs:
                break
            mine = td[group, "observation"][0, 0].numpy()
            np.testing.assert_array_equal(mine, obs[agent])  # step for step, the game's own drawn observation
            seen.append(mine)
            blind_seen.append(blind_obs[agent])
    finally:
        env.close()
        game.close()
        blind.close()
    assert _changed_pixels(first, seen) > 50
    if not scenario.endswith("knights_archers_zombies_v11"):  # it draws its image observation itself
        assert _changed_pixels(blind_first, blind_seen) == 0


def test_a_run_whose_images_do_not_change_stops_in_one_line_naming_the_group(tmp_path, capsys):
    small = [*QUICK, "env.num_envs=2", "train.total_frames=120", "train.frames_per_batch=60"]
    small += ["train.minibatch_size=30", f"log.root={tmp_path}"]
    blind = ["train", "pistonball", "env.kwargs={n_pistons: 3, render_mode: null}", *small]
    assert main(blind) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "FrozenObservation: group 'piston'" in err and "render_mode=rgb_array" in err
    assert "env.image.check_changes=false" in err
    (run,) = tmp_path.iterdir()
    assert "FrozenObservation" in (run / "error.txt").read_text()
    # the stated key lets a run whose images stay still train
    assert main([*blind, "env.image.check_changes=false"]) == 0


def _eval_twice(run, tmp_path, capsys, *extra):
    capsys.readouterr()
    assert main(["eval", str(run), "--episodes", "2", *extra]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert main(["eval", str(run), "--episodes", "2", "--video", str(tmp_path / "v.gif"), *extra]) == 0
    drawn = json.loads(capsys.readouterr().out)
    assert (tmp_path / "v.gif").stat().st_size > 0
    return plain, drawn


@pytest.mark.parametrize(
    "config, overrides",
    [
        ("pistonball", ["env.kwargs={n_pistons: 3}", "env.max_steps=30", "train.frames_per_batch=60"]),
        ("battle_vs_random", ["env.max_steps=20", "train.frames_per_batch=80", "model.hidden=[16]"]),
    ],
    ids=["pistonball", "magent2-battle"],
)
def test_eval_and_eval_with_video_give_the_same_returns(config, overrides, tmp_path, capsys):
    """The video's envs are built as the training and evaluation ones are (a pistonball built to draw only for the
    video would let its pistons see there alone, and return other figures than ``eval``)."""
    if config == "battle_vs_random":
        pytest.importorskip("magent2")
    small = [*QUICK, "env.num_envs=2", "train.minibatch_size=30", f"log.root={tmp_path / 'runs'}"]
    assert main(["train", config, *small, *overrides, "train.total_frames=120"]) == 0
    (run,) = (tmp_path / "runs").iterdir()
    plain, drawn = _eval_twice(run, tmp_path, capsys, "--sample")
    assert plain["episode_reward"] == drawn["episode_reward"]
    assert plain["episodes"] == drawn["episodes"] == 2
