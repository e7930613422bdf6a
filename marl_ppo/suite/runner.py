"""Running a suite's jobs (:func:`run_suite`) with a launcher: ``local`` (one after another in this
process, or in worker processes: :mod:`marl_ppo.suite.local_launcher`), ``ray``
(:mod:`marl_ppo.suite.ray_launcher`) or ``slurm`` (:mod:`marl_ppo.suite.slurm_launcher`), and the
results. Each job runs through :func:`marl_ppo.suite.jobs.execute` wherever it is launched."""

from __future__ import annotations

import dataclasses
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Literal, Mapping, Optional, Sequence

import yaml

from marl_ppo.suite._files import JOB_FILE, RESULT_FILE, write_json
from marl_ppo.suite.jobs import RunResult, execute, execute_group, prepare
from marl_ppo.suite.local_launcher import run_in_processes
from marl_ppo.suite.marl_eval import to_marl_eval
from marl_ppo.suite.ray_launcher import check_ray, run_on_ray
from marl_ppo.suite.results import JSON_NAME, PLOT_NAME, REBUILD_HINT, Written, write_results
from marl_ppo.suite.slurm_launcher import check_slurm, run_on_slurm
from marl_ppo.suite.spec import Job, Suite, SuiteError, plan

__all__ = ["JSON_NAME", "PLOT_NAME", "LAUNCHERS", "SuiteResult", "run_suite", "write_suite_results"]
LAUNCHERS = ("local", "ray", "slurm")


@dataclass
class SuiteResult:
    """Every run's result, in suite order, and the files written (``None`` when nothing was)."""

    runs: list[RunResult]
    out: Path
    json_path: Optional[Path] = None
    plot_path: Optional[Path] = None
    report_path: Optional[Path] = None
    errors: dict[str, str] = dataclasses.field(default_factory=dict)  # results not written, and why

    @property
    def failed(self) -> list[RunResult]:
        return [r for r in self.runs if not r.ok]

    def table(self) -> str:
        rows = [f"{'run':<48} {'status':<8} {'time':>8}  error"]
        for r in self.runs:
            err = (r.error or "").splitlines()[0][:100] if r.error else ""
            rows.append(f"{r.job.label:<48} {r.status:<8} {r.seconds:>7.1f}s  {err}")
        return "\n".join(rows)


def _job_identity(job: Mapping[str, Any]) -> dict[str, Any]:
    """What makes two jobs the same run: everything but thread counts and the progress bar."""
    ident = {k: v for k, v in job.items() if k not in ("threads", "config_yaml", "score", "reference")}
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


def writable_folder(out_dir: Path) -> Path:
    """``out_dir``, created; refused in one line when it cannot be created or written to."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=out_dir).close()
    except OSError as err:
        raise SuiteError(
            f"cannot write the suite's results in {out_dir} ({err.strerror}): choose a writable folder with --out"
        ) from err
    return out_dir


def _run_jobs(
    jobs: list[Job],
    suite: Suite,
    launcher: str,
    out_dir: Path,
    echo: Callable[[str], None],
    *,
    ray_address: Optional[str],
    ray_shared: Optional[bool],
) -> list[RunResult]:
    """Runs ``jobs`` with ``launcher``; their results in job order."""
    if suite.vectorise_seeds:
        return _run_seed_groups(jobs, echo)
    if launcher in ("ray", "slurm"):
        for job in jobs:
            prepare(job)
        if launcher == "ray":
            return run_on_ray(jobs, out_dir, echo, address=ray_address, shared=ray_shared)
        return run_on_slurm(jobs, suite.slurm, out_dir, echo)
    if suite.workers > 1:  # worker processes, even for one run: the caller's process stays as it is
        return run_in_processes(jobs, suite.workers, echo)
    results = []
    for job in jobs:
        prepare(job)
        echo(f"start  {job.label}  ->  {job.run_dir}")
        res = execute(job)
        echo(f"{res.status:<6} {job.label}  ({res.seconds:.1f}s){'  ' + res.error if res.error else ''}")
        results.append(res)
    return results


def _run_seed_groups(jobs: list[Job], echo: Callable[[str], None]) -> list[RunResult]:
    """``vectorise_seeds``: each (task, variant)'s jobs, its seeds, as one group in this process."""
    groups: dict[tuple[str, str], list[Job]] = {}
    for job in jobs:
        groups.setdefault((job.task, job.variant), []).append(job)
    results: dict[str, RunResult] = {}
    for group in groups.values():
        for job in group:
            prepare(job)
        echo(f"start  {group[0].label.rpartition('/')[0]}  seeds {[j.seed for j in group]} in one process")
        for res in execute_group(group):
            results[res.job.run_dir] = res
            echo(f"{res.status:<6} {res.job.label}  ({res.seconds:.1f}s){'  ' + res.error if res.error else ''}")
    return [results[job.run_dir] for job in jobs]


