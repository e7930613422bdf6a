"""OpenSpiel games (``env.kind=openspiel``): Hanabi and any other pyspiel game, copies stepped in one loop.

* Hanabi-Small and the full two-player game, over episodes and resets, equal a pyspiel state played with
  the same moves and the same chance outcomes step for step: each player's observation tensor, the legal
  moves of the player to act, whose turn it is, each step's change of the returns, the returns summed over
  an episode, the end of the game;
* a simultaneous-move game (goofspiel) takes every player's move at once; ``all_in_one_group`` puts the
  players in one group; an illegal move is refused naming the copy, the player and the legal moves;
* torchrl's ``OpenSpielWrapper`` writes the returns so far as each step's reward (why the adapter is ours);
* a run resumes exactly after a crash; the shipped configs train through ``marl-ppo train``;
* a game or a parameter that does not exist and the missing extra are refused in one line before a run
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

pyspiel = pytest.importorskip("pyspiel")

SMALL = {"players": 2, "colors": 2, "ranks": 5, "hand_size": 2, "max_information_tokens": 3, "max_life_tokens": 1}
TINY = [
    "env.num_envs=4", "train.frames_per_batch=80", "train.total_frames=240", "train.minibatch_size=40",
    "train.num_epochs=2", "train.num_threads=1", "model.hidden=[16]", "log.eval_episodes=2",
    "log.progress=false", "log.plot=false",
]  # fmt: skip


def games(scenario: str, kwargs: dict, num_envs: int = 2, seed: int = 0):
    return make_env(
        EnvConfig(kind="openspiel", scenario=scenario, num_envs=num_envs, max_steps=200, kwargs=kwargs), seed=seed
    )


def copy_seeds(seed: int, n: int) -> list[int]:
    """The seeds of ``n`` copies: torchrl's chain from ``seed`` (``SerialEnv.set_seed``)."""
    from torchrl._utils import seed_generator

    out = []
    for _ in range(n):
        out.append(seed % 2**31)
        seed = seed_generator(seed)
    return out


@pytest.mark.parametrize("kwargs, steps", [(SMALL, 300), ({"players": 2}, 200)])
def test_each_step_equals_a_pyspiel_state_with_the_same_chance(kwargs, steps):
    game = pyspiel.load_game("hanabi", kwargs)
    env = games("hanabi", kwargs, num_envs=2, seed=3)
    rngs = [np.random.default_rng(s) for s in copy_seeds(3, 2)]
    states = [game.new_initial_state() for _ in rngs]
    mover = np.random.default_rng(0)

    def deal(i):
        while states[i].is_chance_node():
            outcomes, p = zip(*states[i].chance_outcomes())
            states[i].apply_action(int(rngs[i].choice(outcomes, p=p)))

    def check(td, i, reward=None):
        state = states[i]
        for p, group in enumerate(("player_0", "player_1")):
            assert td[group, "observation"][i, 0].tolist() == pytest.approx(state.observation_tensor(p))
            acting = not state.is_terminal() and state.current_player() == p
            assert bool(td[group, "mask"][i, 0]) == acting
            legal = td[group, "action_mask"][i, 0].nonzero().flatten().tolist()
            assert legal == (state.legal_actions(p) if acting else list(range(game.num_distinct_actions())))
            if reward is not None:
                assert float(td[group, "reward"][i, 0]) == reward[p]
                assert bool(td[group, "done"][i, 0]) == bool(td[group, "terminated"][i, 0]) == state.is_terminal()
                assert not bool(td[group, "truncated"][i, 0])

    for i in range(2):
        deal(i)
    td = env.reset()
    for i in range(2):
        check(td, i)
    returns, ends, scores = np.zeros((2, 2)), 0, []
    for _ in range(steps):
        moves = [int(mover.choice(s.legal_actions())) for s in states]
        for group in ("player_0", "player_1"):
            td[group, "action"] = torch.tensor(moves)[:, None]
        td, next_td = env.step_and_maybe_reset(td)
        for i, state in enumerate(states):
            before = np.array(state.returns())
            state.apply_action(moves[i])
            deal(i)
            check(td["next"], i, reward=np.array(state.returns()) - before)
            returns[i] += td["next", "player_0", "reward"][i, 0, 0].item()
            if state.is_terminal():
                assert returns[i] == pytest.approx(state.returns()[0])
                assert td["next", "player_0", "episode_reward"][i, 0, 0].item() == pytest.approx(state.returns()[0])
                scores.append(returns[i])
                returns[i], ends = 0.0, ends + 1
                states[i] = game.new_initial_state()
                deal(i)
                check(next_td, i)
        td = next_td
    assert ends >= 4 and bool(td["done"].any()) is False


