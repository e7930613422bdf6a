"""A run directory is claimed atomically: of runs that planned one name at the same moment, exactly one gets it,
and the others take the next free name (an explicit directory: refused).

The races are real: the claimers are separate processes held at a barrier (a ``multiprocessing.Barrier``, or
files for two ``marl-ppo train`` commands) right before their claim, then released together.
"""

from __future__ import annotations

import json
import multiprocessing
import subprocess
import sys
from pathlib import Path

from marl_ppo.config import load_config
from marl_ppo.run.directory import claim_run_directory, run_directory

ROOT = Path(__file__).resolve().parents[2]
CLAIMERS = 4

# two `marl-ppo train` held before their claim (after planning their directory) until both got there: the files
# are the event they wait on, not a time; the deadline only turns a hang into an error
SYNCHRONISED_TRAIN = """
import os, sys, time
from pathlib import Path

import marl_ppo.run.record as record

barrier, claim = Path(sys.argv[1]), record.claim_run_directory


def synchronised(*args, **kwargs):
    (barrier / f"ready-{os.getpid()}").touch()
    deadline = time.monotonic() + 600
    while len(list(barrier.glob("ready-*"))) < 2:
        if time.monotonic() > deadline:
            raise TimeoutError("the other run never reached its claim")
        time.sleep(0.01)
    return claim(*args, **kwargs)


record.claim_run_directory = synchronised
from marl_ppo.cli import main

sys.exit(main(sys.argv[2:]))
"""


def _claim(barrier, results, cfg, planned: Path, index: int) -> None:
    """One claimer: waits for all, then claims ``planned`` writing its own config text; reports what it got."""
    barrier.wait(timeout=120)
    try:
        results.put((index, str(claim_run_directory(cfg, planned, f"writer {index}\n"))))
    except FileExistsError as err:
        results.put((index, f"refused: {err}"))


def _race(cfg, planned: Path) -> dict[int, str]:
    """:data:`CLAIMERS` processes claim ``planned`` at once; what each got."""
    ctx = multiprocessing.get_context("fork")  # the children only touch files: no torch threads in play
    barrier, results = ctx.Barrier(CLAIMERS), ctx.Queue()
    procs = [ctx.Process(target=_claim, args=(barrier, results, cfg, planned, i)) for i in range(CLAIMERS)]
    for p in procs:
        p.start()
    got = dict(results.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0, f"a claimer died with exit code {p.exitcode}"
    return got


def test_runs_claiming_one_default_name_together_each_get_their_own(tmp_path):
    cfg = load_config(overrides=[f"log.root={tmp_path}"])
    planned = run_directory(cfg, None, resume=False)  # what every one of them planned: nothing exists yet
    assert planned == tmp_path / "navigation-mappo-seed0" and not planned.exists()
    got = _race(cfg, planned)
    names = [planned.name] + [f"{planned.name}-{n}" for n in range(2, CLAIMERS + 1)]
    assert sorted(got.values()) == sorted(str(tmp_path / n) for n in names), got
    for index, path in got.items():  # each directory holds the config of the run that claimed it, whole
        assert (Path(path) / "config.yaml").read_text() == f"writer {index}\n"


def test_runs_claiming_one_explicit_directory_together_one_gets_it_and_the_others_are_refused(tmp_path):
    cfg = load_config(overrides=[f"log.root={tmp_path}"])
    planned = run_directory(cfg, tmp_path / "mine", resume=False)
    got = _race(cfg, planned)
    winners = [i for i, what in got.items() if what == str(planned)]
    assert len(winners) == 1, got
    refused = [what for what in got.values() if what != str(planned)]
    assert refused == [f"refused: {planned} already holds a run; resume it (marl-ppo train --resume {planned}) "
                       "or choose another directory"] * (CLAIMERS - 1)  # fmt: skip
    assert (planned / "config.yaml").read_text() == f"writer {winners[0]}\n"


def test_two_trains_started_together_write_two_directories_each_its_own_rows_once(tiny_config, tmp_path):
    """Two ``marl-ppo train`` of one config, held together right before their claim (both planned
    ``navigation-mappo-seed0``): two directories, each with its own config, checkpoints and every row once."""
    from tests.run.test_recovery import assert_each_step_once

    barrier = tmp_path / "barrier"
    barrier.mkdir()
    args = [*tiny_config.overrides, f"log.root={tmp_path / 'runs'}"]
    cmd = [sys.executable, "-c", SYNCHRONISED_TRAIN, str(barrier), "train", *args]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT) for _ in "ab"]
    outs = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=540)
            assert proc.returncode == 0, err[-3000:]
            outs.append(out)
    finally:
        for proc in procs:
            proc.kill()
    assert len(list(barrier.glob("ready-*"))) == 2  # both really waited for each other before claiming
    dirs = [next(line for line in out.splitlines() if line.startswith("run directory: ")) for out in outs]
    dirs = [Path(line.removeprefix("run directory: ")) for line in dirs]
    base = tmp_path / "runs" / "navigation-mappo-seed0"
    assert sorted(dirs) == [base, base.with_name(f"{base.name}-2")], dirs
    steps = [tiny_config.fpb * i for i in (1, 2)]
    for run_dir, out in zip(dirs, outs):
        assert json.loads(out[out.index("\n{") + 1 :])["run_dir"] == str(run_dir)
        assert json.loads((run_dir / "summary.json").read_text())["run_dir"] == str(run_dir)
        assert sorted(p.name for p in (run_dir / "checkpoints").glob("iter_*.pt")) == ["iter_00001.pt", "iter_00002.pt"]
        assert_each_step_once(run_dir, steps)
        iterations = (run_dir / "logs" / "scalars" / "time" / "iteration.csv").read_text().splitlines()
        assert [int(float(line.split(",")[0])) for line in iterations] == steps
