"""Snapshot pools on real tic-tac-toe: when snapshots are taken, how opponents are drawn, what trains, resume."""

from __future__ import annotations

import pytest
import torch

from marl_ppo.opponents.pool import SnapshotNet
from marl_ppo.options import ConfigError
from marl_ppo.run.build import build, load_policy
from marl_ppo.run.checkpoints import load_checkpoint
from marl_ppo.run.trainer import Trainer
from tests.opponents.test_opponents import ttt


def _rollout(parts, steps):
    with torch.no_grad():
        return parts.env.rollout(steps, parts.policy, break_when_any_done=False)


def test_snapshots_are_taken_every_k_iterations_and_capped(tmp_path):
    cfg = ttt("train.total_frames=200", "opponents.player_2=pool:player_1", "pool.every=2", "pool.size=2")
    Trainer(cfg, run_dir=tmp_path).fit()
    ckpt = {i: load_checkpoint(tmp_path / "checkpoints" / f"iter_{i:05d}.pt") for i in range(1, 6)}
    assert [ckpt[i]["pools"]["player_2"]["taken_at"] for i in range(1, 6)] == [[0], [0, 2], [0, 2], [2, 4], [2, 4]]
    # the snapshot of iteration 2 is player_1's policy network as it stood after that update, bit for bit
    pool = ckpt[4]["pools"]["player_2"]["params"]
    for name, stacked in pool.items():
        live = ckpt[2]["router"][f"losses.player_1.actor_network.module.0.module.{name}"]
        assert torch.equal(stacked[0], live), name
        assert torch.equal(stacked[1], ckpt[4]["router"][f"losses.player_1.actor_network.module.0.module.{name}"])


def test_the_opponent_is_drawn_per_env_and_per_episode_and_recorded():
    parts = build(ttt("env.num_envs=8", "opponents.player_2=pool:player_1", "pool.latest_share=0.3"))
    for i in range(1, 4):
        parts.pools["player_2"].snapshot(i)
    td = _rollout(parts, 300)
    drawn = td["player_2", "opponent"][..., 0]  # [envs, T]
    starts = td["is_init"][..., 0]
    assert ((drawn >= -1) & (drawn < 4)).all()
    changed = drawn[:, 1:] != drawn[:, :-1]
    assert not (changed & ~starts[:, 1:]).any(), "an opponent changed within an episode"
    per_episode = drawn[starts]
    assert len(per_episode) > 200 and len(set(per_episode.tolist())) == 5
    assert 0.2 < (per_episode == -1).float().mean() < 0.4  # latest_share 0.3 over > 200 episodes
    # the seat's loss counts its own turns against the latest policy, nothing else
    mask, train = td["player_2", "mask"], td["player_2", "train_mask"]
    assert torch.equal(train, mask & (td["player_2", "opponent"] == -1))
    parts.env.close()


def test_learner_seating_puts_one_seat_on_the_latest_policy_in_every_episode():
    """pool.seating=learner, both seats pooled on player_1's networks, latest_share 0: in every episode
    exactly one seat plays the latest policy (drawn per env and per episode, each seat about half the
    time) and the other a snapshot; the draws hold for the whole episode and train that seat only."""
    both = ["opponents.player_1=pool", "opponents.player_2=pool:player_1", "pool.latest_share=0"]
    parts = build(ttt("env.num_envs=8", *both, "pool.seating=learner"))
    for i in range(1, 3):
        parts.pools["player_1"].snapshot(i)
        parts.pools["player_2"].snapshot(i)
    td = _rollout(parts, 300)
    starts = td["is_init"][..., 0]
    first, second = (td[seat, "opponent"][..., 0] for seat in ("player_1", "player_2"))
    for drawn in (first, second):
        assert not ((drawn[:, 1:] != drawn[:, :-1]) & ~starts[:, 1:]).any(), "a draw changed within an episode"
    latest = first[starts] == -1
    assert len(latest) > 100
    assert torch.equal(latest, second[starts] != -1), "not exactly one seat on the latest policy"
    assert 0.35 < latest.float().mean() < 0.65
    assert set(first[starts][~latest].tolist()) == {0, 1, 2} and set(second[starts][latest].tolist()) == {0, 1, 2}
    for seat in ("player_1", "player_2"):
        assert torch.equal(td[seat, "train_mask"], td[seat, "mask"] & (td[seat, "opponent"] == -1))
    parts.env.close()
    # independent seating, the same shares: no seat ever plays the latest policy
    alone = build(ttt("env.num_envs=8", *both))
    alone.pools["player_1"].snapshot(1)
    td = _rollout(alone, 100)
    assert not (td["player_1", "opponent"] == -1).any() and not (td["player_2", "opponent"] == -1).any()
    alone.env.close()


