"""One suite job, run where a launcher puts it: :func:`execute` trains it, evaluates it, records its result.

Every launcher (``local``, ``ray``, ``slurm``) runs a job through :func:`execute` and reads or
records its :class:`RunResult`; this module imports no launcher, so the launchers and the suite
runner import it and nothing imports back.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from marl_ppo.suite._files import ABSOLUTE_FILE, JOB_FILE, RESULT_FILE, write_json
from marl_ppo.suite.spec import Job

__all__ = ["RunResult", "prepare", "execute", "execute_seeds", "record_failure", "final_evaluation", "worker_entry"]


@dataclass
class RunResult:
    """How one run ended: ``ok``, ``failed`` (``error`` says why) or ``skipped`` (done before)."""

    job: Job
    status: str
    error: Optional[str] = None
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status in ("ok", "skipped")


def _set_threads(threads: Optional[int]) -> None:
    if threads is None:
        return
    import torch

    torch.set_num_threads(threads)
    try:
        torch.set_num_interop_threads(threads)
    except RuntimeError:  # only settable before any inter-op work
        pass


def final_evaluation(trainer, episodes: int) -> dict[str, list[float]]:
    """Deterministic evaluation of ``trainer``'s current policy over exactly ``episodes`` episodes.

    The run's own evaluation (:class:`~marl_ppo.run.evaluation.Evaluator`: the same envs, seed rule
    and episode count as ``marl-ppo eval RUN --episodes N``). Returns marl-eval metrics, one value per
    completed episode: ``<group>_return`` (mean over the group's agents) and ``return`` (mean over
    groups), as BenchMARL's logger computes them. If no episode ended, each list holds the return so far.
    """
    from marl_ppo.run.evaluation import Evaluator

    groups = list(trainer.parts.groups)
    evaluator = Evaluator(trainer.cfg, trainer.parts.policy, groups, episodes=episodes, env_fn=trainer.env_fn)
    try:
        result = evaluator()
    finally:
        evaluator.close()
    per_group = result.per_episode or {g: [r] for g, r in result.partial_returns.items()}
    metrics = {f"{g}_return": list(v) for g, v in per_group.items()}
    metrics["return"] = [sum(values) / len(values) for values in zip(*per_group.values())]
    return metrics


def execute(job: Job) -> RunResult:
    """Runs one job in this process; never raises for a failing run (records it instead)."""
    run_dir = Path(job.run_dir)
    t0 = time.perf_counter()
    status, error = "ok", None
    try:
        _set_threads(job.threads)
        from marl_ppo.config import from_yaml
        from marl_ppo.run.trainer import Trainer

        cfg = from_yaml(job.config_yaml)
        trainer = Trainer(cfg, run_dir=run_dir)
        trainer.fit()
        if job.absolute_episodes > 0:
            metrics = final_evaluation(trainer, job.absolute_episodes)
            write_json(
                run_dir / ABSOLUTE_FILE,
                {"frames": trainer.frames, "episodes": len(metrics["return"]), "metrics": metrics},
            )
    except Exception as err:  # a failing run is a result, not the end of the suite
        import traceback

        status, error = "failed", f"{type(err).__name__}: {err}"
        if not (run_dir / "error.txt").exists():
            run_dir.mkdir(parents=True, exist_ok=True)
            (run_dir / "error.txt").write_text(error + "\n\n" + traceback.format_exc())
    result = RunResult(job, status, error, time.perf_counter() - t0)
    write_json(run_dir / RESULT_FILE, {"status": status, "error": error, "seconds": result.seconds})
    return result


def execute_seeds(jobs: list[Job]) -> list[RunResult]:
    """Runs the jobs of one (task, variant), its seeds, in this process as one group (``vectorise_seeds``:
    :class:`~marl_ppo.run.seeds.SeedsTrainer`); each job's run directory and result as :func:`execute` writes
    them. Never raises for a failing group (each of its jobs records the failure)."""
    t0 = time.perf_counter()
    try:
        _set_threads(jobs[0].threads)
        from marl_ppo.config import from_yaml
        from marl_ppo.run.seeds import SeedsTrainer

        configs = [from_yaml(job.config_yaml) for job in jobs]
        group = SeedsTrainer(configs[0], configs=configs, run_dirs=[job.run_dir for job in jobs])
        group.fit()
        for job, trainer in zip(jobs, group.trainers):
            if job.absolute_episodes > 0:
                metrics = final_evaluation(trainer, job.absolute_episodes)
                write_json(
                    Path(job.run_dir) / ABSOLUTE_FILE,
                    {"frames": trainer.frames, "episodes": len(metrics["return"]), "metrics": metrics},
                )
    except Exception as err:  # a failing group is a result for each of its runs
        seconds = time.perf_counter() - t0
        return [record_failure(job, f"{type(err).__name__}: {err}", seconds) for job in jobs]
    seconds = time.perf_counter() - t0
    results = []
    for job in jobs:
        failed = (Path(job.run_dir) / "error.txt").exists()  # a seed whose loss went non-finite
        error = (Path(job.run_dir) / "error.txt").read_text().splitlines()[0] if failed else None
        write_json(
            Path(job.run_dir) / RESULT_FILE,
            {"status": "failed" if failed else "ok", "error": error, "seconds": seconds},
        )
        results.append(RunResult(job, "failed" if failed else "ok", error, seconds))
    return results


def record_failure(job: Job, error: str, seconds: float) -> RunResult:
    """A job that died without recording its result (a crashed worker, a killed array job): recorded here."""
    run_dir = Path(job.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    if not (run_dir / "error.txt").exists():
        (run_dir / "error.txt").write_text(error + "\n")
    write_json(run_dir / RESULT_FILE, {"status": "failed", "error": error, "seconds": seconds})
    return RunResult(job, "failed", error, seconds)


def worker_entry(job_file: str) -> None:
    """Entry point of a worker process: ``python -c "from marl_ppo.suite.jobs import worker_entry; ..."``."""
    job = Job(**json.loads(Path(job_file).read_text()))
    warnings.filterwarnings("ignore", message="PettingZoo in TorchRL is tested")
    result = execute(job)
    sys.exit(0 if result.ok else 1)


def prepare(job: Job) -> None:
    """A clean run directory for ``job`` holding its job file (a stale or failed run of ours is removed)."""
    run_dir = Path(job.run_dir)
    if run_dir.exists():  # a stale or failed run of ours: start clean (the CSV logs would append)
        shutil.rmtree(run_dir)
    write_json(run_dir / JOB_FILE, dataclasses.asdict(job))
