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

__all__ = ["RunResult", "prepare", "execute", "execute_group", "record_failure", "final_evaluation", "worker_entry"]


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


def final_evaluation(trainer, episodes: int, seed: int = 0) -> dict[str, list[float]]:
    """Deterministic evaluation of ``trainer``'s current policy (of its seed index ``seed``) over exactly
    ``episodes`` episodes.

    The run's own evaluation (:class:`~marl_ppo.run.evaluation.Evaluator`: the same envs, seed rule
    and episode count as ``marl-ppo eval RUN --episodes N``). Returns marl-eval metrics, one value per
    completed episode: ``<group>_return`` (mean over the group's agents) and ``return`` (mean over
    groups), as BenchMARL's logger computes them, and with ``log.eval_opponents`` each match's
    ``vs_<source>/<seat>/{win_rate,draw_rate,loss_rate,return}`` (1 or 0 per episode for the rates).
    If no episode ended, each list holds the return so far.
    """
    from marl_ppo.run.evaluation import Evaluator

    groups, cfg = list(trainer.parts.groups), trainer.records[seed].cfg
    evaluator = Evaluator(cfg, trainer.parts.policy, groups, episodes=episodes, env_fn=trainer.env_fn)
    try:
        with trainer.state.stack.seed(seed):
            result = evaluator()
            played = _matches(trainer, cfg, evaluator)
    finally:
        evaluator.close()
    per_group = result.per_episode or {g: [r] for g, r in result.partial_returns.items()}
    metrics = {f"{g}_return": list(v) for g, v in per_group.items()}
    metrics["return"] = [sum(values) / len(values) for values in zip(*per_group.values())]
    return {**metrics, **played}


def _matches(trainer, cfg, evaluator) -> dict[str, list[float]]:
    """``log.eval_opponents``' matches over the evaluator's episodes, one value per episode, named as
    :func:`~marl_ppo.suite.marl_eval.run_to_marl_eval` names the logged ones."""
    if not cfg.log.eval_opponents:
        return {}
    from marl_ppo.opponents import count_outcomes, source_label
    from marl_ppo.run.matches import Matches

    out = {}
    for (text, seat), (result, _) in Matches(cfg, trainer.parts, cfg.log.eval_opponents, evaluator)().items():
        if not result.episodes:
            continue
        per = result.per_episode
        each = [count_outcomes({g: [v[i]] for g, v in per.items()}, seat) for i in range(len(per[seat]))]
        prefix = f"vs_{source_label(text)}/{seat}"
        out[f"{prefix}/win_rate"] = [float(o.wins) for o in each]
        out[f"{prefix}/draw_rate"] = [float(o.draws) for o in each]
        out[f"{prefix}/loss_rate"] = [float(o.losses) for o in each]
        out[f"{prefix}/return"] = [float(r) for r in per[seat]]
    return out


def execute(job: Job) -> RunResult:
    """Runs one job in this process; never raises for a failing run (records it instead)."""
    return execute_group([job])[0]


def execute_group(jobs: list[Job]) -> list[RunResult]:
    """Runs ``jobs``, the seeds of one (task, variant) (one job, or ``vectorise_seeds``' group), in this
    process through one :class:`~marl_ppo.run.trainer.Trainer`; each job's run directory, final evaluation
    and result. Never raises for a failing run (each of its jobs records the failure, with ``error.txt``)."""
    t0 = time.perf_counter()
    try:
        _set_threads(jobs[0].threads)
        from marl_ppo.config import from_yaml
        from marl_ppo.run.trainer import Trainer

        configs = [from_yaml(job.config_yaml) for job in jobs]
        trainer = Trainer(configs[0], configs=configs, run_dirs=[Path(job.run_dir) for job in jobs])
        trainer.fit()
        if not trainer.ranks.main:  # train.ranks: rank 0 evaluates and records the job
            return [RunResult(job, "ok", None, time.perf_counter() - t0) for job in jobs]
        for s, job in enumerate(jobs):
            if job.absolute_episodes > 0 and not trainer.records[s].failed:
                metrics = final_evaluation(trainer, job.absolute_episodes, seed=s)
                write_json(
                    Path(job.run_dir) / ABSOLUTE_FILE,
                    {"frames": trainer.frames, "episodes": len(metrics["return"]), "metrics": metrics},
                )
    except Exception as err:  # a failing run is a result, not the end of the suite
        import traceback

        error, seconds = f"{type(err).__name__}: {err}", time.perf_counter() - t0
        for job in jobs:
            run_dir = Path(job.run_dir)
            if not (run_dir / "error.txt").exists():
                run_dir.mkdir(parents=True, exist_ok=True)
                (run_dir / "error.txt").write_text(error + "\n\n" + traceback.format_exc())
        return [_result(job, "failed", error, seconds) for job in jobs]
    seconds = time.perf_counter() - t0
    results = []
    for job in jobs:
        failed = Path(job.run_dir, "error.txt").exists()  # a seed whose loss went non-finite
        error = Path(job.run_dir, "error.txt").read_text().splitlines()[0] if failed else None
        results.append(_result(job, "failed" if failed else "ok", error, seconds))
    return results


def _result(job: Job, status: str, error: str | None, seconds: float) -> RunResult:
    write_json(Path(job.run_dir) / RESULT_FILE, {"status": status, "error": error, "seconds": seconds})
    return RunResult(job, status, error, seconds)


def record_failure(job: Job, error: str, seconds: float) -> RunResult:
    """A job that died without recording its result (a crashed worker, a killed array job): recorded here."""
    run_dir = Path(job.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    if not (run_dir / "error.txt").exists():
        (run_dir / "error.txt").write_text(error + "\n")
    return _result(job, "failed", error, seconds)


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