@pytest.mark.parametrize("drop", ["oldest", "lowest"])
def test_an_episode_under_way_keeps_its_snapshot_when_another_is_dropped(drop):
    """Past pool.size a snapshot is dropped and the later slots move down: the env copies mid-episode
    follow their snapshot to its new slot; those against the dropped one go on with the latest policy."""
    parts = build(ttt("env.num_envs=8", "opponents.player_2=pool:player_1", "pool.size=3", f"pool.drop={drop}"))
    pool = parts.pools["player_2"]
    for i in (1, 2):
        with torch.no_grad():  # three different snapshots
            next(iter(pool.snapshots.template.parameters())).add_(1.0)
        pool.snapshot(i)
    pool.snapshots.ratings = [1010.0, 990.0, 1000.0]  # drop=lowest drops slot 1, drop=oldest slot 0
    out = 0 if drop == "oldest" else 1
    before = {k: v.clone() for k, v in pool.snapshots.params.items()}
    pool.assignment = torch.tensor([-1, 0, 1, 2, 2, 1, 0, -1])
    kept = pool.assignment.clone()
    pool.snapshot(3)
    expected = torch.where(kept == out, -1, torch.where(kept > out, kept - 1, kept))
    assert torch.equal(pool.assignment, expected)
    for env, (old, new) in enumerate(zip(kept.tolist(), pool.assignment.tolist())):
        if new >= 0:  # the same parameters as before the drop
            for name, stacked in pool.snapshots.params.items():
                assert torch.equal(stacked[new], before[name][old]), (env, name)
    parts.env.close()


def test_a_snapshot_plays_its_own_policy():
    """A snapshot whose output layer always prefers the centre square: every snapshot move takes it when legal."""
    parts = build(ttt("env.num_envs=8", "opponents.player_2=pool:player_1", "pool.latest_share=0"))
    pool = parts.pools["player_2"]
    snap = pool.snapshots.params
    last = max(k for k in snap if k.endswith("weight"))
    snap[last].zero_()
    snap[last.replace("weight", "bias")].copy_(torch.nn.functional.one_hot(torch.tensor([4]), 9) * 100.0)
    td = _rollout(parts, 200)
    moves = td["player_2", "mask"][..., 0]
    legal_centre = td["player_2", "action_mask"][..., 0, 4]
    assert (td["player_2", "opponent"][moves] == 0).all()
    chosen = td["player_2", "action"][..., 0][moves & legal_centre]
    assert len(chosen) > 20 and (chosen == 4).all()
    # the live policy (same seat, latest_share 1) does not play like that
    live = build(ttt("env.num_envs=8", "opponents.player_2=pool:player_1", "pool.latest_share=1"))
    td = _rollout(live, 200)
    moves = td["player_2", "mask"][..., 0] & td["player_2", "action_mask"][..., 0, 4]
    assert (td["player_2", "action"][..., 0][moves] != 4).any()
    parts.env.close()
    live.env.close()


