"""Runs, checkpoints and recovery: what a run directory guarantees after a crash, a signal or a bad file.

Covered (real VMAS navigation and PettingZoo simple_spread, tiny sizes):

* a crafted checkpoint whose unpickling would create a file is refused by ``eval`` and
  ``--resume`` (named, with the type it asked for) and the file never appears; a checkpoint in
  the earlier format (numpy RNG arrays) still resumes;
* exact resume: a run crashed after logging an iteration it had not checkpointed, resumed to the
  end, has the same parameters, optimizer state and metric files as the uninterrupted run (VMAS
  and PettingZoo), and every CSV holds each step once;
* ``kill -9`` during an update, after logging, and during a checkpoint write: the resumed run ends
  with the right counters, each step logged once, and the uninterrupted run's parameters;
* a corrupt ``last.pt`` (truncated, random bytes, empty) falls back to the newest good
  ``iter_*.pt`` and says so; an ``iter_*.pt`` newer than ``last.pt`` is taken; stale ``*.tmp`` go;
  a run with no checkpoint resumes as a fresh start of the same directory; a checkpoint of other
  networks is refused with the reason;
* SIGINT and SIGTERM: a checkpoint at the iteration reached, the logs closed, ``error.txt`` with the
  reason, exit code 130 / 143, and the resume continues from there;
* a full disk (``/dev/full``) names the checkpoint path and keeps ``error.txt`` and the logs;
* PettingZoo in worker processes (``env.parallel=true``) exits within seconds of its summary.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

import marl_ppo.run.logger as run_logging
from marl_ppo.cli import main
from marl_ppo.config import load_config, to_yaml
from marl_ppo.run.checkpoints import CheckpointError, load_checkpoint
from marl_ppo.run.signals import StopSignals
from marl_ppo.run.trainer import Trainer

pytestmark = pytest.mark.slow  # whole runs, subprocesses and clusters

ROOT = Path(__file__).resolve().parents[2]
FPB = 40  # 4 envs x 10 steps; episodes of 25 steps run across batches, so the env state matters
ITERATIONS = 6
TINY = [
    "env.num_envs=4",
    "env.max_steps=25",
    "env.kwargs.n_agents=2",
    f"train.frames_per_batch={FPB}",
    f"train.total_frames={ITERATIONS * FPB}",
    "train.num_epochs=2",
    "train.minibatch_size=20",
    "train.num_threads=1",
    "model.hidden=[16]",
    "log.eval_every=2",  # evaluations between checkpoints must not shift the training's RNG
    "log.eval_episodes=2",
    "log.checkpoint_every=3",
    "log.progress=false",
    "log.plot=false",
]
PZ = [
    str(ROOT / "configs" / "simple_spread.yaml"),
    *[o for o in TINY if "n_agents" not in o and "num_envs" not in o],
    "env.num_envs=2",
    f"train.frames_per_batch={FPB // 2}",
    f"train.total_frames={ITERATIONS * FPB // 2}",
    "train.minibatch_size=10",
    "env.kwargs.N=2",
]


def config(*extra: str):
    return load_config(overrides=TINY + list(extra))


def raw_csv(run: Path) -> dict[str, list[str]]:
    """Every metric file's lines, as written (no de-duplication)."""
    root = run / "logs" / "scalars"
    return {str(p.relative_to(root)): p.read_text().splitlines() for p in sorted(root.rglob("*.csv"))}


def assert_each_step_once(run: Path, frames: list[int]) -> None:
    for name, lines in raw_csv(run).items():
        steps = [int(float(ln.split(",")[0])) for ln in lines]
        assert len(steps) == len(set(steps)), f"{name} logs a step twice: {steps}"
        assert set(steps) <= set(frames), (name, steps)


def comparable(run: Path) -> dict[str, list[str]]:
    """The metric files without the wall-clock ones (``time/*_s``, ``time/fps``), which differ run to run."""
    return {k: v for k, v in raw_csv(run).items() if not (k.startswith("time/") and k != "time/iteration.csv")}


