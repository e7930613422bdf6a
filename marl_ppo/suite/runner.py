"""Running a suite's jobs (:func:`run_suite`) with a launcher: ``local`` (one after another in this
process, or in worker processes), ``ray`` (:mod:`marl_ppo.suite.ray_launcher`) or ``slurm``
(:mod:`marl_ppo.suite.slurm_launcher`); the final evaluation of each run (:func:`final_evaluation`),
and the results."""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Literal, Mapping, Optional, Sequence

import yaml

from marl_ppo.suite._files import ABSOLUTE_FILE, JOB_FILE, LOG_FILE, RESULT_FILE, write_json
from marl_ppo.suite.marl_eval import to_marl_eval, write_marl_eval
from marl_ppo.suite.plot import plot_suite
from marl_ppo.suite.spec import Job, Suite, SuiteError, plan

JSON_NAME, PLOT_NAME = "marl_eval.json", "returns.png"
LAUNCHERS = ("local", "ray", "slurm")


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


@dataclass
class SuiteResult:
    """Every run's result, in suite order, and the files written (``None`` when nothing was)."""

    runs: list[RunResult]
    out: Path
    json_path: Optional[Path] = None
    plot_path: Optional[Path] = None

    @property
    def failed(self) -> list[RunResult]:
        return [r for r in self.runs if not r.ok]

    def table(self) -> str:
        rows = [f"{'run':<48} {'status':<8} {'time':>8}  error"]
        for r in self.runs:
            err = (r.error or "").splitlines()[0][:100] if r.error else ""
            rows.append(f"{r.job.label:<48} {r.status:<8} {r.seconds:>7.1f}s  {err}")
        return "\n".join(rows)


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
    """Deterministic evaluation of ``trainer``'s current policy over about ``episodes`` episodes.

    Returns marl-eval metrics, one value per completed episode: ``<group>_return`` (mean over the
    group's agents) and ``return`` (mean over groups), as BenchMARL's logger computes them.
    """
    import torch
    from torchrl.envs import ExplorationType, set_exploration_type

    from marl_ppo.envs import make_env
    from marl_ppo.models.recurrent import prime_env, state_spec

    cfg = trainer.cfg
    groups = list(trainer.parts.groups)
    if cfg.env.kind == "vmas":
        n_envs, rounds = episodes, 1
    else:  # PettingZoo env copies step one by one: fewer copies, longer rollout
        n_envs = max(1, min(episodes, cfg.env.num_envs))
        rounds = -(-episodes // n_envs)
    env = prime_env(make_env(cfg.env, seed=cfg.train.seed + 30_000, num_envs=n_envs),
                    state_spec(trainer.parts.router.policy))
    try:
        with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
            td = env.rollout(cfg.env.max_steps * rounds, trainer.parts.router.policy, break_when_any_done=False)
    finally:
        env.close()
    nxt = td.get("next")
    done = nxt.get("done").squeeze(-1)
    per_group = {}
    for g in groups:
        ep = nxt.get((g, "episode_reward")).mean(dim=(-2, -1))
        per_group[g] = ep[done] if done.any() else ep[..., -1]  # no episode ended: the return so far
    metrics = {f"{g}_return": v.tolist() for g, v in per_group.items()}
    metrics["return"] = torch.stack(list(per_group.values())).mean(0).tolist()
    return metrics


def _execute(job: Job) -> RunResult:
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
            write_json(run_dir / ABSOLUTE_FILE, {"frames": trainer.frames, "episodes": len(metrics["return"]),
                                                  "metrics": metrics})
    except Exception as err:  # a failing run is a result, not the end of the suite
        import traceback

        status, error = "failed", f"{type(err).__name__}: {err}"
        if not (run_dir / "error.txt").exists():
            run_dir.mkdir(parents=True, exist_ok=True)
            (run_dir / "error.txt").write_text(error + "\n\n" + traceback.format_exc())
    result = RunResult(job, status, error, time.perf_counter() - t0)
    write_json(run_dir / RESULT_FILE, {"status": status, "error": error, "seconds": result.seconds})
    return result


def record_failure(job: Job, error: str, seconds: float) -> RunResult:
    """A job that died without recording its result (a crashed worker, a killed array job): recorded here."""
    run_dir = Path(job.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    if not (run_dir / "error.txt").exists():
        (run_dir / "error.txt").write_text(error + "\n")
    write_json(run_dir / RESULT_FILE, {"status": "failed", "error": error, "seconds": seconds})
    return RunResult(job, "failed", error, seconds)


def _worker_entry(job_file: str) -> None:
    """Entry point of a worker process: ``python -c "from marl_ppo.suite.runner import _worker_entry; ..."``."""
    job = Job(**json.loads(Path(job_file).read_text()))
    warnings.filterwarnings("ignore", message="PettingZoo in TorchRL is tested")
    result = _execute(job)
    sys.exit(0 if result.ok else 1)


def _job_identity(job: Mapping[str, Any]) -> dict[str, Any]:
    """What makes two jobs the same run: everything but thread counts and the progress bar."""
    ident = {k: v for k, v in job.items() if k not in ("threads", "config_yaml")}
    cfg = yaml.safe_load(job["config_yaml"])
    cfg.get("log", {}).pop("progress", None)
    ident["config"] = cfg
    return ident


def _already_done(job: Job) -> bool:
    run_dir = Path(job.run_dir)
    try:
        done = json.loads((run_dir / RESULT_FILE).read_text())["status"] == "ok"
        same = _job_identity(json.loads((run_dir / JOB_FILE).read_text())) == _job_identity(dataclasses.asdict(job))
    except (OSError, ValueError, KeyError, yaml.YAMLError):
        return False
    return done and same


def _prepare(job: Job) -> None:
    run_dir = Path(job.run_dir)
    if run_dir.exists():  # a stale or failed run of ours: start clean (the CSV logs would append)
        shutil.rmtree(run_dir)
    write_json(run_dir / JOB_FILE, dataclasses.asdict(job))


def _launch(job: Job) -> subprocess.Popen:
    env = dict(os.environ)
    if job.threads is not None:
        for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            env[var] = str(job.threads)
    root = str(Path(__file__).resolve().parents[2])  # marl_ppo importable whatever the cwd
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    log = open(Path(job.run_dir) / LOG_FILE, "w")
    code = f"from marl_ppo.suite.runner import _worker_entry; _worker_entry({str(Path(job.run_dir) / JOB_FILE)!r})"
    try:
        return subprocess.Popen([sys.executable, "-c", code], env=env, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
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


def _run_parallel(jobs: list[Job], workers: int, echo: Callable[[str], None]) -> list[RunResult]:
    pending = list(jobs)
    running: dict[subprocess.Popen, tuple[Job, float]] = {}
    results: dict[str, RunResult] = {}
    try:
        while pending or running:
            while pending and len(running) < workers:
                job = pending.pop(0)
                _prepare(job)
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


def _run_jobs(jobs: list[Job], suite: Suite, launcher: str, out_dir: Path, echo: Callable[[str], None], *,
              ray_address: Optional[str], ray_shared: Optional[bool]) -> list[RunResult]:
    """Runs ``jobs`` with ``launcher``; their results in job order."""
    if launcher in ("ray", "slurm"):
        for job in jobs:
            _prepare(job)
        if launcher == "ray":
            from marl_ppo.suite.ray_launcher import run_on_ray

            return run_on_ray(jobs, out_dir, echo, address=ray_address, shared=ray_shared)
        from marl_ppo.suite.slurm_launcher import run_on_slurm

        return run_on_slurm(jobs, suite.slurm, out_dir, echo)
    if suite.workers > 1:  # worker processes, even for one run: the caller's process stays as it is
        return _run_parallel(jobs, suite.workers, echo)
    results = []
    for job in jobs:
        _prepare(job)
        echo(f"start  {job.label}  ->  {job.run_dir}")
        res = _execute(job)
        echo(f"{res.status:<6} {job.label}  ({res.seconds:.1f}s){'  ' + res.error if res.error else ''}")
        results.append(res)
    return results


def run_suite(
    suite: Suite | str | Path,
    *,
    workers: Optional[int] = None,
    out: str | Path | None = None,
    overrides: Sequence[str] = (),
    rerun: bool = False,
    plot: bool = True,
    ci: str = "t",
    echo: Callable[[str], None] = print,
    launcher: Literal["local", "ray", "slurm"] = "local",
    ray_address: Optional[str] = None,
    ray_shared: Optional[bool] = None,
) -> SuiteResult:
    """Runs every (task, variant, seed) of ``suite``, then writes ``marl_eval.json`` and ``returns.png`` in ``out``.

    ``launcher="local"``: ``workers`` (default: the suite's) processes run at once; with 1 the runs
    go one after another in this process. ``"ray"``: every run is a Ray task on the cluster at
    ``ray_address`` / ``RAY_ADDRESS`` (or a local one started and stopped here); ``ray_shared``
    says whether its workers see ``out`` (``None``: tested). ``"slurm"``: one submitit job array
    with the suite's ``slurm:`` resources. A failing run is recorded in the result (and its run
    directory) and the others go on; a run that finished before is kept unless ``rerun``.
    ``overrides`` apply to every run, after the suite's, the tasks' and the sweep's.
    """
    if launcher not in LAUNCHERS:
        raise SuiteError(f"launcher must be one of {list(LAUNCHERS)}, got {launcher!r}")
    if not isinstance(suite, Suite):
        suite = Suite.load(suite)
    if workers is not None:
        suite = suite.replace(workers=workers)
    jobs = plan(suite, out=out, overrides=overrides, remote=launcher != "local")
    out_dir = Path(out if out is not None else suite.out).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    results: list[Optional[RunResult]] = [None] * len(jobs)
    todo = []
    for i, job in enumerate(jobs):
        if not rerun and _already_done(job):
            results[i] = RunResult(job, "skipped")
            echo(f"done before, kept: {job.label}")
        else:
            todo.append(i)
    how = f"{suite.workers} worker(s)" if launcher == "local" else f"launcher {launcher}"
    echo(f"suite {suite.name or ''}: {len(jobs)} runs ({len(todo)} to run), {how}, out {out_dir}")
    for i, res in zip(todo, _run_jobs([jobs[i] for i in todo], suite, launcher, out_dir, echo,
                                      ray_address=ray_address, ray_shared=ray_shared)):
        results[i] = res
    result = SuiteResult([r for r in results if r is not None], out_dir)
    ok_dirs = [r.job.run_dir for r in result.runs if r.ok]
    if ok_dirs:
        result.json_path = write_marl_eval(to_marl_eval(ok_dirs), out_dir / JSON_NAME)  # validated
        if plot:
            result.plot_path = plot_suite(result.json_path, out_dir / PLOT_NAME, ci=ci, title=suite.name)
    write_json(out_dir / "suite_summary.json", {
        "name": suite.name,
        "runs": [{"run": r.job.label, "run_dir": r.job.run_dir, "status": r.status, "error": r.error,
                  "seconds": round(r.seconds, 2)} for r in result.runs],
        "marl_eval_json": str(result.json_path) if result.json_path else None,
        "plot": str(result.plot_path) if result.plot_path else None,
    })
    return result

