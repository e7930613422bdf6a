"""What ``marl-ppo train --resume RUN key=value`` may change, and that the record says what ran (docs/runs.md).

Tiny real VMAS runs through the command line (``marl_ppo.cli.main``, what ``marl-ppo`` calls):

* a changeable key (learning rate, entropy coefficient, clip) takes effect from the resumed iteration:
  the logged value changes at the resumed frame, the losses use it, ``config.yaml`` records it, and
  ``resume.log`` and the run notes (``run.log``) say which key changed, old -> new, from which frame;
  every changeable key at once, each seen in force by the resumed iterations' update, logs or collector;
* a key that would change the networks, the env, its seeds or the reward table is refused before
  anything is written, naming the key, the run's value and the new one;
* fewer ``train.total_frames`` than done is refused; resuming a finished run says so and keeps its
  ``summary.json`` as it was, and with a changed key records no change (nothing ran).
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
    assert router["losses.agents.head_entropy_coeffs"].tolist() == pytest.approx([0.5])  # as configured now
    notes = (run / "resume.log").read_text()
    assert "changed loss.clip_epsilon: 0.2 -> 0.1" in notes and "changed loss.entropy_coeff: 0.0 -> 0.5" in notes


@pytest.mark.parametrize(
    "override, key, old, new",
    [
        ("model.hidden=[8]", "model.hidden", "[16]", "[8]"),
        ("env.kwargs.n_agents=3", "env.kwargs.n_agents", "2", "3"),
        ("train.seed=1", "train.seed", "0", "1"),
        ("loss.algorithm=ippo", "loss.algorithm", "'mappo'", "'ippo'"),
        ("loss.value_norm=running", "loss.value_norm", "'none'", "'running'"),
        ("model.kind=gru", "model.kind", "'mlp'", "'gru'"),
        ("train.frames_per_batch=80", "train.frames_per_batch", "40", "80"),
        ("env.max_steps=5", "env.max_steps", "10", "5"),
        ("reward_table={agents: [{own: 0.5}]}", "reward_table.agents", "None", "[{'own': 0.5}]"),
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


def _files(run: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run)): p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()}


def _resume_finished_with_changes(run: Path) -> tuple[dict[str, bytes], dict[str, bytes]]:
    """Every file of the finished ``run`` before and after ``--resume RUN train.lr=1e-2 loss.clip_epsilon=0.1``,
    which says in one line (and only that) that the run has finished."""
    before = _files(run)
    assert "config.yaml" in before and "run.log" in before and "resume.log" not in before
    proc = subprocess.run(
        [sys.executable, "-m", "marl_ppo.cli", "train", "--resume", str(run), "train.lr=1e-2", "loss.clip_epsilon=0.1"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("marl-ppo")]
    assert lines == [
        f"marl-ppo: {run} has finished ({2 * FPB} frames, train.total_frames={2 * FPB}): nothing to train; "
        "its summary.json is kept"
    ], proc.stderr
    assert "changed" not in proc.stderr
    return before, _files(run)


def test_resuming_a_finished_run_with_a_changed_key_records_no_change(run):
    """Nothing runs, so nothing is recorded: no ``resume.log``, and ``run.log``, ``summary.json``, the logs
    and checkpoints stay byte for byte (no "changed train.lr" note for a change that never took effect)."""
    before, after = _resume_finished_with_changes(run)
    assert sorted(after) == sorted(before)
    assert [name for name in before if name != "config.yaml" and after[name] != before[name]] == []


def test_resuming_a_finished_run_with_a_changed_key_keeps_its_config_yaml(run):
    before, after = _resume_finished_with_changes(run)
    assert after["config.yaml"] == before["config.yaml"]


def test_a_run_stopped_before_fit_with_its_record_complete_trains_nothing(run, capsys):
    """``stop()`` before ``fit()`` on a resumed run that has its summary (a trial whose record was
    completed meanwhile): nothing is trained, its files stay as they are, even with frames left."""
    from marl_ppo.config import load_config
    from marl_ppo.run.trainer import Trainer

    before = {p.relative_to(run): p.read_bytes() for p in run.rglob("*") if p.is_file()}
    trainer = Trainer(load_config(run / "config.yaml", [f"train.total_frames={4 * FPB}"]), run_dir=run, resume=True)
    trainer.stop()
    assert trainer.fit()["frames"] == 2 * FPB
    assert f"was stopped before its budget ({2 * FPB} frames, train.total_frames={4 * FPB})" in capsys.readouterr().err
    after = {p.relative_to(run): p.read_bytes() for p in run.rglob("*") if p.is_file()}
    assert {k: v for k, v in after.items() if k.name not in ("resume.log", "run.log", "config.yaml")} == {
        k: v for k, v in before.items() if k.name not in ("resume.log", "run.log", "config.yaml")
    }


# every changeable key, changed at once on one resume, and how the resumed iterations show it in force
CHANGES = {
    "train.total_frames": f"train.total_frames={4 * FPB}",
    "train.lr": "train.lr=1e-3",
    "train.lr_schedule": "train.lr_schedule=linear",
    "train.num_epochs": "train.num_epochs=2",
    "train.minibatch_size": "train.minibatch_size=20",
    "train.max_grad_norm": "train.max_grad_norm=0.5",
    "train.num_threads": "train.num_threads=1",
    "train.collector.": "train.collector.backend=process",
    "loss.clip_epsilon": "loss.clip_epsilon=0.3",
    "loss.entropy_coeff": "loss.entropy_coeff=0.1",
    "loss.head_entropy_coeff": "loss.head_entropy_coeff={action: 0.4}",
    "loss.entropy_schedule": "loss.entropy_schedule=linear",
    "loss.entropy_final_scale": "loss.entropy_final_scale=0.5",
    "loss.critic_coeff": "loss.critic_coeff=0.25",
    "loss.loss_critic_type": "loss.loss_critic_type=smooth_l1",
    "loss.gamma": "loss.gamma=0.9",
    "loss.lmbda": "loss.lmbda=0.8",
    "loss.normalize_advantage": "loss.normalize_advantage=true",
    "loss.group_weights": "loss.group_weights={agents: 2.0}",
    "log.": "log.eval_every=1",
}
# not changed here: compiling costs minutes on a CPU, this machine may have no second device, and bundling
# one group changes nothing (tests/core/test_bundles.py: bundled and plain routers give the same numbers)
NOT_CHANGED_HERE = {"train.compile", "train.device", "loss.bundle_groups"}


def test_the_table_names_every_changeable_key():
    from marl_ppo.run.resume import CHANGEABLE

    assert set(CHANGES) | NOT_CHANGED_HERE == set(CHANGEABLE)


def test_every_changeable_key_is_in_force_from_the_resumed_iteration(run, monkeypatch):
    import marl_ppo.core.update as update_mod

    real_update, seen = update_mod.ppo_update, []

    def update(model, step, batch, **kwargs):  # what each resumed iteration's update was given
        loss = model.template.losses["agents"]  # the run's SeedStack (one seed: the router itself)
        seen.append(
            {
                "num_epochs": kwargs["num_epochs"],
                "minibatch_size": kwargs["minibatch_size"],
                "max_grad_norm": step.max_grad_norm,
                "weights": dict(step.weights),
                "threads": torch.get_num_threads(),
                "clip_epsilon": loss.clip_epsilon.item(),
                "critic_coeff": loss.critic_coeff.item(),
                "loss_critic_type": loss.loss_critic_type,
                "normalize_advantage": loss.normalize_advantage,
                "gamma": loss.value_estimator.gamma.item(),
                "lmbda": loss.value_estimator.lmbda.item(),
            }
        )
        return real_update(model, step, batch, **kwargs)

    monkeypatch.setattr(update_mod, "ppo_update", update)  # the algorithm's update mode
    assert main(["train", "--resume", str(run), *CHANGES.values()]) == 0
    assert len(seen) == 2  # iterations 3 and 4
    for it in seen:
        assert it == {
            "num_epochs": 2,
            "minibatch_size": 20,
            "max_grad_norm": 0.5,
            "weights": {"agents": 2.0},
            "threads": 1,
            "clip_epsilon": pytest.approx(0.3),
            "critic_coeff": pytest.approx(0.25),
            "loss_critic_type": "smooth_l1",
            "normalize_advantage": True,
            "gamma": pytest.approx(0.9),
            "lmbda": pytest.approx(0.8),
        }
    frames = [FPB, 2 * FPB, 3 * FPB, 4 * FPB]
    lr = _values(run, "train/lr")
    assert [s for s, _ in lr] == frames  # train.total_frames: two more iterations
    # linear to 0 over the 4 iterations, from the new rate: the rates of iterations 3 and 4
    assert [v for _, v in lr] == pytest.approx([3e-4, 3e-4, 1e-3 * (1 - 2 / 4), 1e-3 * (1 - 3 / 4)])
    # the head's own coefficient, decaying linearly to half of it over the 4 iterations
    coeff = _values(run, "train/agents/action/entropy_coeff")
    assert [v for _, v in coeff] == pytest.approx([0.0, 0.0, 0.4 * (1 - 0.5 * 2 / 4), 0.4 * (1 - 0.5 * 3 / 4)])
    assert [s for s, _ in _values(run, "eval/agents/episode_reward")] == [2 * FPB, 3 * FPB, 4 * FPB]  # log.eval_every
    collectors = [ln for ln in (run / "run.log").read_text().splitlines() if " collector: " in ln]
    assert "lean VMAS" in collectors[0] and "worker processes" in collectors[-1]
    notes = (run / "resume.log").read_text()
    for override in CHANGES.values():
        key = override.partition("=")[0]
        assert f"changed {key}: " in notes, (key, notes)