def test_fixed_players_are_drawn_beside_the_snapshots_and_play_their_own_moves():
    """pool.fixed: a scripted first-legal player in 40 % of the episodes, its moves its own, none of them trained."""
    overrides = ["opponents.player_2=pool:player_1", "pool.latest_share=0.3", "pool.fixed_share=0.4"]
    parts = build(ttt("env.num_envs=8", *overrides, "pool.fixed=[tests.opponents.players:first_legal]"))
    td = _rollout(parts, 300)
    drawn, starts = td["player_2", "opponent"][..., 0], td["is_init"][..., 0]
    per_episode = drawn[starts]
    assert set(per_episode.tolist()) == {-2, -1, 0} and len(per_episode) > 200
    assert 0.3 < (per_episode == -2).float().mean() < 0.5  # fixed_share 0.4
    moves = td["player_2", "mask"][..., 0]
    first_legal = td["player_2", "action_mask"][..., 0, :].float().argmax(-1)
    scripted = moves & (drawn == -2)
    assert scripted.sum() > 50 and torch.equal(td["player_2", "action"][..., 0][scripted], first_legal[scripted])
    assert (td["player_2", "action"][..., 0][moves & (drawn == -1)] != first_legal[moves & (drawn == -1)]).any()
    assert torch.equal(td["player_2", "train_mask"], td["player_2", "mask"] & (td["player_2", "opponent"] == -1))
    parts.env.close()


def test_the_snapshots_run_in_one_call_equal_to_each_snapshot_alone():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
    snapshots, copies = SnapshotNet(net), []
    for _ in range(3):
        copies.append({k: torch.randn_like(v) for k, v in net.named_parameters()})
        snapshots.add(copies[-1], size=3)
    x = torch.randn(6, 2, 5)
    snapshots.choice = torch.tensor([2, 0, 1, 1, 0, 2])
    out = snapshots(x)
    for e, k in enumerate(snapshots.choice.tolist()):
        torch.testing.assert_close(out[e], torch.func.functional_call(net, copies[k], (x[e],)))
    snapshots.add(copies[0], size=3)  # a fourth: the oldest goes
    assert len(snapshots) == 3 and torch.equal(snapshots.params["0.weight"][0], copies[1]["0.weight"])


def test_a_rated_pool_run_resumes_exactly_with_its_ratings(tmp_path, monkeypatch):
    """Draws by rating and drops the lowest: the ratings steer the draws, so they must resume bit for bit."""
    from tests.run.test_recovery import assert_straight_equals_crash_then_resume

    cfg = ttt(
        "train.total_frames=240",
        "log.checkpoint_every=2",
        "opponents.player_2=pool:player_1",
        "pool.every=1",
        "pool.size=3",
        "pool.draw=rating",
        "pool.drop=lowest",
    )
    assert_straight_equals_crash_then_resume(cfg, tmp_path, monkeypatch, 5, 40)
    a, b = (
        load_checkpoint(tmp_path / run / "checkpoints" / "last.pt")["pools"]["player_2"] for run in ("straight", "run")
    )
    assert a["taken_at"] == b["taken_at"] and a["ratings"] == b["ratings"]
    assert a["taken_at"][-1] == 6 and len(a["taken_at"]) == 3


def test_a_pool_run_resumes_exactly_with_its_pool(tmp_path, monkeypatch):
    from tests.run.test_recovery import assert_straight_equals_crash_then_resume

    cfg = ttt("train.total_frames=240", "log.checkpoint_every=2", "opponents.player_2=pool:player_1", "pool.every=1")
    assert_straight_equals_crash_then_resume(cfg, tmp_path, monkeypatch, 5, 40)
    a, b = (load_checkpoint(tmp_path / run / "checkpoints" / "last.pt")["pools"] for run in ("straight", "run"))
    assert a["player_2"]["taken_at"] == b["player_2"]["taken_at"] == [0, 1, 2, 3, 4, 5, 6]
    assert a["player_2"]["ratings"] == b["player_2"]["ratings"] and len(set(a["player_2"]["ratings"])) > 1
    for name, value in a["player_2"]["params"].items():
        assert torch.equal(value, b["player_2"]["params"][name]), name


