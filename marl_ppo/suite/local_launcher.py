"""The ``local`` launcher: a suite's jobs in worker processes of this machine, ``workers`` at a time.

Each job runs in its own ``python`` process (:func:`~marl_ppo.suite.jobs.worker_entry`), its output
in the run directory's log file; its result is read back from the run directory. (With one worker
the runner executes the jobs in its own process instead.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

from marl_ppo.suite._files import JOB_FILE, LOG_FILE, RESULT_FILE
from marl_ppo.suite.jobs import RunResult, prepare
from marl_ppo.suite.spec import Job

__all__ = ["run_in_processes"]


def _launch(job: Job) -> subprocess.Popen:
    env = dict(os.environ)
    if job.threads is not None:
        for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            env[var] = str(job.threads)
    root = str(Path(__file__).resolve().parents[2])  # marl_ppo importable whatever the cwd
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    log = open(Path(job.run_dir) / LOG_FILE, "w")
    code = f"from marl_ppo.suite.jobs import worker_entry; worker_entry({str(Path(job.run_dir) / JOB_FILE)!r})"
    try:
        return subprocess.Popen(
            [sys.executable, "-c", code], env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
    finally:
        log.close()


def _collect(job: Job, returncode: int, seconds: float) -> RunResult:
    try:
        rec = json.loads((Path(job.run_dir) / RESULT_FILE).read_text())
        return RunResult(job, rec["status"], rec.get("error"), rec.get("seconds", seconds))
    except (OSError, ValueError, KeyError):
        tail = ""
        log = Path(job.run_dir) / LOG_FILE
        if log.exists():
            tail = " | ".join(log.read_text(errors="replace").strip().splitlines()[-3:])
        return RunResult(job, "failed", f"worker process exited with code {returncode} and no result; {tail}", seconds)


def run_in_processes(jobs: list[Job], workers: int, echo: Callable[[str], None]) -> list[RunResult]:
    """Runs ``jobs`` in ``workers`` processes at once (each ``python -c`` :func:`~marl_ppo.suite.jobs.worker_entry`)."""
    pending = list(jobs)
    running: dict[subprocess.Popen, tuple[Job, float]] = {}
    results: dict[str, RunResult] = {}
    try:
        while pending or running:
            while pending and len(running) < workers:
                job = pending.pop(0)
                prepare(job)
                echo(f"start  {job.label}  ->  {job.run_dir}")
                running[_launch(job)] = (job, time.perf_counter())
            time.sleep(0.1)
            for proc in [p for p in running if p.poll() is not None]:
                job, t0 = running.pop(proc)
                res = _collect(job, proc.returncode, time.perf_counter() - t0)
                results[job.run_dir] = res
                echo(f"{res.status:<6} {job.label}  ({res.seconds:.1f}s){'  ' + res.error if res.error else ''}")
    finally:  # interrupted: stop our own workers
        for proc in running:
            proc.terminate()
        for proc in running:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
    return [results[j.run_dir] for j in jobs]