def assert_same_state(a: Path, b: Path) -> None:
    sa, sb = load_checkpoint(a / "checkpoints" / "last.pt"), load_checkpoint(b / "checkpoints" / "last.pt")
    assert (sa["iteration"], sa["frames"]) == (sb["iteration"], sb["frames"])
    for k, v in sa["router"].items():
        assert torch.equal(v, sb["router"][k]), k
    for k, v in sa["optimizer"]["state"].items():
        for name in ("exp_avg", "exp_avg_sq"):
            assert torch.equal(v[name], sb["optimizer"]["state"][k][name]), (k, name)


@pytest.fixture(scope="module")
def straight(tmp_path_factory) -> Path:
    """The uninterrupted VMAS run every recovery is compared with."""
    run = tmp_path_factory.mktemp("straight") / "run"
    Trainer(config(), run_dir=run).fit()
    return run


def crash_after_logging(monkeypatch, iteration: int, frames_per_batch: int = FPB) -> None:
    """The run dies right after logging ``iteration``: its checkpoint is never written."""
    real_log = run_logging.RunLogger.log

    def log(self, metrics, step):
        real_log(self, metrics, step)
        if "time/iteration" in metrics and step == iteration * frames_per_batch:
            raise RuntimeError(f"simulated crash after logging iteration {iteration}")

    monkeypatch.setattr(run_logging.RunLogger, "log", log)


# -- safe loading ------------------------------------------------------------------------------------


class _Marker:
    """Unpickling this creates a file: what a malicious checkpoint would do with os.system."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_crafted_checkpoint_is_refused_by_eval_and_resume(straight, tmp_path, capsys):
    run = tmp_path / "shared-run"
    run.mkdir()
    (run / "config.yaml").write_text((straight / "config.yaml").read_text())
    marker = tmp_path / "MARKER"
    state = load_checkpoint(straight / "checkpoints" / "last.pt")
    state["payload"] = _Marker(marker)
    (run / "checkpoints").mkdir()
    torch.save(state, run / "checkpoints" / "last.pt")

    assert main(["eval", str(run), "--episodes", "2"]) == 1
    err = capsys.readouterr().err
    assert "refusing checkpoint" in err and "last.pt" in err and "'io.open'" in err  # builtins.open's real name
    assert main(["train", "--resume", str(run)]) == 1
    err = capsys.readouterr().err
    assert "skipped last.pt: refusing checkpoint" in err and "no usable checkpoint" in err
    assert not marker.exists()


def test_checkpoint_of_the_earlier_format_still_resumes(tmp_path):
    """Before format 2, numpy's RNG state was pickled as a numpy array: it loads and resumes."""
    run = tmp_path / "run"
    cfg2 = config(f"train.total_frames={3 * FPB}")
    Trainer(cfg2, run_dir=run).fit()
    path = run / "checkpoints" / "last.pt"
    state = load_checkpoint(path)
    state.pop("format")
    state["rng"]["numpy"] = np.random.get_state()
    state["rng"]["python"] = random.getstate()
    torch.save(state, path)
    with pytest.raises(Exception):  # the old layout really is outside plain weights_only
        torch.load(path, weights_only=True)
    resumed = Trainer(config(), run_dir=run, resume=True)
    assert resumed.iteration == 3
    assert resumed.fit()["iteration"] == ITERATIONS


# -- exact resume ------------------------------------------------------------------------------------