@pytest.mark.parametrize(
    "overrides, words",
    [
        (["opponents.player_2=pool:player_1", "pool.size=0"], ["pool.size", ">= 1", "0"]),
        (
            ["opponents.player_2=pool:player_1", "log.eval_deterministic=false"],
            ["log.eval_deterministic=false", "a pool seat would play its snapshots in the evaluations"],
        ),
        (["opponents.player_2=pool:player_1", "pool.latest_share=1.5"], ["pool.latest_share", "[0, 1]", "1.5"]),
        (["opponents.player_2=pool:player_1", "pool.draw=best"], ["pool.draw", "'uniform', 'rating'", "'best'"]),
        (["opponents.player_2=pool:player_1", "pool.drop=newest"], ["pool.drop", "'oldest', 'lowest'", "'newest'"]),
        (["opponents.player_2=pool:player_9"], ["opponents.player_2", "pool:player_9"]),
        (
            ["opponents.player_2=pool:player_1", "pool.fixed=[self]", "pool.fixed_share=0.2"],
            ["pool.fixed[0]", "'self'"],
        ),
        (["opponents.player_2=pool:player_1", "pool.fixed=[random]"], ["pool.fixed", "pool.fixed_share=0"]),
        (["opponents.player_2=pool:player_1", "pool.fixed_share=0.6"], ["pool.latest_share + pool.fixed_share", "1"]),
        (["opponents.player_2=pool:player_1", "pool.fixed=[nowhere:act]", "pool.fixed_share=0.2"], ["pool.fixed[0]"]),
        (
            ["opponents.player_2=pool:player_1", "pool.seating=alternate"],
            ["pool.seating", "'independent', 'learner'", "'alternate'"],
        ),
        (
            ["opponents.player_2=pool:player_1", "pool.seating=learner"],
            ["pool.seating=learner", "pool seats ['player_2'] share none", "player_2: pool:player_1"],
        ),
    ],
)
def test_a_bad_pool_is_refused_in_one_line(tmp_path, capsys, overrides, words):
    from marl_ppo.cli import main

    assert main(["train", "tictactoe_two_groups", f"log.root={tmp_path}", *overrides]) == 1
    err = capsys.readouterr().err
    for word in words:
        assert word in err, err
    assert not any(tmp_path.iterdir())


def test_a_symmetric_pool_ends_with_its_payoff_matrix_and_ratings(tmp_path):
    import json

    cfg = ttt(
        "train.total_frames=120",
        "opponents.player_2=pool:player_1",
        "pool.every=1",
        "pool.size=2",
        "pool.payoff_episodes=4",
        "log.eval_opponents=[random]",
    )
    summary = Trainer(cfg, run_dir=tmp_path).fit()
    payoff = json.loads((tmp_path / "payoff.json").read_text())
    assert payoff["players"] == ["iter_2", "iter_3", "latest", "random"]
    scores = payoff["scores"]
    for i in range(4):
        assert scores[i][i] is None
        for j in range(4):
            if i != j:  # each pair played in both seatings: their scores add up to one
                assert scores[i][j] + scores[j][i] == pytest.approx(1.0)
    assert sum(payoff["ratings"]) / 4 == pytest.approx(1000.0)
    assert {f"eval/rating/{p}" for p in payoff["players"]} <= set(summary)
    assert (tmp_path / "plots" / "payoff.png").stat().st_size > 0


def test_the_trainers_collector_draws_snapshots_and_the_update_skips_their_steps(tmp_path):
    seen = []

    class Record:
        def on_batch_collected(self, trainer, batch):
            seen.append((batch["player_2", "opponent"].clone(), batch["player_2", "advantage"].clone()))

    cfg = ttt("train.total_frames=160", "opponents.player_2=pool:player_1", "pool.every=1", "pool.latest_share=0.3")
    Trainer(cfg, run_dir=tmp_path, callbacks=[Record()]).fit()
    drawn = torch.cat([d.flatten() for d, _ in seen])
    assert (drawn >= 0).any() and (drawn == -1).any()
    for opponent, advantage in seen:  # a snapshot's steps carry no advantage: they train nothing
        assert (advantage[opponent >= 0] == 0).all()


