"""Learning against opponents on the real games (slow: whole training runs)."""

from __future__ import annotations

import pytest
import torch

from marl_ppo.config import load_config
from marl_ppo.run.trainer import Trainer

pytestmark = pytest.mark.slow

RPS = [
    "env.kind=pettingzoo",
    "env.scenario=rps_v2",
    "env.continuous_actions=false",
    "env.kwargs={max_cycles: 1}",  # one round a game
    "env.max_steps=4",
    "env.num_envs=8",
    "train.frames_per_batch=400",
    "train.minibatch_size=200",
    "train.num_epochs=4",
    "train.lr=3e-3",
    "train.num_threads=1",
    "model.hidden=[16]",
    "log.eval_episodes=200",
    "log.eval_every=0",
    "log.checkpoint_every=0",
    "log.progress=false",
    "log.plot=false",
]


def _policy_at_the_start(trainer, group):
    """The policy's action probabilities on the first observation of a game."""
    parts = trainer.parts
    td = parts.env.reset()
    with torch.no_grad():
        parts.router.losses[group].actor_network(td)
    return torch.softmax(td[group, "logits"][0, 0], -1)


BIASED = "tests.opponents.players:mostly_rock"


def test_a_learner_exploits_a_fixed_biased_opponent(tmp_path):
    """Rock 80 % of the time: the best response is paper, which wins 80 % of the games."""
    overrides = [*RPS, "train.total_frames=6000", f"opponents.player_1={BIASED}", f"log.eval_opponents=[{BIASED}]"]
    trainer = Trainer(load_config(None, overrides=overrides), run_dir=tmp_path)
    summary = trainer.fit()
    assert _policy_at_the_start(trainer, "player_0")[1] > 0.8  # paper
    assert summary["eval/vs_tests_opponents_players_mostly_rock/player_0/win_rate"] >= 0.6
