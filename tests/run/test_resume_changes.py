"""What ``marl-ppo train --resume RUN key=value`` may change, and that the record says what ran (docs/runs.md).

Tiny real VMAS runs through the command line (``marl_ppo.cli.main``, what ``marl-ppo`` calls):

* a changeable key (learning rate, entropy coefficient, clip) takes effect from the resumed iteration:
  the logged value changes at the resumed frame, the losses use it, ``config.yaml`` records it, and
  ``resume.log`` and the run notes (``run.log``) say which key changed, old -> new, from which frame;
* a key that would change the networks, the env, its seeds or the reward table is refused before
  anything is written, naming the key, the run's value and the new one;
* fewer ``train.total_frames`` than done is refused; resuming a finished run says so and keeps its
  ``summary.json`` as it was.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from marl_ppo.cli import main
from marl_ppo.run.logger import read_scalars

pytestmark = pytest.mark.slow  # whole (tiny) runs

FPB = 40  # the tiny config's frames per batch (tests/conftest.py: tiny_config)


@pytest.fixture
def run(tmp_path, tiny_config) -> Path:
    """A finished 2-iteration run of the tiny config, checkpointed at every iteration."""
    assert tiny_config.fpb == FPB
    assert main(["train", *tiny_config.overrides, f"log.root={tmp_path}", "log.name=run"]) == 0
    return tmp_path / "run"


def _values(run: Path, metric: str) -> list[tuple[int, float]]:
    return read_scalars(run)[metric]


def _resume(run: Path, *overrides: str) -> int:
    return main(["train", "--resume", str(run), f"train.total_frames={4 * FPB}", *overrides])


def test_a_changed_learning_rate_takes_effect_from_the_resumed_iteration_and_is_recorded(run):
    assert _resume(run, "train.lr=1e-2") == 0
    lr = _values(run, "train/lr")
    assert [s for s, _ in lr] == [FPB, 2 * FPB, 3 * FPB, 4 * FPB]
    assert [v for _, v in lr[:2]] == pytest.approx([3e-4, 3e-4]) and [v for _, v in lr[2:]] == pytest.approx([1e-2] * 2)
    last = torch.load(run / "checkpoints" / "last.pt", weights_only=True)
    assert last["optimizer"]["param_groups"][0]["lr"] == pytest.approx(1e-2)
    assert "lr: 0.01" in (run / "config.yaml").read_text()
    line = f"changed train.lr: 0.0003 -> 0.01, in force from frame {2 * FPB} (iteration 3 on)"
    assert line in (run / "resume.log").read_text()
    assert line in (run / "run.log").read_text()


def test_a_changed_entropy_coefficient_and_clip_are_in_force_from_the_resumed_iteration(run):
    assert _resume(run, "loss.entropy_coeff=0.5", "loss.clip_epsilon=0.1") == 0
    coeff = _values(run, "train/agents/action/entropy_coeff")
    assert [v for _, v in coeff] == pytest.approx([0.0, 0.0, 0.5, 0.5])
    entropy_loss = _values(run, "train/agents/loss_entropy")
    assert [v for _, v in entropy_loss[:2]] == [0.0, 0.0] and all(v != 0.0 for _, v in entropy_loss[2:])
    router = torch.load(run / "checkpoints" / "last.pt", weights_only=True)["router"]
    assert router["losses.agents.clip_epsilon"].item() == pytest.approx(0.1)
    assert router["losses.agents.base_head_entropy_coeffs"].tolist() == pytest.approx([0.5])
    notes = (run / "resume.log").read_text()
    assert "changed loss.clip_epsilon: 0.2 -> 0.1" in notes and "changed loss.entropy_coeff: 0.0 -> 0.5" in notes


@pytest.mark.parametrize(
    "override, key, old, new",
    [
        ("model.hidden=[8]", "model.hidden", "[16]", "[8]"),
        ("env.kwargs.n_agents=3", "env.kwargs.n_agents", "2", "3"),
        ("train.seed=1", "train.seed", "0", "1"),
        ("loss.algorithm=ippo", "loss.algorithm", "'mappo'", "'ippo'"),
    ],
)
def test_a_key_that_would_change_what_was_trained_is_refused_before_anything_is_written(
    run, capsys, override, key, old, new
):
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    assert _resume(run, override) == 1
    err = capsys.readouterr().err
    assert f"{key}={new} (the run has {old}" in err and "ConfigError" in err
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == before  # no resume.log, same config


def test_fewer_total_frames_than_done_is_refused(run, capsys):
    assert main(["train", "--resume", str(run), f"train.total_frames={FPB}"]) == 1
    err = capsys.readouterr().err
    assert f"train.total_frames={FPB}: the run has done {2 * FPB} frames" in err
    assert not (run / "resume.log").exists()


def test_resuming_a_finished_run_says_so_and_keeps_its_summary(run):
    summary = (run / "summary.json").read_bytes()
    assert "eval/agents/episode_reward" in json.loads(summary)
    proc = subprocess.run(
        [sys.executable, "-m", "marl_ppo.cli", "train", "--resume", str(run)], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    assert f"has finished ({2 * FPB} frames, train.total_frames={2 * FPB}): nothing to train" in proc.stderr
    assert (run / "summary.json").read_bytes() == summary
