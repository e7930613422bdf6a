"""Every evaluation reports the greedy and the sampled return side by side: the run's evaluations (logged and
in ``summary.json``) and ``marl-ppo eval``, on the same envs, episodes and seeds as the configured mode's."""

from __future__ import annotations

import json

import pytest

from marl_ppo.cli import main

TINY = ["env.num_envs=4", "env.max_steps=10", "env.kwargs.n_agents=2", "train.frames_per_batch=40",
        "train.minibatch_size=40", "train.num_epochs=1", "train.total_frames=80", "model.hidden=[8]",
        "log.eval_every=1", "log.eval_episodes=4", "log.progress=false", "log.plot=false"]  # fmt: skip


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("modes")
    assert main(["train", "navigation", *TINY, f"log.root={root}", "log.name=run"]) == 0
    return root / "run"


def test_a_run_logs_both_modes_and_its_configured_one_is_the_greedy(run):
    summary = json.loads((run / "summary.json").read_text())
    greedy, sampled = summary["eval/agents/episode_reward_greedy"], summary["eval/agents/episode_reward_sampled"]
    assert summary["eval/agents/episode_reward"] == greedy  # log.eval_deterministic=true: the same evaluation
    assert sampled != greedy  # the sampled actions play other episodes
    for mode in ("greedy", "sampled"):
        rows = (run / "logs" / "scalars" / "eval" / "agents" / f"episode_reward_{mode}.csv").read_text().split()
        assert len(rows) == 2  # one per evaluation


def test_marl_ppo_eval_prints_both_modes_and_sample_picks_the_headline(run, capsys):
    assert main(["eval", str(run), "--episodes", "4"]) == 0
    greedy = json.loads(capsys.readouterr().out)
    assert greedy["episode_reward"] == greedy["episode_reward_greedy"] != greedy["episode_reward_sampled"]
    assert main(["eval", str(run), "--episodes", "4", "--sample"]) == 0
    sampled = json.loads(capsys.readouterr().out)
    assert sampled["episode_reward"] == sampled["episode_reward_sampled"] == greedy["episode_reward_sampled"]
    assert sampled["episode_reward_greedy"] == greedy["episode_reward_greedy"]


def test_eval_both_false_plays_the_configured_mode_alone(tmp_path):
    assert main(["train", "navigation", *TINY, "log.eval_both=false", f"log.root={tmp_path}", "log.name=one"]) == 0
    summary = json.loads((tmp_path / "one" / "summary.json").read_text())
    assert "eval/agents/episode_reward" in summary and not any(k.endswith(("_greedy", "_sampled")) for k in summary)
    assert not list((tmp_path / "one" / "logs" / "scalars" / "eval" / "agents").glob("episode_reward_*.csv"))
