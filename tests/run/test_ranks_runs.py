"""One run on two processes (``train.ranks=2``) through the CLI, as a user starts it (torch's launcher).

* rank 0 owns the run: one directory, one ``config.yaml`` recording the ranks, logs written once with
  the global frame count, one summary on stdout;
* seeds compose with ranks (each rank holds the stack of seeds over its own copies);
* SIGTERM to rank 1 stops every rank at the same step with one checkpoint, and ``--resume`` (through
  ``train.ranks`` again) ends equal, bit for bit, to the uninterrupted run;
* SIGKILL of rank 1: the other rank ends within a bounded time, the launcher names the lost rank, and
  ``--resume`` finishes the run;
* what ranks cannot run with is refused in one line before any process starts.

The tests wait on events (a checkpoint file appears, a process exits), never on timings.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import torch

from marl_ppo.cli import main

pytestmark = pytest.mark.slow  # whole runs in several processes

FPB = 40  # per rank: 4 envs x 10 steps
TINY = [
    "env.num_envs=4",
    "env.max_steps=10",
    "env.kwargs.n_agents=2",
    f"train.frames_per_batch={FPB}",
    f"train.total_frames={6 * 2 * FPB}",  # 6 iterations of 2 ranks
    "train.num_epochs=2",
    "train.minibatch_size=20",
    "train.num_threads=1",
    "model.hidden=[16]",
    "loss.normalize_advantage=true",
    "log.checkpoint_every=1",
    "log.eval_every=3",
    "log.eval_episodes=2",
    "log.progress=false",
    "log.plot=false",
]


def _cli(*args: str, **popen) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "marl_ppo", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **popen)  # fmt: skip


def _finished(proc: subprocess.Popen, timeout: float = 600) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


def _train(*args: str) -> tuple[int, str, str]:
    return _finished(_cli("train", *args))


def _wait_for(path: Path, proc: subprocess.Popen) -> None:
    """Until ``path`` exists (the event), failing if the run ends first."""
    while not path.exists():
        if proc.poll() is not None:
            raise AssertionError(f"the run ended before {path} appeared: {proc.communicate()[1][-2000:]}")
        time.sleep(0.05)


def _rank(proc: subprocess.Popen, rank: int) -> psutil.Process:
    """The worker process of ``rank`` among ``proc``'s descendants (torch's launcher sets ``RANK``)."""
    while True:
        for child in psutil.Process(proc.pid).children(recursive=True):
            try:
                if child.environ().get("RANK") == str(rank) and "marl_ppo" in " ".join(child.cmdline()):
                    return child
            except psutil.Error:
                continue
        if proc.poll() is not None:
            raise AssertionError("the run ended before its ranks were found")
        time.sleep(0.05)


def _params(run_dir: Path) -> dict[str, torch.Tensor]:
    return torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)["router"]


def test_rank_0_writes_the_one_record_of_a_two_rank_run(tmp_path):
    code, out, err = _train(*TINY, "train.ranks=2", f"log.root={tmp_path}", "log.name=two")
    assert code == 0, err[-3000:]
    (run_dir,) = [d for d in tmp_path.iterdir()]
    assert "  ranks: 2" in (run_dir / "config.yaml").read_text().splitlines()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert (summary["iteration"], summary["frames"]) == (6, 6 * 2 * FPB)
    assert out.count("run directory:") == 1 and json.loads(out[out.rindex("\n{") :]) == summary  # rank 0 speaks
    notes = (run_dir / "run.log").read_text().splitlines()
    assert len([n for n in notes if "collector:" in n]) == 1 and "on each of 2 ranks" in notes[0]
    steps = [int(line.split(",")[0]) for line in (run_dir / "logs/scalars/train/loss.csv").read_text().split()]
    assert steps == [2 * FPB * i for i in range(1, 7)]  # once per iteration, the run's frames
    assert main(["eval", str(run_dir), "--episodes", "2"]) == 0  # a ranks run reads as any run
    assert main(["plot", str(run_dir)]) == 0
    assert main(["export", str(run_dir), "--format", "torchscript", "--out", str(tmp_path / "exported")]) == 0


def test_seeds_on_ranks_each_rank_holding_the_stack(tmp_path):
    code, out, err = _train(*TINY, "train.ranks=2", "train.seeds=[0,1]", f"log.root={tmp_path}", "log.name=g")
    assert code == 0, err[-3000:]
    runs = sorted(d for d in tmp_path.iterdir() if (d / "summary.json").exists())
    assert [d.name for d in runs] == ["g-seed0", "g-seed1"]
    for run_dir in runs:
        assert json.loads((run_dir / "summary.json").read_text())["frames"] == 6 * 2 * FPB
    first, second = (_params(d) for d in runs)
    assert any(not torch.equal(first[k], second[k]) for k in first)  # two seeds, not one twice


def test_sigterm_to_rank_1_stops_both_with_one_checkpoint_and_resume_is_exact(tmp_path):
    code, _, err = _train(*TINY, "train.ranks=2", f"log.root={tmp_path}", "log.name=whole")
    assert code == 0, err[-3000:]
    proc = _cli("train", *TINY, "train.ranks=2", f"log.root={tmp_path}", "log.name=cut")
    run_dir = tmp_path / "cut"
    _wait_for(run_dir / "checkpoints" / "iter_00002.pt", proc)
    _rank(proc, 1).send_signal(signal.SIGTERM)
    code, _, err = _finished(proc)
    assert code != 0
    error = (run_dir / "error.txt").read_text()
    assert "SIGTERM" in error and "--resume" in error, error
    stopped = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)["iteration"]
    assert 2 <= stopped < 6
    code, _, err = _train("--resume", str(run_dir))
    assert code == 0, err[-3000:]
    assert json.loads((run_dir / "summary.json").read_text())["frames"] == 6 * 2 * FPB
    whole, resumed = _params(tmp_path / "whole"), _params(run_dir)
    for key, value in whole.items():
        assert torch.equal(resumed[key], value), key


def test_sigkill_of_rank_1_ends_the_run_naming_it_and_resume_finishes(tmp_path):
    proc = _cli("train", *TINY, "train.ranks=2", f"log.root={tmp_path}", "log.name=killed")
    run_dir = tmp_path / "killed"
    _wait_for(run_dir / "checkpoints" / "iter_00002.pt", proc)
    _rank(proc, 1).send_signal(signal.SIGKILL)
    code, out, err = _finished(proc, timeout=180)  # bounded: no rank waits forever on the lost one
    assert code != 0
    assert "rank" in err and "-9" in err and "(local_rank: 1)" in err, err[-3000:]  # the launcher names it
    code, _, err = _train("--resume", str(run_dir))
    assert code == 0, err[-3000:]
    assert json.loads((run_dir / "summary.json").read_text())["frames"] == 6 * 2 * FPB


@pytest.mark.parametrize(
    "overrides, words",
    [
        (["train.collector.backend=process", "train.collector.num_collectors=2"], "train.collector.backend=process"),
        (["loss.algorithm=happo", "loss.happo.order=random"], "loss.happo.order=random"),
    ],
)
def test_what_ranks_cannot_run_is_refused_before_any_process_starts(overrides, words, tmp_path, capsys):
    assert main(["train", *TINY, "train.ranks=2", *overrides, f"log.root={tmp_path}"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0] and "train.ranks=2" in err[0], err
    assert not list(tmp_path.iterdir())
    assert "WORLD_SIZE" not in os.environ


@pytest.mark.parametrize(
    "overrides",
    [
        ["model.kind=gru", "model.seq_len=5", "train.minibatch_size=20"],  # recurrent
        [
            "loss.algorithm=happo",
            "loss.happo.order=fixed",
            "env.scenario=simple_tag",
            "env.kwargs={num_good_agents: 1, num_adversaries: 2}",
        ],  # fmt: skip  (a sequential update over two groups)
        ["model.hidden=[8]", "train.seeds=[3,4]", "loss.value_norm=running"],
        ["loss.value_norm=popart"],
    ],
    ids=["gru", "happo-two-groups", "seeds-value-norm", "popart"],
)
def test_ranks_compose_with_models_algorithms_and_seeds(overrides, tmp_path):
    tiny = [o for o in TINY if not o.startswith("env.kwargs")] if any("scenario" in o for o in overrides) else TINY
    code, _, err = _train(*tiny, "train.ranks=2", *overrides, f"log.root={tmp_path}", "log.name=c")
    assert code == 0, err[-3000:]
    summaries = [json.loads(p.read_text()) for p in tmp_path.glob("c*/summary.json")]
    assert summaries and all(s["frames"] == 6 * 2 * FPB for s in summaries)


def test_two_launchers_one_rendezvous_make_one_run(tmp_path):
    """Two "machines": two torch launchers on this one, one process each, meeting at one rendezvous endpoint."""
    import socket

    with socket.socket() as s:
        s.bind(("localhost", 0))
        port = s.getsockname()[1]
    node = [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc_per_node=1", "--rdzv-backend=c10d",
            f"--rdzv-endpoint=localhost:{port}", "--rdzv-id=two-nodes", "-m", "marl_ppo", "train", *TINY,
            f"log.root={tmp_path}", "log.name=nodes"]  # fmt: skip
    procs = [subprocess.Popen(node, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    for proc in procs:
        code, _, err = _finished(proc)
        assert code == 0, err[-3000:]
    run_dir = tmp_path / "nodes"
    assert "  ranks: 2" in (run_dir / "config.yaml").read_text().splitlines()
    assert json.loads((run_dir / "summary.json").read_text())["frames"] == 6 * 2 * FPB


def test_the_slurm_launcher_starts_a_ranks_jobs_processes_and_the_local_one_refuses_it(tmp_path):
    """submitit's tasks (its local cluster here: 2 processes of one job) with torch's environment exported."""
    from marl_ppo.suite import SlurmSpec, Suite, SuiteError, TaskSpec, run_suite

    suite = Suite(tasks=(TaskSpec(overrides=tuple(TINY)),), seeds=(0,)).replace(slurm=SlurmSpec(cluster="local"))
    with pytest.raises(SuiteError, match=r"train.ranks=2: the local launcher runs each job in one process"):
        run_suite(suite, out=tmp_path / "local", launcher="local", plot=False, overrides=["train.ranks=2"])
    assert not (tmp_path / "local").exists()
    lines: list[str] = []
    result = run_suite(suite, out=tmp_path / "slurm", launcher="slurm", plot=False, echo=lines.append,
                       overrides=["train.ranks=2"])  # fmt: skip
    assert [r.status for r in result.runs] == ["ok"], [r.error for r in result.runs]
    assert any("2 ranks each" in line for line in lines), lines
    run_dir = Path(result.runs[0].job.run_dir)
    assert "  ranks: 2" in (run_dir / "config.yaml").read_text().splitlines()
    assert json.loads((run_dir / "summary.json").read_text())["frames"] == 6 * 2 * FPB


def test_sigterm_to_the_command_stops_every_rank_with_a_checkpoint(tmp_path):
    proc = _cli("train", *TINY, "train.ranks=2", f"log.root={tmp_path}", "log.name=term")
    run_dir = tmp_path / "term"
    _wait_for(run_dir / "checkpoints" / "iter_00002.pt", proc)
    family = [_rank(proc, 0), _rank(proc, 1), *psutil.Process(proc.pid).children(recursive=True)]
    proc.send_signal(signal.SIGTERM)  # what kill and a scheduler send to the command a user started
    code, _, err = _finished(proc, timeout=180)
    assert code == 143, err[-3000:]  # the shell's code for SIGTERM, not the launcher's 1
    assert "Traceback" not in err and "SignalException" not in err, err[-3000:]  # the launcher's own, kept back
    assert sum("--resume" in line for line in err.splitlines()) == 1, err  # rank 0's one line
    assert "SIGTERM" in (run_dir / "error.txt").read_text()
    assert torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)["iteration"] >= 2
    left = [p for p in family if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert not left, left  # no rank or launcher left behind


def test_ctrl_c_to_the_commands_process_group_stops_every_rank_in_one_line_and_exits_130(tmp_path):
    proc = _cli("train", *TINY, "train.ranks=2", f"log.root={tmp_path}", "log.name=int", start_new_session=True)
    run_dir = tmp_path / "int"
    _wait_for(run_dir / "checkpoints" / "iter_00002.pt", proc)
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal sends to the foreground job on Ctrl-C
    code, _, err = _finished(proc, timeout=180)
    assert code == 130, err[-3000:]
    assert "Traceback" not in err and "SignalException" not in err, err[-3000:]
    assert "SIGINT" in (run_dir / "error.txt").read_text()
    assert torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)["iteration"] >= 2


def test_under_plain_torchrun_a_ranks_mismatch_is_said_once(tmp_path):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m", "marl_ppo",
           "train", *TINY, "train.ranks=3", f"log.root={tmp_path}"]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    said = [line for line in proc.stderr.splitlines() if "train.ranks=3, but torchrun started 2 processes" in line]
    assert len(said) == 1, proc.stderr[-3000:]
    assert not list(tmp_path.iterdir())  # before any rank started work