def test_crash_then_resume_reproduces_the_uninterrupted_run(straight, tmp_path, monkeypatch):
    run = tmp_path / "run"
    crash_after_logging(monkeypatch, 5)  # checkpointed at 3; 4 and 5 logged, then lost
    with pytest.raises(RuntimeError, match="simulated crash"):
        Trainer(config(), run_dir=run).fit()
    monkeypatch.undo()
    assert load_checkpoint(run / "checkpoints" / "last.pt")["iteration"] == 3

    resumed = Trainer(config(), run_dir=run, resume=True)
    assert resumed.iteration == 3
    assert any("resumed from last.pt (iteration 3" in n for n in resumed.resume_notes)
    assert resumed.fit()["iteration"] == ITERATIONS
    assert_same_state(straight, run)
    assert comparable(run) == comparable(straight)
    assert_each_step_once(run, [FPB * i for i in range(1, ITERATIONS + 1)])
    assert not (run / "error.txt").exists()
    log = (run / "resume.log").read_text()  # the previous error is kept there, traceback and all
    assert "the previous session ended with: RuntimeError: simulated crash" in log and "Traceback" in log


def assert_straight_equals_crash_then_resume(cfg, tmp_path, monkeypatch, iteration: int, frames_per_batch: int):
    """``cfg`` run straight, and run again with a crash after logging ``iteration`` then resumed: the same."""
    Trainer(cfg, run_dir=tmp_path / "straight").fit()
    crash_after_logging(monkeypatch, iteration, frames_per_batch)
    with pytest.raises(RuntimeError, match="simulated crash"):
        Trainer(cfg, run_dir=tmp_path / "run").fit()
    monkeypatch.undo()
    Trainer(cfg, run_dir=tmp_path / "run", resume=True).fit()
    assert_same_state(tmp_path / "straight", tmp_path / "run")
    assert comparable(tmp_path / "run") == comparable(tmp_path / "straight")


def test_pettingzoo_crash_then_resume_reproduces_the_uninterrupted_run(tmp_path, monkeypatch):
    cfg = load_config(PZ[0], overrides=PZ[1:])
    assert_straight_equals_crash_then_resume(cfg, tmp_path, monkeypatch, 4, FPB // 2)


def test_custom_env_crash_then_resume_reproduces_the_uninterrupted_run(tmp_path, monkeypatch):
    """A user's own EnvBase (two groups, a composite action) resumes exactly too: its ``_set_seed``
    is what the checkpoint boundary reseeds."""
    factory = f"{ROOT / 'tests' / 'envs' / 'custom_envs.py'}:make_depot"
    cfg = load_config(
        overrides=[o for o in TINY if "n_agents" not in o] + ["env.kind=custom", f"env.factory={factory}"]
    )
    assert_straight_equals_crash_then_resume(cfg, tmp_path, monkeypatch, 5, FPB)


def test_run_without_checkpoint_resumes_as_a_fresh_start(straight, tmp_path, monkeypatch):
    run = tmp_path / "run"
    crash_after_logging(monkeypatch, 2)  # before the first checkpoint (iteration 3)
    with pytest.raises(RuntimeError):
        Trainer(config(), run_dir=run).fit()
    monkeypatch.undo()
    assert not list((run / "checkpoints").glob("*.pt")) if (run / "checkpoints").exists() else True
    resumed = Trainer(config(), run_dir=run, resume=True)
    assert resumed.iteration == 0 and any("starts afresh" in n for n in resumed.resume_notes)
    resumed.fit()
    assert_same_state(straight, run)
    assert comparable(run) == comparable(straight)


# -- kill -9 ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("point, iteration", [("update", 5), ("logged", 4), ("checkpoint", 3)])
def test_kill_9_then_resume(straight, tmp_path, point, iteration):
    run = tmp_path / "run"
    args = ["train", *TINY, f"log.root={tmp_path}", "log.name=run"]
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "run" / "crash_run.py"), point, str(iteration), *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    if point == "checkpoint":
        assert (run / "checkpoints" / "iter_00003.pt.tmp").exists()
        assert not (run / "checkpoints" / "last.pt").exists()
    resumed = Trainer(config(), run_dir=run, resume=True)
    assert not list((run / "checkpoints").glob("*.tmp"))
    assert resumed.iteration == (0 if point == "checkpoint" else 3)
    summary = resumed.fit()
    assert (summary["iteration"], summary["frames"]) == (ITERATIONS, ITERATIONS * FPB)
    assert_each_step_once(run, [FPB * i for i in range(1, ITERATIONS + 1)])
    assert_same_state(straight, run)
    assert comparable(run) == comparable(straight)


