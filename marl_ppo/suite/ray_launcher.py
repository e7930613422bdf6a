"""The ``ray`` launcher: every job of a suite is a Ray task (``ray.remote``) on a Ray cluster.

The cluster is the one this process is already connected to, else the one at ``address`` (or the
``RAY_ADDRESS`` environment variable), else a local one that :func:`run_on_ray` starts and stops.
Each task asks for ``num_cpus`` = the job's torch threads. Ray schedules the tasks; we only submit
them and collect the results as they finish.

Run directories are the driver's (``--out``). Where the workers see that folder (shared storage:
always on one machine, an NFS mount on a cluster), a task writes its run directory there itself;
where they do not, it trains in a temporary folder of its node and sends back the run directory's
files (summary, logs, marl-eval data, errors: everything but ``checkpoints/``), which the driver
writes. Which case holds is tested per task (a token file the driver writes in ``--out``), or set
with ``shared=True/False``. A failed job (a raised error, a crashed worker) is reported with its
error; the others go on.
"""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Optional

from marl_ppo.options import ConfigError, check_installed
from marl_ppo.suite.jobs import RunResult, execute, record_failure
from marl_ppo.suite.spec import Job, SuiteError

__all__ = ["run_on_ray", "check_ray", "TOKEN_FILE"]

TOKEN_FILE = ".ray_shared_storage_token"


def _sees(path: str, token: str) -> bool:
    try:
        return Path(path).read_text() == token
    except OSError:
        return False


def _pack(run_dir: Path) -> dict[str, bytes]:
    """A run directory's files, by relative path, without ``checkpoints/`` (they stay on the node)."""
    return {
        str(p.relative_to(run_dir)): p.read_bytes()
        for p in sorted(run_dir.rglob("*"))
        if p.is_file() and p.relative_to(run_dir).parts[0] != "checkpoints"
    }


def _unpack(run_dir: Path, files: dict[str, bytes], worker_dir: str) -> None:
    for rel, data in files.items():
        path = run_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    summary = run_dir / "summary.json"
    if summary.exists():  # it names the node's temporary folder
        rec = json.loads(summary.read_text())
        if rec.get("run_dir") == worker_dir:
            rec["run_dir"] = str(run_dir)
            summary.write_text(json.dumps(rec, indent=2))


def _task(job_record: dict[str, Any], token_path: str, token: str, shared: Optional[bool]) -> dict[str, Any]:
    """Runs one job on a Ray worker; returns its result (and, without shared storage, its files)."""
    import socket
    import warnings

    warnings.filterwarnings("ignore", message="PettingZoo in TorchRL is tested")
    job = Job(**job_record)
    node = socket.gethostname()
    if shared if shared is not None else _sees(token_path, token):
        res = execute(job)
        return {"status": res.status, "error": res.error, "seconds": res.seconds, "node": node, "files": None}
    tmp = tempfile.mkdtemp(prefix="marl-ppo-job-")
    try:
        local = dataclasses.replace(job, run_dir=str(Path(tmp) / Path(job.run_dir).name))
        res = execute(local)
        return {
            "status": res.status,
            "error": res.error,
            "seconds": res.seconds,
            "node": node,
            "files": _pack(Path(local.run_dir)),
            "worker_dir": local.run_dir,
        }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def check_ray() -> None:
    """Refuses, before any run directory is written, the launcher where Ray cannot be imported (naming the
    extra that installs it)."""
    try:
        check_installed(["--launcher ray"])
    except ConfigError as err:
        raise SuiteError(str(err)) from None


def connect(address: Optional[str]) -> bool:
    """Connects to (or starts) a cluster unless already connected; True when we connected here."""
    check_ray()
    import ray

    if ray.is_initialized():
        return False
    address = address or os.environ.get("RAY_ADDRESS") or None
    ray.init(address=address, include_dashboard=False, log_to_driver=False)
    return True


def run_on_ray(
    jobs: list[Job],
    out_dir: Path,
    echo: Callable[[str], None],
    *,
    address: Optional[str] = None,
    shared: Optional[bool] = None,
) -> list[RunResult]:
    """Runs ``jobs`` (already prepared in ``out_dir``) as Ray tasks; their results in job order."""
    check_ray()
    import ray
    from ray.exceptions import RayError

    if not jobs:
        return []
    ours = connect(address)
    token, token_path = secrets.token_hex(16), out_dir / TOKEN_FILE
    token_path.write_text(token)
    remote = ray.remote(_task)
    started: dict[Any, tuple[Job, float]] = {}
    results: dict[str, RunResult] = {}
    pending: list = []
    try:
        echo(f"ray: {ray.cluster_resources().get('CPU', 0):g} CPUs in the cluster")
        for job in jobs:
            ref = remote.options(num_cpus=job.threads or 1, name=job.label, max_retries=0).remote(
                dataclasses.asdict(job), str(token_path), token, shared
            )
            started[ref] = (job, time.perf_counter())
            echo(f"submit {job.label}  ->  {job.run_dir}")
        pending = list(started)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            for ref in ready:
                job, t0 = started[ref]
                try:
                    rec = ray.get(ref)
                except RayError as err:  # the task itself died (a crashed worker, a raised error)
                    res = record_failure(
                        job, f"{type(err).__name__}: {str(err).strip().splitlines()[-1]}", time.perf_counter() - t0
                    )
                else:
                    if rec["files"] is not None:
                        _unpack(Path(job.run_dir), rec["files"], rec["worker_dir"])
                    res = RunResult(job, rec["status"], rec["error"], rec["seconds"])
                results[job.run_dir] = res
                echo(f"{res.status:<6} {job.label}  ({res.seconds:.1f}s){'  ' + res.error if res.error else ''}")
    finally:
        for ref in pending:  # interrupted: cancel what is left
            ray.cancel(ref, force=True)
        token_path.unlink(missing_ok=True)
        if ours:
            ray.shutdown()
    return [results[j.run_dir] for j in jobs]
