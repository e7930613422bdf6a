"""Opponents on the real PettingZoo games: frozen groups, self-play, scripted players, outcomes."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from pettingzoo.classic import tictactoe_v3
from tensordict.nn import TensorDictSequential

from marl_ppo.config import load_config
from marl_ppo.core.aggregate import total_loss, unique_parameters
from marl_ppo.opponents import OpponentError, ScriptedPlayer, count_outcomes
from marl_ppo.run.build import build, build_opponent, load_policy
from marl_ppo.run.evaluation import evaluate
from marl_ppo.run.trainer import Trainer
from tests.opponents import players

TTT = [
    "env.num_envs=2",
    "train.frames_per_batch=40",
    "train.total_frames=80",
    "train.num_epochs=1",
    "train.minibatch_size=20",
    "model.hidden=[16]",
    "log.eval_episodes=2",
    "log.checkpoint_every=1",
    "log.progress=false",
    "log.plot=false",
]


def ttt(*overrides):
    return load_config("tictactoe_two_groups", overrides=[*TTT, *overrides])


def _rollout(parts, steps=12):
    with torch.no_grad():
        return parts.reward_table(parts.env.rollout(steps, parts.policy, break_when_any_done=False))


def test_a_frozen_opponent_has_no_gradient_and_never_changes(tmp_path):
    Trainer(ttt(), run_dir=tmp_path / "a").fit()
    trainer = Trainer(ttt("opponents.player_2=checkpoint:" + str(tmp_path / "a")), run_dir=tmp_path / "b")
    opponent = trainer.parts.opponents["player_2"]
    before = {k: v.clone() for k, v in opponent.state_dict().items()}
    assert before and all(not p.requires_grad for p in opponent.parameters())
    trained = {id(p) for group in trainer.state.step.optimizer.param_groups for p in group["params"]}
    assert not trained & {id(p) for p in opponent.parameters()}
    assert list(trainer.parts.router.groups) == ["player_1"]
    trainer.fit()
    after = opponent.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    # the opponent's policy is the other run's player_2, bit for bit
    _, other = load_policy(tmp_path / "a")
    theirs = other.router.losses["player_2"].actor_network.state_dict()
    assert [torch.equal(a, b) for a, b in zip(theirs.values(), after.values())] == [True] * len(theirs)
    other.env.close()


def test_an_opponents_steps_carry_no_weight_in_any_loss():
    parts = build(ttt("opponents.player_2=random"))
    batch = _rollout(parts)
    parts.router.compute_advantages(batch)
    assert batch["player_2", "mask"].any() and batch["player_1", "mask"].any()
    losses = parts.router(batch)
    assert list(losses.keys()) == ["player_1"]
    # every entry the opponent wrote or saw, scrambled: the losses do not move
    scrambled = batch.clone()
    for root in (("player_2",), ("next", "player_2")):
        for key, value in batch[root].items(include_nested=True, leaves_only=True):
            key = root + ((key,) if isinstance(key, str) else key)
            scrambled[key] = _scramble(value)
    again = parts.router(scrambled)
    for key in losses["player_1"].keys():
        assert torch.equal(losses["player_1", key], again["player_1", key]), key
    parts.env.close()


def _scramble(value):
    if value.dtype == torch.bool:
        return ~value
    if not value.is_floating_point():
        return torch.randint_like(value, 0, 9)
    return value * 7 - 3


BATTLE = [
    "env.kind=pettingzoo",
    "env.scenario=magent2.environments.battle_v4",
    "env.continuous_actions=false",
    "env.num_envs=2",
    "env.max_steps=8",
    "env.kwargs={map_size: 12}",
    "env.image.observation=image",
    "model.kind=cnn",
    "model.hidden=[16]",
    "model.options={cnn: {channels: [4], kernels: [3], strides: [2], paddings: [0]}}",
]
# (config, overrides, the seat that plays with the other's networks, that other): every model kind
# shares through the same tie (models/modules.py:share_networks), recurrent states on each seat's keys
SHARED_KINDS = {
    "mlp": ("tictactoe_two_groups", TTT, "player_2", "player_1"),
    "gru": ("tictactoe_two_groups", [*TTT, "model.kind=gru", "model.rnn_hidden=8"], "player_2", "player_1"),
    "cnn": (None, BATTLE, "blue", "red"),
    "cnn-gru": (None, [*BATTLE, "model.kind=[cnn, gru]", "model.rnn_hidden=8"], "blue", "red"),
}


@pytest.mark.parametrize("kind", list(SHARED_KINDS))
def test_self_play_is_one_set_of_parameters_trained_by_both_seats(kind):
    """Known answer on a fixed batch: the shared networks' gradient is the sum of the gradients that two
    separate copies of them get from each seat's own loss."""
    config, overrides, seat, source = SHARED_KINDS[kind]
    if config is None:
        pytest.importorskip("magent2")
    shared = build(load_config(config, overrides=[*overrides, f"opponents.{seat}=self"]))
    router = shared.router
    for part in ("actor_network", "critic_network"):
        mine, theirs = (list(getattr(router.losses[g], part).parameters()) for g in (seat, source))
        assert mine and [id(p) for p in mine] == [id(p) for p in theirs], part
    assert len(unique_parameters(router)) == len(unique_parameters(router.losses[source]))
    batch = _rollout(shared, steps=16)
    assert batch[source, "mask"].any() and batch[seat, "mask"].any()
    router.compute_advantages(batch)
    total_loss(router(batch)).backward()
    grads = [p.grad.clone() for p in unique_parameters(router)]

    separate = build(load_config(config, overrides=overrides))
    assert list(separate.router.groups) == list(router.groups)  # two groups, two networks, each a copy
    for g in (seat, source):
        separate.router.losses[g].load_state_dict(router.losses[source].state_dict())
    separate.router.compute_advantages(batch)  # the same values: the same critic weights
    total_loss(separate.router(batch)).backward()
    summed = [
        a.grad + b.grad
        for a, b in zip(
            unique_parameters(separate.router.losses[source]), unique_parameters(separate.router.losses[seat])
        )
    ]
    assert len(summed) == len(grads)
    for a, b in zip(grads, summed):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)
    shared.env.close()
    separate.env.close()