@pytest.mark.parametrize(
    "name, opponents",
    [
        ("tictactoe", {"player_1": "pool", "player_2": "pool:player_1"}),
        ("connect_four", {"player_0": "pool", "player_1": "pool:player_0"}),
        ("simple_tag_pool", {"agent": "pool"}),
    ],
)
def test_the_shipped_competitive_configs_train_against_a_pool(name, opponents):
    """tictactoe, connect_four (by default) and simple_tag_pool: pool seats on a training group's networks;
    the board games with one learner seat per game and a random player in the pool."""
    from marl_ppo.config import load_config

    cfg = load_config(name, overrides=["env.num_envs=2"])
    assert cfg.opponents == opponents
    parts = build(cfg)
    assert sorted(parts.pools) == sorted(opponents)
    assert all(len(pool.snapshots) == 1 for pool in parts.pools.values())  # the snapshot of the start
    for seat, source in opponents.items():
        owner = source.partition(":")[2] or seat
        seat_params = list(parts.router.losses[seat].actor_network.parameters())
        owner_params = parts.router.losses[owner].actor_network.parameters()
        assert all(a is b for a, b in zip(seat_params, owner_params, strict=True))
    parts.env.close()
    if cfg.env.kind == "pettingzoo":
        assert cfg.log.eval_opponents == ["random"]
        assert (cfg.pool.seating, cfg.pool.fixed, cfg.train.total_frames) == ("learner", ["random"], 1_000_000)


def _first_legal(net: torch.nn.Module) -> None:
    """The network's last layer made to prefer square 0, then 1, ...: deterministically the first legal square."""
    last = [m for m in net.modules() if isinstance(m, torch.nn.Linear)][-1]
    with torch.no_grad():
        last.weight.zero_()
        last.bias.copy_(-100.0 * torch.arange(last.bias.numel()))


def test_eval_against_the_pool_shares_the_episodes_between_its_snapshots(monkeypatch):
    """First-legal against first-legal snapshots: the first mover wins every game (tic-tac-toe's own rewards),
    exactly 7 episodes per seat, shared 3 / 2 / 2 between three snapshots; 'pool' of a run without one is refused."""
    from marl_ppo.run.evaluation import Evaluator
    from marl_ppo.run.matches import Matches

    parts = build(ttt("opponents.player_2=pool:player_1"))
    pool = parts.pools["player_2"]
    _first_legal(pool.snapshots.template)
    pool.snapshot(1)
    pool.snapshot(2)
    _first_legal(parts.router.networks.of(parts.router.losses["player_1"].actor_network))
    cfg = ttt("opponents.player_2=pool:player_1")
    evaluator = Evaluator(cfg, parts.policy, list(parts.groups), episodes=7)
    played = Matches(cfg, parts, ["pool"], evaluator)()
    assert sorted(played) == [("pool", "player_1"), ("pool", "player_2")]
    first, second = played["pool", "player_1"][1], played["pool", "player_2"][1]
    assert (first.episodes, first.wins, second.episodes, second.losses) == (7, 7, 7, 7)
    calls, original = [], Evaluator.__call__
    monkeypatch.setattr(Evaluator, "__call__", lambda self, **kw: calls.append(kw["episodes"]) or original(self, **kw))
    Matches(cfg, parts, ["pool"], evaluator, seat="player_2")()
    assert calls == [3, 2, 2]
    evaluator.close()
    plain = build(ttt())
    with pytest.raises(ConfigError, match=r"opponent 'pool': the run's pools are none"):
        Matches(ttt(), plain, ["pool"], Evaluator(ttt(), plain.policy, list(plain.groups), episodes=2))()
    parts.env.close()
    plain.env.close()