def test_torchrls_wrapper_writes_the_returns_so_far_as_each_steps_reward():
    from torchrl.envs.libs.openspiel import OpenSpielWrapper
    from torchrl.envs.utils import MarlGroupMapType

    state = pyspiel.load_game("hanabi", SMALL).new_initial_state()
    theirs = OpenSpielWrapper(state, group_map=MarlGroupMapType.ONE_GROUP_PER_AGENT, categorical_actions=True)
    theirs.set_seed(0)
    td, rewards, returns = theirs.reset(), [], []
    while not theirs._env.is_terminal():
        move = torch.tensor([theirs._env.legal_actions()[-1]])  # the last legal move: a play, scoring early
        td["player_0", "action"] = td["player_1", "action"] = move
        td = theirs.step(td)["next"]
        rewards.append(float(td["player_0", "reward"]))
        returns.append(theirs._env.returns()[0])
    assert rewards == returns and any(r > 0 for r in rewards)  # so their sum counts the score once per step


def test_a_simultaneous_game_takes_every_players_move_at_once():
    env = games("goofspiel", {"num_cards": 4, "imp_info": True}, num_envs=2)
    moves = np.random.default_rng(0)
    td, total, ends = env.reset(), np.zeros((2, 2)), 0
    for _ in range(12):
        assert td["player_0", "mask"].all() and td["player_1", "mask"].all()  # both act at every step
        for g in ("player_0", "player_1"):
            legal = [m.nonzero().flatten().tolist() for m in td[g, "action_mask"][:, 0]]
            td[g, "action"] = torch.tensor([[int(moves.choice(m))] for m in legal])
        td, next_td = env.step_and_maybe_reset(td)
        total += torch.cat([td["next", g, "reward"][:, 0] for g in ("player_0", "player_1")], 1).numpy()
        ends += int(td["next", "done"].sum())
        td = next_td
    assert ends == 8 and np.allclose(total.sum(1), 0)  # games of 3 moves (the 4th card plays itself); zero-sum


def test_all_in_one_group_and_an_illegal_move():
    env = games("hanabi", {**SMALL, "group_map": "all_in_one_group"}, num_envs=2)
    assert read_group_specs(env)["agents"].agents == ("player_0", "player_1")
    td = env.reset()
    acting = td["agents", "mask"].float().argmax(-1)
    illegal = (~td["agents", "action_mask"]).float().argmax(-1)
    assert not td["agents", "action_mask"].all(-1)[torch.arange(2), acting].any()
    td["agents", "action"] = illegal
    with pytest.raises(ValueError, match=r"copy 0: player_\d played \d+, not a legal move of \["):
        env.step(td)


@pytest.mark.slow
def test_an_openspiel_run_resumes_exactly(tmp_path, monkeypatch):
    cfg = load_config("hanabi_small", overrides=[*TINY, "log.checkpoint_every=2", "log.eval_every=2"])
    assert_straight_equals_crash_then_resume(cfg, tmp_path, monkeypatch, 3, 80)


@pytest.mark.slow
@pytest.mark.parametrize("config", ["hanabi_small", "hanabi_2p"])
def test_each_shipped_config_trains(tmp_path, capsys, config):
    assert main(["train", config, *TINY, f"log.root={tmp_path}", "log.name=run"]) == 0
    out = capsys.readouterr().out
    summary = json.loads(out[out.index("\n{") + 1 :])
    assert summary["frames"] == 240 and "eval/player_0/episode_reward" in summary


@pytest.mark.parametrize(
    "overrides, words",
    [
        (["env.scenario=hanabbi"], ["unknown OpenSpiel game 'hanabbi'", "did you mean ['hanabi'", "tiny_hanabi"]),
        (["env.kwargs.colours=2"], ["env.kwargs for OpenSpiel game 'hanabi'", "Unknown parameter 'colours'", "colors"]),
        (["env.scenario=mfg_crowd_modelling", "env.kwargs={}"], ["'mfg_crowd_modelling' is a mean-field game"]),
        (["env.kwargs.group_map=pairs"], ["env.kwargs.group_map must be one of"]),
    ],
)
def test_a_game_or_parameter_that_does_not_exist_is_refused_in_one_line(tmp_path, capsys, overrides, words):
    assert main(["train", "hanabi_small", *TINY, *overrides, f"log.root={tmp_path / 'runs'}"]) == 1
    err = capsys.readouterr().err
    assert all(w in err for w in words), err
    assert len([line for line in err.splitlines() if "OpenSpiel" in line or "env.kwargs" in line]) == 1, err
    assert not (tmp_path / "runs").exists()


def test_the_missing_extra_is_named(tmp_path, capsys, monkeypatch):
    import marl_ppo.options

    monkeypatch.setattr(marl_ppo.options, "installed", lambda package: package != "pyspiel")
    assert main(["train", "hanabi_small", *TINY, f"log.root={tmp_path / 'runs'}"]) == 1
    err = capsys.readouterr().err
    assert "env.kind: openspiel needs the 'pyspiel' package" in err and "pip install 'marl-ppo[openspiel]'" in err
    assert not (tmp_path / "runs").exists()