def test_a_scripted_player_gets_the_raw_pettingzoo_observation_and_mask():
    players.SEEN.clear()
    parts = build(ttt("env.num_envs=1", "opponents.player_2=tests.opponents.players:first_legal_recorded"))
    td = _rollout(parts, steps=30)
    assert players.SEEN, "the scripted player was never asked"
    # replay the same moves in PettingZoo's own game and compare what player_2 was shown at its turns
    game = tictactoe_v3.env()
    game.reset(seed=0)
    expected = []
    for t in range(td.shape[-1]):
        agent = game.agent_selection
        if game.terminations[agent] or game.truncations[agent]:
            game.reset(seed=0)
            agent = game.agent_selection
        raw = game.observe(agent)
        if agent == "player_2":
            expected.append((raw["observation"], raw["action_mask"].astype(bool)))
        game.step(int(td[0, t][agent, "action"].item()) if agent in ("player_1", "player_2") else None)
    assert len(players.SEEN) == len(expected) >= 4
    for (obs, mask), (want_obs, want_mask) in zip(players.SEEN, expected):
        assert obs.shape == (3, 3, 2) and obs.dtype == np.int8
        assert mask.dtype == bool and mask.shape == (9,)
        np.testing.assert_array_equal(obs, want_obs)
        np.testing.assert_array_equal(mask, want_mask)
    parts.env.close()


def test_an_illegal_scripted_action_names_the_opponent_the_env_and_the_action():
    parts = build(ttt("opponents.player_2=tests.opponents.players:occupied"))
    with pytest.raises(OpponentError) as err:
        _rollout(parts)
    message = str(err.value)
    for word in ("opponents.player_2", "tests.opponents.players:occupied", "tictactoe_v3", "not legal", "copy"):
        assert word in message, message
    parts.env.close()


def test_wins_draws_and_losses_are_the_games_own_rewards():
    """First legal square against first legal square: player_1 takes 0, 2, 4, 6 and wins on the diagonal."""
    cfg = ttt()
    parts = build(cfg)
    seats = [
        build_opponent(cfg, "test", _callable("tests.opponents.players:first_legal"), parts.groups[g])
        for g in ("player_1", "player_2")
    ]
    result = evaluate(TensorDictSequential(*seats), parts.env, 30, list(parts.groups), episodes=6)
    assert result.per_episode == {"player_1": [1.0] * 6, "player_2": [-1.0] * 6}
    first, second = count_outcomes(result.per_episode, "player_1"), count_outcomes(result.per_episode, "player_2")
    assert (first.wins, first.draws, first.losses) == (6, 0, 0)
    assert (second.wins, second.draws, second.losses) == (0, 0, 6)
    parts.env.close()


def _callable(path):
    from marl_ppo.opponents import parse_source

    return parse_source("test", path)


def test_a_scripted_player_is_only_asked_on_its_turns():
    players.SEEN.clear()
    parts = build(ttt("env.num_envs=1", "opponents.player_2=tests.opponents.players:first_legal_recorded"))
    td = _rollout(parts, steps=20)
    assert len(players.SEEN) == int(td["player_2", "mask"].sum())
    assert isinstance(parts.opponents["player_2"], ScriptedPlayer)
    parts.env.close()