def test_eval_pool_on_the_command_line_plays_the_runs_restored_snapshots(tmp_path, capsys):
    import json

    from marl_ppo.cli import main

    cfg = ttt("opponents.player_2=pool:player_1", "pool.every=1", "log.eval_opponents=[pool]")
    summary = Trainer(cfg, run_dir=tmp_path / "run").fit()
    assert summary["eval/vs_pool/player_1/episodes"] == 2  # logged during training too
    capsys.readouterr()
    assert main(["eval", str(tmp_path / "run"), "--opponent", "pool", "--episodes", "5"]) == 0
    matches = json.loads(capsys.readouterr().out)["matches"]
    assert [(m["seat"], m["episodes"]) for m in matches] == [("player_1", 5), ("player_2", 5)]
    assert main(["eval", str(tmp_path / "run"), "--sample"]) == 1  # the pool seat would draw its snapshots
    assert "--sample: the pool seats ['player_2'] would play their snapshots" in capsys.readouterr().err
    _, parts = load_policy(tmp_path / "run")
    assert parts.pools["player_2"].snapshots.taken_at == [0, 1, 2]  # restored from last.pt, not the start's only
    parts.env.close()


def test_the_snapshots_ratings_follow_their_games_against_the_latest_policy():
    """The games a batch credits to each snapshot are its episodes against the latest policy, scored from the
    env's rewards (counted here by hand), and Elo's update moves the ratings by exactly that surprise."""
    from marl_ppo.opponents.ratings import ELO_K, expected_score

    parts = build(ttt("env.num_envs=8", "opponents.player_2=pool:player_1", "pool.latest_share=0.2"))
    pool = parts.pools["player_2"]
    pool.snapshot(1)
    td = _rollout(parts, 200)
    games, scores = pool.games(td)
    done = td["next", "done"][..., 0]
    drawn = td["player_2", "opponent"][..., 0][done]
    mine = td["next", "player_2", "episode_reward"][done].flatten()
    theirs = td["next", "player_1", "episode_reward"][done].flatten()
    for k in (0, 1):
        played = drawn == k
        assert games[k] == int(played.sum()) > 10
        assert scores[k] == float((mine[played] > theirs[played]).sum() + 0.5 * (mine[played] == theirs[played]).sum())
    before = list(pool.snapshots.ratings)
    metrics = pool.after_update(2, td)  # not a snapshot iteration (every 5): the ratings only
    surprise = [s - n * expected_score(r, 1000.0) for r, n, s in zip(before, games, scores)]
    assert pool.snapshots.ratings == pytest.approx([1000.0 + ELO_K * d for d in surprise])
    assert pool.snapshots.latest_rating == pytest.approx(1000.0 - ELO_K * sum(surprise))
    assert metrics["pool/player_2/elo_latest"] == pool.snapshots.latest_rating
    parts.env.close()


def test_a_rated_pool_draws_its_strongest_snapshots_most_and_drops_its_weakest():
    parts = build(ttt("env.num_envs=8", "opponents.player_2=pool:player_1", "pool.draw=rating", "pool.drop=lowest"))
    pool = parts.pools["player_2"]
    pool.size = 3
    for i in (1, 2):
        pool.snapshot(i)
    pool.snapshots.ratings = [1400.0, 600.0, 1000.0]  # slot 0 beats the latest 91 % of the time, slot 1 9 %
    drawn = pool._draw(20_000, torch.device("cpu"))
    snap = drawn[drawn >= 0]
    share = torch.bincount(snap, minlength=3).float() / len(snap)
    torch.testing.assert_close(share, torch.tensor([0.909, 0.091, 0.5]) / 1.5, atol=0.015, rtol=0)
    pool.snapshots.latest_rating = 1100.0
    pool.snapshot(3)  # a fourth: the lowest-rated (slot 1, taken at 1) goes, the new one is rated as the latest
    assert pool.snapshots.taken_at == [0, 2, 3] and pool.snapshots.ratings == [1400.0, 1000.0, 1100.0]
    parts.env.close()
