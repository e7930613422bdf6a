"""The ``slurm`` launcher: a suite's jobs as one ``submitit`` job array (``submitit.AutoExecutor``).

Resources come from the suite file's ``slurm:`` section (:class:`~marl_ppo.suite.spec.SlurmSpec`):
partition, time limit, CPUs (default: the suite's ``threads``), GPUs, memory, how many array jobs
at once, setup lines. SLURM jobs write their run directories straight into ``--out``, which must
be on storage that the compute nodes share (as submitit's own folder, ``<out>/slurm/``, must be).
``cluster: local`` runs the same array as local processes (submitit's ``LocalExecutor``), which is
how the tests run it. A failed array job is reported with its error; the others go on.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any, Callable

from marl_ppo.options import ConfigError, check_installed
from marl_ppo.suite.jobs import RunResult, execute, record_failure
from marl_ppo.suite.spec import Job, SlurmSpec, SuiteError

__all__ = ["run_on_slurm", "check_slurm", "executor_parameters"]


def _array_job(job_record: dict[str, Any]) -> dict[str, Any]:
    """One array job: runs the suite job on the compute node and returns its result. A job of ``train.ranks``
    > 1 is one of its ranks' tasks: submitit's environment exported as torch's (``RANK``, ``WORLD_SIZE``,
    ``LOCAL_RANK``, ``MASTER_ADDR``...), as ``torchrun`` would set it; rank 0's result is the job's."""
    import warnings

    warnings.filterwarnings("ignore", message="PettingZoo in TorchRL is tested")
    job = Job(**job_record)
    if job.ranks > 1:
        from submitit.helpers import TorchDistributedEnvironment

        TorchDistributedEnvironment().export(set_cuda_visible_devices=False)  # rank r takes cuda:LOCAL_RANK
    res = execute(job)
    return {"status": res.status, "error": res.error, "seconds": res.seconds}


def executor_parameters(spec: SlurmSpec, threads: int | None, ranks: int = 1) -> dict[str, Any]:
    """``AutoExecutor.update_parameters`` keywords for ``spec`` (``slurm_*`` ones are SLURM-only); a job of
    ``ranks`` > 1 processes runs ``ranks / spec.nodes`` tasks on each of ``spec.nodes`` machines."""
    params: dict[str, Any] = {
        "name": "marl-ppo-suite",
        "timeout_min": spec.time,
        "cpus_per_task": spec.cpus or threads or 1,
        "gpus_per_node": spec.gpus,
        "slurm_array_parallelism": spec.array_parallelism,
    }
    if ranks > 1:
        params.update(nodes=spec.nodes, tasks_per_node=ranks // spec.nodes)
    if spec.partition:
        params["slurm_partition"] = spec.partition
    if spec.mem_gb:
        params["mem_gb"] = spec.mem_gb
    if spec.setup:
        params["slurm_setup"] = list(spec.setup)
    return params


def check_slurm(spec: SlurmSpec) -> None:
    """Refuses, before any run directory is written, a launcher that cannot submit here."""
    try:
        check_installed(["--launcher slurm"])
    except ConfigError as err:
        raise SuiteError(str(err)) from None
    import submitit

    if spec.cluster == "slurm" and submitit.SlurmExecutor.affinity() <= 0:  # submitit's own test: srun on PATH
        raise SuiteError(
            "the slurm launcher found no SLURM here (no 'srun' on PATH): run the suite on a SLURM login "
            "node (a suite file's 'slurm: {cluster: local}' runs its job array as local processes)"
        )


def run_on_slurm(jobs: list[Job], spec: SlurmSpec, out_dir: Path, echo: Callable[[str], None]) -> list[RunResult]:
    """Submits ``jobs`` (already prepared in ``out_dir``) as one job array; their results in job order."""
    import submitit

    check_slurm(spec)
    if not jobs:
        return []
    t0 = time.perf_counter()
    array: list[Any] = [None] * len(jobs)
    for ranks in sorted({j.ranks for j in jobs}):  # one array per process count: ranks x nodes tasks a job
        executor = submitit.AutoExecutor(folder=out_dir / "slurm", cluster=spec.cluster)
        executor.update_parameters(**executor_parameters(spec, jobs[0].threads, ranks))
        index = [i for i, j in enumerate(jobs) if j.ranks == ranks]
        for i, sub in zip(index, executor.map_array(_array_job, [dataclasses.asdict(jobs[i]) for i in index])):
            array[i] = sub
        echo(f"{spec.cluster}: submitted a job array of {len(index)} ({array[index[0]].job_id.split('_')[0]})"
             + (f", {ranks} ranks each" if ranks > 1 else ""))  # fmt: skip
    results: list[RunResult] = []
    try:
        for job, sub in zip(jobs, array):
            try:
                rec = sub.results()[0]  # the first task's: rank 0's, for a job of several ranks
            except Exception as err:  # submitit.core.utils.FailedJobError and friends: the job died
                lines = str(err).strip().splitlines()
                res = record_failure(
                    job,
                    f"{type(err).__name__}: {lines[-1] if lines else ''} (log: {sub.paths.stderr})",
                    time.perf_counter() - t0,
                )
            else:
                res = RunResult(job, rec["status"], rec["error"], rec["seconds"])
            echo(f"{res.status:<6} {job.label}  ({res.seconds:.1f}s){'  ' + res.error if res.error else ''}")
            results.append(res)
    except BaseException:  # interrupted: cancel the rest of the array
        for sub in array[len(results) :]:
            sub.cancel(check=False)
        raise
    return results