def test_a_checkpoint_of_other_specs_is_refused_before_a_run_directory_exists(tmp_path, tiny_config, capsys):
    from marl_ppo.cli import main

    Trainer(tiny_config(), run_dir=tmp_path / "navigation").fit()
    args = ["train", "tictactoe_two_groups", *TTT, f"log.root={tmp_path / 'runs'}"]
    assert main([*args, f"opponents.player_2=checkpoint:{tmp_path / 'navigation'}:agents"]) == 1
    err = capsys.readouterr().err
    for word in (
        "ConfigError",
        "opponents.player_2",
        "group 'agents'",
        "cannot play this run's seat 'player_2'",
        "!= 2 (group 'agents')",
    ):
        assert word in err, err
    assert main([*args, f"opponents.player_2=checkpoint:{tmp_path / 'navigation'}"]) == 1
    assert "trained no group 'player_2'; it trained ['agents']" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    "overrides, expected",
    [
        (
            ["model.groups={player_2: {hidden: [8]}}", "opponents.player_2=self"],
            "model.groups.player_2 gives it a model of its own; set the model of 'player_1' instead",
        ),
        (["loss.value_norm=running", "opponents.player_2=self"], "keeps statistics per group, not per shared critic"),
    ],
)
def test_a_seat_that_cannot_share_is_refused_before_a_run_directory_exists(tmp_path, capsys, overrides, expected):
    from marl_ppo.cli import main

    assert main(["train", "tictactoe_two_groups", *TTT, *overrides, f"log.root={tmp_path / 'runs'}"]) == 1
    err = capsys.readouterr().err
    assert expected in err and err.count("\n") == 1, err
    assert not (tmp_path / "runs").exists()


def test_eval_against_an_opponent_reports_each_seat(tmp_path, capsys):
    import json

    from marl_ppo.cli import main

    Trainer(ttt("log.eval_opponents=[random]"), run_dir=tmp_path / "run").fit()
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    for seat in ("player_1", "player_2"):  # the trained policy in each seat against a random player
        rates = [summary[f"eval/vs_random/{seat}/{r}_rate"] for r in ("win", "draw", "loss")]
        assert sum(rates) == pytest.approx(1.0) and summary[f"eval/vs_random/{seat}/episodes"] == 2
    assert (tmp_path / "run" / "logs" / "scalars" / "eval" / "vs_random" / "player_2" / "win_rate.csv").exists()
    capsys.readouterr()
    code = main(["eval", str(tmp_path / "run"), "--opponent", "tests.opponents.players:first_legal", "--episodes", "5"])
    out = capsys.readouterr()
    assert code == 0, out.err
    matches = json.loads(out.out)["matches"]
    assert [m["seat"] for m in matches] == ["player_1", "player_2"]
    for m in matches:
        assert m["episodes"] == 5 and m["wins"] + m["draws"] + m["losses"] == 5
        assert m["opponent"] == "tests.opponents.players:first_legal"
    assert "player_1: 5 episodes, win" in out.err
    code = main(["eval", str(tmp_path / "run"), "--opponent", "random", "--seat", "player_9"])
    assert code == 1 and "--seat 'player_9'" in capsys.readouterr().err


@pytest.mark.parametrize(
    "source, model",
    [("random", "mlp"), ("self", "mlp"), ("self", "gru"), ("tests.opponents.players:first_legal", "mlp")],
)
def test_a_run_with_an_opponent_resumes_exactly(tmp_path, monkeypatch, source, model):
    from tests.run.test_recovery import assert_straight_equals_crash_then_resume

    cfg = ttt("train.total_frames=200", "log.checkpoint_every=2", f"opponents.player_2={source}", f"model.kind={model}")
    assert_straight_equals_crash_then_resume(cfg, tmp_path, monkeypatch, 3, 40)


def test_a_recurrent_pool_run_resumes_exactly_with_its_pool(tmp_path, monkeypatch):
    """A GRU policy whose pool seat plays its snapshots half the time: the snapshots, their ratings and each
    copy's recurrent state (the snapshot's, where one plays) resume as the uninterrupted run has them."""
    from marl_ppo.run.checkpoints import load_checkpoint
    from tests.run.test_recovery import assert_straight_equals_crash_then_resume

    cfg = ttt(
        "train.total_frames=240", "log.checkpoint_every=2", "opponents.player_2=pool:player_1", "pool.every=1",
        "model.kind=gru", "model.seq_len=4",
    )  # fmt: skip
    assert_straight_equals_crash_then_resume(cfg, tmp_path, monkeypatch, 3, 40)
    pool = load_checkpoint(tmp_path / "run" / "checkpoints" / "last.pt")["pools"]["player_2"]
    assert pool["taken_at"] == [0, 1, 2, 3, 4, 5, 6] and any(".gru." in name for name in pool["params"])


def test_the_docs_scripted_example_plays_well_against_random():
    """docs/opponents.md's greedy player, as written there: it beats a random player most of the time."""
    import inspect
    from pathlib import Path

    docs = (Path(__file__).parents[2] / "docs" / "opponents.md").read_text()
    assert inspect.getsource(players.greedy).strip() in docs
    cfg = ttt()
    parts = build(cfg)
    seats = [
        build_opponent(cfg, "test", _callable("tests.opponents.players:greedy"), parts.groups["player_1"]),
        build_opponent(cfg, "test", _callable("random"), parts.groups["player_2"]),
    ]
    result = evaluate(TensorDictSequential(*seats), parts.env, 30, list(parts.groups), episodes=60)
    counts = count_outcomes(result.per_episode, "player_1")
    assert counts.win_rate > 0.8 and counts.loss_rate < 0.1, counts
    parts.env.close()