# -- checkpoint fallback -----------------------------------------------------------------------------


@pytest.fixture
def four_checkpoints(tmp_path) -> Path:
    """A finished 4-iteration run with a checkpoint every iteration (episodes of 10 steps)."""
    run = tmp_path / "run"
    Trainer(config("env.max_steps=10", "log.checkpoint_every=1", f"train.total_frames={4 * FPB}"), run_dir=run).fit()
    return run


@pytest.mark.parametrize("damage", ["truncated", "random", "empty"])
def test_corrupt_last_falls_back_to_newest_good_iter(four_checkpoints, damage):
    run, ckpt = four_checkpoints, four_checkpoints / "checkpoints"
    good = (ckpt / "last.pt").read_bytes()
    bad = {"truncated": good[: len(good) // 3], "random": os.urandom(len(good)), "empty": b""}[damage]
    (ckpt / "last.pt").write_bytes(bad)
    (ckpt / "iter_00004.pt").unlink()  # the newest good one is then iter_00003
    (ckpt / "iter_00005.pt.tmp").write_bytes(b"")  # a write that was killed
    cfg = config("env.max_steps=10", "log.checkpoint_every=1", f"train.total_frames={5 * FPB}")
    resumed = Trainer(cfg, run_dir=run, resume=True)
    notes = "\n".join(resumed.resume_notes)
    assert resumed.iteration == 3
    assert "skipped last.pt" in notes and "resumed from iter_00003.pt" in notes
    assert "removed iter_00005.pt.tmp" in notes and not (ckpt / "iter_00005.pt.tmp").exists()
    assert resumed.fit()["iteration"] == 5


def test_iter_checkpoint_newer_than_last_is_taken(four_checkpoints):
    ckpt = four_checkpoints / "checkpoints"
    (ckpt / "last.pt").write_bytes((ckpt / "iter_00002.pt").read_bytes())  # killed before last.pt was renamed
    resumed = Trainer(
        config("env.max_steps=10", "log.checkpoint_every=1", f"train.total_frames={5 * FPB}"),
        run_dir=four_checkpoints,
        resume=True,
    )
    assert resumed.iteration == 4
    assert any("iter_00004.pt is newer than last.pt" in n for n in resumed.resume_notes)


def test_checkpoint_of_other_networks_is_refused_with_the_reason(four_checkpoints):
    # checkpoints of other networks than the run's config records (a changed model key itself is refused
    # earlier, naming the key: tests/run/test_resume_changes.py)
    other = config("env.max_steps=10", "log.checkpoint_every=1", "model.hidden=[8]")
    (four_checkpoints / "config.yaml").write_text(to_yaml(other))
    with pytest.raises(CheckpointError, match=r"skipped last.pt: .*networks do not match|has shape"):
        Trainer(other, run_dir=four_checkpoints, resume=True)


def test_corrupt_checkpoint_in_eval_names_the_file(four_checkpoints, capsys):
    (four_checkpoints / "checkpoints" / "last.pt").write_bytes(b"not a checkpoint")
    assert main(["eval", str(four_checkpoints), "--episodes", "2"]) == 1
    err = capsys.readouterr().err
    assert "CheckpointError" in err and str(four_checkpoints / "checkpoints" / "last.pt") in err
    # the way out, as --resume would take it: the newest checkpoint that loads
    assert "the newest usable checkpoint is iter_00004.pt: use it with --checkpoint iter_00004.pt" in err
    assert main(["eval", str(four_checkpoints), "--episodes", "2", "--checkpoint", "iter_00004.pt"]) == 0


# -- signals ------------------------------------------------------------------------------------------


def wait_for_iterations(run: Path, n: int, proc: subprocess.Popen, timeout: float = 240) -> None:
    path = run / "logs" / "scalars" / "time" / "iteration.csv"
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise AssertionError(f"the run ended early: {proc.communicate()[1][-2000:]}")
        if path.exists() and len(path.read_text().splitlines()) >= n:
            return
        time.sleep(0.05)
    raise AssertionError(f"no {n} iterations within {timeout} s")


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signal_checkpoints_the_iteration_reached_and_resume_continues(tmp_path, sig, code):
    long = [o for o in TINY if not o.startswith("train.total_frames")] + [f"train.total_frames={2000 * FPB}"]
    run = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "marl_ppo.cli", "train", *long, f"log.root={tmp_path}", "log.name=run"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        wait_for_iterations(run, 4, proc)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == code, err[-2000:]
    name = signal.Signals(sig).name
    assert f"stopped by {name} at iteration" in err
    state = load_checkpoint(run / "checkpoints" / "last.pt")
    logged = (run / "logs" / "scalars" / "time" / "iteration.csv").read_text().splitlines()
    assert state["iteration"] == len(logged) >= 4  # the checkpoint holds the last logged iteration
    assert logged[-1] == f"{state['frames']},{float(state['iteration'])}"  # whole lines: files closed
    assert f"stopped by {name}" in (run / "error.txt").read_text()

    cfg = load_config(run / "config.yaml", [f"train.total_frames={(state['iteration'] + 2) * FPB}"])
    resumed = Trainer(cfg, run_dir=run, resume=True)
    assert resumed.iteration == state["iteration"]
    assert resumed.fit()["iteration"] == state["iteration"] + 2
    assert_each_step_once(run, [FPB * i for i in range(1, state["iteration"] + 3)])


def test_second_signal_stops_at_once():
    # what was there before: Python's default, or SIG_IGN where the tests run in a background job
    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt, match="second SIGINT"):
        with StopSignals() as stop:
            os.kill(os.getpid(), signal.SIGINT)
            assert stop.requested == "SIGINT"
            os.kill(os.getpid(), signal.SIGINT)
    assert signal.getsignal(signal.SIGINT) is before  # handlers restored


# -- disks and workers -----------------------------------------------------------------------------


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full (Linux) to make writes fail with ENOSPC")
def test_full_disk_names_the_checkpoint_and_keeps_the_logs(tmp_path, capsys):
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    for name in ("iter_00003.pt.tmp", "last.pt.tmp"):  # every write of a checkpoint lands on a full disk
        (run / "checkpoints" / name).symlink_to("/dev/full")
    assert main(["train", *TINY, f"log.root={tmp_path}", "log.name=run"]) == 1
    err = capsys.readouterr().err
    assert f"cannot write checkpoint {run / 'checkpoints' / 'iter_00003.pt'}: [Errno 28]" in err
    error = (run / "error.txt").read_text()
    assert "Errno 28" in error and "Traceback" in error
    assert len((run / "logs" / "scalars" / "time" / "iteration.csv").read_text().splitlines()) == 3


def test_parallel_pettingzoo_run_exits_soon_after_its_summary(tmp_path):
    args = [
        sys.executable,
        "-m",
        "marl_ppo.cli",
        "train",
        str(ROOT / "configs" / "simple_spread.yaml"),
        "env.parallel=true",
        "env.num_envs=2",
        "train.total_frames=100",
        "train.frames_per_batch=50",
        "train.minibatch_size=50",
        "train.num_epochs=1",
        "train.num_threads=1",
        "model.hidden=[16]",
        "log.eval_episodes=2",
        "log.progress=false",
        "log.plot=false",
        f"log.root={tmp_path}",
    ]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        lines = []
        for line in proc.stdout:  # the summary is the last thing printed
            lines.append(line)
            if line.startswith("}"):
                break
        summary_at = time.monotonic()
        proc.wait(timeout=30)
        assert time.monotonic() - summary_at < 10, "the process lingered after its summary"
    finally:
        proc.kill()
    assert proc.returncode == 0, proc.stderr.read()[-2000:]
    assert json.loads("".join(lines[lines.index("{\n") :]))["iteration"] == 2


def test_evaluations_do_not_change_the_training(straight, tmp_path):
    """Evaluating (and building the evaluation env, whose VMAS seeding reseeds torch) leaves the
    training's random streams alone: the same run without evaluations trains the same networks."""
    run = tmp_path / "run"
    Trainer(config("log.eval_every=0"), run_dir=run).fit()
    assert_same_state(straight, run)


def test_ctrl_c_to_the_process_group_with_env_workers(tmp_path):
    """A terminal's Ctrl-C reaches the env worker processes too (``env.parallel=true``): they ignore
    it, the main process checkpoints and shuts them down, and no process of the group is left."""
    run = tmp_path / "run"
    args = [
        sys.executable,
        "-m",
        "marl_ppo.cli",
        "train",
        str(ROOT / "configs" / "simple_spread.yaml"),
        "env.parallel=true",
        "env.num_envs=2",
        "train.total_frames=100000",
        "train.frames_per_batch=50",
        "train.minibatch_size=50",
        "train.num_epochs=1",
        "train.num_threads=1",
        "model.hidden=[16]",
        "log.eval_episodes=2",
        "log.checkpoint_every=1",
        "log.progress=false",
        "log.plot=false",
        f"log.root={tmp_path}",
        "log.name=run",
    ]
    proc = subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, start_new_session=True
    )  # its own process group, as under a terminal
    try:
        wait_for_iterations(run, 3, proc)
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 130, err[-2000:]
    assert "stopped by SIGINT at iteration" in err
    assert load_checkpoint(run / "checkpoints" / "last.pt")["iteration"] >= 3
    time.sleep(1)
    group = subprocess.run(["ps", "-eo", "pgid=,stat=,args="], capture_output=True, text=True).stdout.splitlines()
    left = [ln for ln in group if ln.split()[0] == str(proc.pid) and not ln.split()[1].startswith("Z")]
    assert not left, left