def run_suite(
    suite: Suite | str | Path,
    *,
    workers: Optional[int] = None,
    out: str | Path | None = None,
    overrides: Sequence[str] = (),
    rerun: bool = False,
    plot: bool = True,
    ci: str = "auto",
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
    if suite.vectorise_seeds and launcher != "local":
        raise SuiteError(f"vectorise_seeds runs each task's seeds in one local process; launcher {launcher!r} is not")
    if launcher == "slurm":
        check_slurm(suite.slurm)
    elif launcher == "ray":
        check_ray()
    jobs = plan(suite, out=out, overrides=overrides, remote=launcher != "local")
    ranked = [j for j in jobs if j.ranks > 1]
    if ranked and launcher != "slurm":  # the slurm launcher starts a job's processes; the others run it in one
        raise SuiteError(
            f"{ranked[0].label}: train.ranks={ranked[0].ranks}: the {launcher} launcher runs each job in "
            "one process (the slurm launcher starts its ranks; or run it with marl-ppo train)"
        )
    if any(j.ranks % suite.slurm.nodes for j in ranked):
        raise SuiteError(f"train.ranks of {ranked[0].label} is not a multiple of slurm.nodes={suite.slurm.nodes}")
    out_dir = writable_folder(Path(out if out is not None else suite.out).resolve())
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
    for i, res in zip(
        todo,
        _run_jobs(
            [jobs[i] for i in todo], suite, launcher, out_dir, echo, ray_address=ray_address, ray_shared=ray_shared
        ),
    ):
        results[i] = res
    result = SuiteResult([r for r in results if r is not None], out_dir)
    written = write_suite_results(suite, jobs, [r.job.run_dir for r in result.runs if r.ok], out_dir, plot, ci)
    result.json_path, result.plot_path, result.report_path = written.json_path, written.plot_path, written.report_path
    result.errors = written.errors
    for what, why in written.errors.items():
        echo(f"not written: {what}: {why}; {REBUILD_HINT.format(out=out_dir)}")
    write_json(
        out_dir / "suite_summary.json",
        {
            "name": suite.name,
            "runs": [
                {
                    "run": r.job.label,
                    "run_dir": r.job.run_dir,
                    "status": r.status,
                    "error": r.error,
                    "seconds": round(r.seconds, 2),
                }
                for r in result.runs
            ],
            "marl_eval_json": str(result.json_path) if result.json_path else None,
            "plot": str(result.plot_path) if result.plot_path else None,
            "report": str(result.report_path) if result.report_path else None,
            "not_written": result.errors,
        },
    )
    return result


def write_suite_results(
    suite: Suite, jobs: Sequence[Job], ok_dirs: Sequence[str], out_dir: Path, plot: bool, ci: str
) -> Written:
    """The results of a suite's finished runs (:func:`~marl_ppo.suite.results.write_results`); a failure is
    recorded in the returned errors, never raised, so that a suite's finished runs are never lost with it."""
    if not ok_dirs:
        return Written()
    try:
        data = to_marl_eval(ok_dirs)
    except Exception as err:  # no marl_eval.json: the suite's next call (finished runs kept) builds it
        return Written(errors={JSON_NAME: f"{type(err).__name__}: {err}"})
    return write_results(
        data,
        out_dir,
        specs={f"{j.environment}/{j.task}": j.score for j in jobs if j.score},
        protocol=suite.protocol,
        references={f"{j.environment}/{j.task}": tuple(j.reference) for j in jobs if j.reference is not None},
        ci=ci,
        plot=plot,
        title=suite.name,
    )
