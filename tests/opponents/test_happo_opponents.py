"""HAPPO beside frozen opponents, on real tic-tac-toe and VMAS simple_tag: random, scripted, ``checkpoint:``
and pool seats play; only the learning groups' agents are HAPPO's units; frozen parameters never move;
``self`` (a seat that trains another group's networks) is refused in one line."""

from __future__ import annotations

import pytest
import torch

from marl_ppo.cli import main
from marl_ppo.config import load_config
from marl_ppo.core import happo
from marl_ppo.run.trainer import Trainer
from tests.opponents.test_opponents import TTT, ttt

HAPPO = ["loss.algorithm=happo", "model.share_params=false", "train.num_threads=1"]
LEARNER = [("player_1", None)]  # tic-tac-toe's one learning group: one agent, one unit


@pytest.fixture
def units(monkeypatch) -> list[list]:
    """Each iteration's HAPPO units, as the update orders them (the real update runs on)."""
    seen: list[list] = []
    order = happo.unit_order

    def spy(given, how, generator):
        seen.append(list(given))
        return order(given, how, generator)

    monkeypatch.setattr(happo, "unit_order", spy)
    return seen


def _state(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def _same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def _fit_moving(trainer: Trainer, learners: list[str]) -> None:
    """Trains ``trainer``'s run; each group of ``learners`` must come out with other policy weights."""
    before = {g: _state(trainer.parts.router.losses[g].actor_network) for g in learners}
    trainer.fit()
    for g in learners:
        assert not _same(before[g], _state(trainer.parts.router.losses[g].actor_network)), f"{g} did not train"


@pytest.mark.parametrize("source", ["random", "tests.opponents.players:first_legal"])
def test_a_random_or_scripted_seat_plays_beside_a_happo_learner(tmp_path, units, source):
    trainer = Trainer(ttt(*HAPPO, f"opponents.player_2={source}"), run_dir=tmp_path)
    assert list(trainer.parts.router.groups) == ["player_1"]
    _fit_moving(trainer, ["player_1"])
    assert units == [LEARNER, LEARNER]  # 80 frames, 40 a batch: two updates, the learner's unit alone
    assert (tmp_path / "summary.json").is_file()


def test_a_checkpoint_seat_stays_bit_for_bit_beside_a_happo_learner(tmp_path, units):
    assert main(["train", "tictactoe_two_groups", *TTT, *HAPPO, f"log.root={tmp_path}", "log.name=old"]) == 0
    old = tmp_path / "old"
    trainer = Trainer(ttt(*HAPPO, f"opponents.player_2=checkpoint:{old}"), run_dir=tmp_path / "new")
    opponent = trainer.parts.opponents["player_2"]
    before = _state(opponent)
    assert before and not any(p.requires_grad for p in opponent.parameters())
    units.clear()  # the old run's own units (both players) are not this run's
    _fit_moving(trainer, ["player_1"])
    assert _same(before, _state(opponent))
    assert units == [LEARNER, LEARNER]


def test_a_pool_seat_of_frozen_snapshots_is_no_happo_unit(tmp_path, units):
    """``player_2: pool:player_1`` with ``pool.latest_share=0``: player_2 plays player_1's snapshot of the start
    in every episode; its loss keeps no step, so only player_1 is a unit and the snapshot never moves."""
    seen = []

    class Record:
        def on_batch_collected(self, trainer, batch):
            seen.append((batch["player_2", "opponent"].clone(), batch["player_2", "train_mask"].clone()))

    cfg = ttt(*HAPPO, "opponents.player_2=pool:player_1", "pool.latest_share=0", "pool.every=100")
    trainer = Trainer(cfg, run_dir=tmp_path, callbacks=[Record()])
    snapshots = trainer.parts.pools["player_2"].snapshots
    before = {k: v.clone() for k, v in snapshots.params.items()}
    _fit_moving(trainer, ["player_1"])
    assert units == [LEARNER, LEARNER]
    assert len(snapshots) == 1 and _same(before, snapshots.params)
    # the shared policy took the learner's steps only: 2 updates x 1 epoch x 2 minibatches (a pass of the
    # seat's empty loss would have added 4 Adam steps on a zero gradient, moving it on its momentum)
    optimizer, seat = trainer.state.step.optimizer, trainer.parts.router.losses["player_2"].actor_network
    steps = {int(optimizer.state[p]["step"]) for p in seat.parameters()}
    assert steps == {4}
    for opponent, train_mask in seen:  # every game against the snapshot; no player_2 step enters a loss
        assert (opponent == 0).all() and not train_mask.any()


# no iteration steps the optimizer, and torch's scheduler says so when the run steps the schedule
@pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step\\(\\)` before `optimizer.step\\(\\)`")
def test_a_batch_whose_every_loss_mask_is_empty_takes_no_happo_step(tmp_path, units):
    """``player_1: pool`` with ``pool.latest_share=0`` plays its snapshot in every game, so no step of the batch
    enters a loss: HAPPO has no unit and takes no step (an Adam step on a zero gradient would move the weights)."""
    cfg = ttt(*HAPPO, "opponents.player_1=pool", "pool.latest_share=0", "pool.every=100", "opponents.player_2=random")
    trainer = Trainer(cfg, run_dir=tmp_path)
    before = _state(trainer.parts.router.losses["player_1"].actor_network)
    trainer.fit()
    assert units == [[], []]
    assert _same(before, _state(trainer.parts.router.losses["player_1"].actor_network))
    assert not trainer.state.step.optimizer.state


def test_a_pool_of_the_learners_own_past_plays_beside_every_happo_unit(tmp_path, units):
    """simple_tag_pool under HAPPO: the agent (``opponents.agent=pool``) trains in its games against its latest
    policy and plays its frozen snapshot in the others; the units are the three adversaries and the agent."""
    overrides = [
        *HAPPO, "env.num_envs=4", "env.max_steps=5", "train.frames_per_batch=80", "train.total_frames=160",
        "train.num_epochs=1", "train.minibatch_size=40", "model.hidden=[16]", "pool.every=100",
        "log.eval_episodes=1", "log.progress=false", "log.plot=false",
    ]  # fmt: skip
    trainer = Trainer(load_config("simple_tag_pool", overrides=overrides), run_dir=tmp_path)
    snapshots = trainer.parts.pools["agent"].snapshots
    before = {k: v.clone() for k, v in snapshots.params.items()}
    _fit_moving(trainer, ["adversary", "agent"])
    expected = [("adversary", 0), ("adversary", 1), ("adversary", 2), ("agent", None)]
    assert len(units) == 2 and all(sorted(u, key=str) == expected for u in units), units
    assert _same(before, snapshots.params)


@pytest.mark.parametrize(
    "overrides, words",
    [
        (
            ["opponents.player_2=self"],
            ["['player_2']", "opponents.player_2=self", "updated by two units' passes", "loss.algorithm=mappo"],
        ),
        (
            ["opponents.player_2=pool:player_1"],  # pool.latest_share=0.5: its latest-policy games would train
            ["opponents.player_2=pool:player_1", "second unit's pass", "pool.latest_share=0"],
        ),
        (
            ["opponents.player_1=pool", "opponents.player_2=pool:player_1", "pool.latest_share=0"],
            ["opponents.player_2=pool:player_1", "player_1", "never play its latest policy"],
        ),
    ],
    ids=["self", "pool-latest", "pool-of-a-pool"],
)
def test_a_seat_that_would_train_shared_networks_is_refused_under_happo(tmp_path, capsys, overrides, words):
    assert main(["train", "tictactoe_two_groups", f"log.root={tmp_path}", *TTT, *HAPPO, *overrides]) == 1
    err = capsys.readouterr().err
    assert "loss.algorithm=happo updates the groups one after another, but" in err and err.count("\n") == 1, err
    for word in words:
        assert word in err, err
    assert not any(tmp_path.iterdir())