def test_recurrent_model_crash_then_resume_reproduces_the_uninterrupted_run(tmp_path, monkeypatch):
    """A GRU policy and critic with value normalisation: the stored hidden states restart with the
    episodes at the checkpoint, and the normaliser's statistics are checkpointed."""
    cfg = config("model.kind=gru", "model.rnn_hidden=8", "model.seq_len=5", "loss.value_norm=popart")
    assert_straight_equals_crash_then_resume(cfg, tmp_path, monkeypatch, 4, FPB)


def test_any_damaged_bytes_are_a_checkpoint_error(tmp_path):
    """Random bytes (seeded: the same 300 files every run) are refused as a corrupt checkpoint,
    whatever error they make torch's unpickler raise (IndexError, KeyError, ... not only
    UnpicklingError)."""
    import random

    from marl_ppo.run.checkpoints import CheckpointError, load_checkpoint

    gen = random.Random(0)
    path = tmp_path / "last.pt"
    for size in [1, 2, 8, 64, 1024] * 60:
        path.write_bytes(bytes(gen.getrandbits(8) for _ in range(size)))
        with pytest.raises(CheckpointError, match=str(path)):
            load_checkpoint(path)


def test_a_linear_entropy_schedule_resumes_exactly(tmp_path, monkeypatch):
    """The entropy coefficients of the iteration after a checkpoint are the uninterrupted run's."""
    cfg = load_config(overrides=[*TINY, "loss.entropy_coeff=0.1", "loss.entropy_schedule=linear"])
    assert_straight_equals_crash_then_resume(cfg, tmp_path, monkeypatch, 4, FPB)
