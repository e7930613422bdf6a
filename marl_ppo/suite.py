"""Benchmark suites: tasks × seeds, run one after another or in parallel processes, with results in
the marl-eval JSON format (the one BenchMARL writes) and an aggregate plot.

A suite is a YAML file::

    name: vmas_small                    # optional, for titles
    tasks:                              # each: a train config file, or a mapping
      - ../navigation.yaml              #   paths are relative to the suite file (then to the cwd)
      - config: ../balance.yaml
        name: balance                   #   task name in the results (default: env.scenario)
        overrides: [env.kwargs.n_agents=3]
    seeds: [0, 1, 2]
    overrides:                          # for every run: a list of key=value, or a mapping
      - train.total_frames=60000
    workers: 2                          # processes at once (1: one after another, in this process)
    out: runs/suites/vmas_small         # relative to the cwd
    threads: 1                          # torch threads per worker process (default 1 when workers > 1)
    absolute_eval_factor: 10            # final evaluation over factor × log.eval_episodes episodes

Overrides apply in this order: the task's config file, the suite's ``overrides``, the task's
``overrides``, then the command line's ``--override``; ``train.seed`` comes from ``seeds``.
Unknown keys (in the suite or in a task) raise :class:`SuiteError` naming the key and the allowed ones;
config keys are checked by :func:`marl_ppo.config.load_config` before anything runs.

Run it::

    python -m marl_ppo.suite configs/suites/vmas_small.yaml [--workers N] [--out DIR] [--override k=v ...]
    python examples/benchmarks/suite.py configs/suites/tiny.yaml --workers 2 --out /tmp/tiny

Each run gets its own run directory ``<out>/runs/<task>-<algorithm>-seed<N>/`` (the trainer's usual
contents plus ``suite_job.json``, ``suite_result.json``, ``absolute_metrics.json`` and, for worker
processes, ``worker.log``). A failing run is reported (its ``error.txt`` and the summary table) and
the other runs go on. A run directory whose ``suite_result.json`` says ``ok`` for the same job is
kept, not run again (``--rerun`` forces it). At the end the suite writes:

* ``<out>/marl_eval.json`` (:func:`to_marl_eval`), checked by :func:`validate_marl_eval`::

      {environment: {task: {algorithm: {"seed_<N>": {
          "step_<K>": {"step_count": <frames>, "return": [...], "<group>_return": [...]},
          ...,
          "absolute_metrics": {"return": [...], "<group>_return": [...]}}}}}}

  as BenchMARL's ``JsonWriter`` (``benchmarl/experiment/logger.py``) and marl-eval's README lay it
  out: environment ``vmas``/``pettingzoo``, task the scenario, algorithm ``mappo``/``ippo``/
  ``clip_ppo``, run ``seed_<N>``; ``step_<K>`` is the K-th evaluation (1-based, in frame order);
  ``<group>_return`` is the group's evaluation return (mean over its agents) and ``return`` the
  mean over groups. The per-step lists hold one value, the mean over ``log.eval_episodes`` episodes,
  because that is what the trainer logs (marl-eval accepts one element or one per episode).
  ``absolute_metrics`` is a final deterministic evaluation of the final policy over
  ``absolute_eval_factor × log.eval_episodes`` episodes, one value per episode (marl-eval's
  "10 times the evaluation episodes"); BenchMARL instead keeps the best value seen (one element).
* ``<out>/returns.png`` (:func:`plot_suite`): one panel per task, mean evaluation return vs frames
  over seeds with a 95% Student-t band (``--ci bootstrap`` for a bootstrap band).

``to_marl_eval`` also reads plain ``marl-ppo train`` run directories (names from ``config.yaml``).
"""
from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
import math
import os
import shutil
import subprocess
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence

import yaml

__all__ = [
    "SuiteError",
    "TaskSpec",
    "Suite",
    "Job",
    "RunResult",
    "SuiteResult",
    "plan",
    "run_suite",
    "final_evaluation",
    "run_to_marl_eval",
    "to_marl_eval",
    "write_marl_eval",
    "validate_marl_eval",
    "plot_suite",
    "main",
]

SUITE_KEYS = ("name", "tasks", "seeds", "overrides", "workers", "out", "threads", "absolute_eval_factor")
TASK_KEYS = ("config", "name", "overrides")
JOB_FILE, RESULT_FILE, ABSOLUTE_FILE, LOG_FILE = "suite_job.json", "suite_result.json", "absolute_metrics.json", "worker.log"
JSON_NAME, PLOT_NAME = "marl_eval.json", "returns.png"


class SuiteError(ValueError):
    """A suite file or suite argument that cannot run: an unknown key, a bad value, a missing file."""


# -- the suite spec ----------------------------------------------------------------------------------


def _check_keys(where: str, given: Iterable[str], allowed: Sequence[str]) -> None:
    for key in given:
        if key not in allowed:
            close = difflib.get_close_matches(str(key), allowed, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise SuiteError(f"unknown key {key!r} in {where}; {hint}allowed keys: {', '.join(allowed)}")


def _as_overrides(value: Any, where: str) -> list[str]:
    """``[k=v, ...]`` or a mapping ``{k: v}`` (dotted keys, nested mappings flattened) as ``k=v`` strings."""
    if value is None:
        return []
    if isinstance(value, str):
        value = [value]
    if isinstance(value, Mapping):
        out: list[str] = []

        def flat(prefix: str, v: Any) -> None:
            if isinstance(v, Mapping) and v:
                for k, sub in v.items():
                    flat(f"{prefix}.{k}" if prefix else str(k), sub)
            else:
                out.append(f"{prefix}={v if isinstance(v, str) else json.dumps(v)}")

        flat("", value)
        return out
    if isinstance(value, (list, tuple)):
        bad = [v for v in value if not isinstance(v, str) or "=" not in v]
        if bad:
            raise SuiteError(f"{where} must be key=value strings, got {bad}")
        return list(value)
    raise SuiteError(f"{where} must be a list of key=value strings or a mapping, got {type(value).__name__}")


@dataclass(frozen=True)
class TaskSpec:
    """One task of a suite: a train config file, its own overrides, and the task name in the results."""

    config: Optional[str] = None
    overrides: tuple[str, ...] = ()
    name: Optional[str] = None

    @classmethod
    def parse(cls, raw: Any, where: str, base: Optional[Path]) -> "TaskSpec":
        if isinstance(raw, str):
            raw = {"config": raw}
        if not isinstance(raw, Mapping):
            raise SuiteError(f"{where} must be a config path or a mapping with keys {', '.join(TASK_KEYS)}; got {raw!r}")
        _check_keys(where, raw, TASK_KEYS)
        config = raw.get("config")
        if config is not None:
            config = str(_resolve(str(config), base, where))
        name = raw.get("name")
        if name is not None and (not isinstance(name, str) or not name or "," in name or "/" in name):
            raise SuiteError(f"{where}.name must be a non-empty string without ',' or '/', got {name!r}")
        return cls(config, tuple(_as_overrides(raw.get("overrides"), f"{where}.overrides")), name)


def _resolve(path: str, base: Optional[Path], where: str) -> Path:
    p = Path(path).expanduser()
    if p.is_absolute():
        candidates = [p]
    else:
        candidates = ([base / p] if base is not None else []) + [Path.cwd() / p]
    for c in candidates:
        if c.exists():
            return c.resolve()
    raise SuiteError(f"{where}: config file {path!r} not found (tried {', '.join(str(c) for c in candidates)})")


@dataclass(frozen=True)
class Suite:
    """A benchmark suite: tasks × seeds, common overrides, how many worker processes, where to write."""

    tasks: tuple[TaskSpec, ...]
    seeds: tuple[int, ...] = (0,)
    overrides: tuple[str, ...] = ()
    workers: int = 1
    out: str = "runs/suite"
    name: Optional[str] = None
    threads: Optional[int] = None
    absolute_eval_factor: int = 10

    def __post_init__(self) -> None:
        if not self.tasks:
            raise SuiteError("a suite needs at least one task")
        if not self.seeds or not all(isinstance(s, int) and not isinstance(s, bool) for s in self.seeds):
            raise SuiteError(f"seeds must be a non-empty list of integers, got {list(self.seeds)}")
        if len(set(self.seeds)) != len(self.seeds):
            raise SuiteError(f"seeds must be distinct, got {list(self.seeds)}")
        for key in ("workers", "absolute_eval_factor") + (("threads",) if self.threads is not None else ()):
            value = getattr(self, key)
            low = 0 if key == "absolute_eval_factor" else 1
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise SuiteError(f"{key} must be an integer >= {low}, got {value!r}")

    @classmethod
    def from_dict(cls, raw: Any, base: Optional[Path] = None, source: str = "suite") -> "Suite":
        """A suite from its YAML mapping; relative task config paths resolve against ``base``."""
        if not isinstance(raw, Mapping):
            raise SuiteError(f"{source} must be a mapping with keys {', '.join(SUITE_KEYS)}; got {type(raw).__name__}")
        _check_keys(source, raw, SUITE_KEYS)
        if "tasks" not in raw or not isinstance(raw["tasks"], list):
            raise SuiteError(f"{source}: 'tasks' must be a list of config files or {{config, overrides, name}} mappings")
        tasks = tuple(TaskSpec.parse(t, f"{source}: tasks[{i}]", base) for i, t in enumerate(raw["tasks"]))
        seeds = raw.get("seeds", [0])
        seeds = [seeds] if isinstance(seeds, int) else seeds
        if not isinstance(seeds, list):
            raise SuiteError(f"{source}: seeds must be a list of integers, got {seeds!r}")
        kwargs: dict[str, Any] = {k: raw[k] for k in ("workers", "out", "name", "threads", "absolute_eval_factor") if raw.get(k) is not None}
        if "out" in kwargs:
            kwargs["out"] = str(kwargs["out"])
        return cls(tasks=tasks, seeds=tuple(seeds), overrides=tuple(_as_overrides(raw.get("overrides"), f"{source}: overrides")), **kwargs)

    @classmethod
    def load(cls, path: str | Path) -> "Suite":
        """A suite from a YAML file."""
        path = Path(path)
        if not path.exists():
            raise SuiteError(f"suite file {str(path)!r} does not exist")
        try:
            raw = yaml.safe_load(path.read_text())
        except yaml.YAMLError as err:
            raise SuiteError(f"suite file {str(path)!r} is not valid YAML: {err}") from None
        return cls.from_dict(raw, base=path.resolve().parent, source=str(path))

    def replace(self, **changes: Any) -> "Suite":
        return dataclasses.replace(self, **changes)


# -- planning ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Job:
    """One (task, seed) run, resolved: names for the results, the run directory, the full config."""

    environment: str
    task: str
    algorithm: str
    seed: int
    run_dir: str
    config_yaml: str
    absolute_episodes: int
    threads: Optional[int]

    @property
    def label(self) -> str:
        return f"{self.environment}/{self.task}/{self.algorithm}/seed_{self.seed}"


def plan(suite: Suite, *, out: str | Path | None = None, overrides: Sequence[str] = ()) -> list[Job]:
    """Every (task, seed) run of ``suite`` with its resolved config; config errors raise here, before any run."""
    from marl_ppo.config import ConfigError, load_config, to_yaml

    out_dir = Path(out if out is not None else suite.out).resolve()
    workers_threads = suite.threads if suite.threads is not None else (1 if suite.workers > 1 else None)
    jobs: list[Job] = []
    seen: dict[tuple, str] = {}
    for i, task in enumerate(suite.tasks):
        for seed in suite.seeds:
            try:
                cfg = load_config(task.config, [*suite.overrides, *task.overrides, *overrides])
            except ConfigError as err:
                raise SuiteError(f"tasks[{i}] ({task.config or 'defaults'}): {err}") from None
            name = task.name or cfg.env.scenario
            cfg.train.seed = seed
            cfg.log.root = str(out_dir / "runs")
            cfg.log.name = f"{name}-{cfg.loss.algorithm}-seed{seed}"
            if suite.workers > 1:  # a progress bar per worker would only fill worker.log
                cfg.log.progress = False
            key = (cfg.env.kind, name, cfg.loss.algorithm, seed)
            if key in seen:
                raise SuiteError(
                    f"tasks[{i}] and {seen[key]} are both {'/'.join(map(str, key[:3]))} with seed {seed}; "
                    "give one of them a different 'name'")
            seen[key] = f"tasks[{i}]"
            episodes = suite.absolute_eval_factor * cfg.log.eval_episodes
            jobs.append(Job(cfg.env.kind, name, cfg.loss.algorithm, seed, str(Path(cfg.log.root) / cfg.log.name),
                            to_yaml(cfg), episodes, workers_threads))
    return jobs


# -- running -----------------------------------------------------------------------------------------


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

    cfg = trainer.cfg
    groups = list(trainer.parts.groups)
    if cfg.env.kind == "vmas":
        n_envs, rounds = episodes, 1
    else:  # PettingZoo env copies step one by one: fewer copies, longer rollout
        n_envs = max(1, min(episodes, cfg.env.num_envs))
        rounds = -(-episodes // n_envs)
    env = make_env(cfg.env, seed=cfg.train.seed + 30_000, num_envs=n_envs)
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
        from marl_ppo.trainer import Trainer

        cfg = from_yaml(job.config_yaml)
        trainer = Trainer(cfg, run_dir=run_dir)
        trainer.fit()
        if job.absolute_episodes > 0:
            metrics = final_evaluation(trainer, job.absolute_episodes)
            _write_json(run_dir / ABSOLUTE_FILE, {"frames": trainer.frames, "episodes": len(metrics["return"]),
                                                  "metrics": metrics})
    except Exception as err:  # a failing run is a result, not the end of the suite
        import traceback

        status, error = "failed", f"{type(err).__name__}: {err}"
        if not (run_dir / "error.txt").exists():
            run_dir.mkdir(parents=True, exist_ok=True)
            (run_dir / "error.txt").write_text(error + "\n\n" + traceback.format_exc())
    result = RunResult(job, status, error, time.perf_counter() - t0)
    _write_json(run_dir / RESULT_FILE, {"status": status, "error": error, "seconds": result.seconds})
    return result


def _worker_entry(job_file: str) -> None:
    """Entry point of a worker process: ``python -c "from marl_ppo.suite import _worker_entry; ..."``."""
    job = Job(**json.loads(Path(job_file).read_text()))
    warnings.filterwarnings("ignore", message="PettingZoo in TorchRL is tested")
    result = _execute(job)
    sys.exit(0 if result.ok else 1)


def _write_json(path: Path, obj: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2, allow_nan=False))
    os.replace(tmp, path)


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
    _write_json(run_dir / JOB_FILE, dataclasses.asdict(job))


def _launch(job: Job) -> subprocess.Popen:
    env = dict(os.environ)
    if job.threads is not None:
        for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            env[var] = str(job.threads)
    root = str(Path(__file__).resolve().parents[1])  # marl_ppo importable whatever the cwd
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    log = open(Path(job.run_dir) / LOG_FILE, "w")
    code = f"from marl_ppo.suite import _worker_entry; _worker_entry({str(Path(job.run_dir) / JOB_FILE)!r})"
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
) -> SuiteResult:
    """Runs every (task, seed) of ``suite``, then writes ``marl_eval.json`` and ``returns.png`` in ``out``.

    ``workers`` (default: the suite's) processes run at once; with 1 the runs go one after another
    in this process. A failing run is recorded in the result (and its run directory) and the others
    go on. ``overrides`` apply to every run, after the suite's and the tasks' own.
    """
    if not isinstance(suite, Suite):
        suite = Suite.load(suite)
    if workers is not None:
        suite = suite.replace(workers=workers)
    jobs = plan(suite, out=out, overrides=overrides)
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
    echo(f"suite {suite.name or ''}: {len(jobs)} runs ({len(todo)} to run), {suite.workers} worker(s), out {out_dir}")
    if suite.workers > 1:  # worker processes, even for one run: the caller's process stays as it is
        for i, res in zip(todo, _run_parallel([jobs[i] for i in todo], suite.workers, echo)):
            results[i] = res
    else:
        for i in todo:
            _prepare(jobs[i])
            echo(f"start  {jobs[i].label}  ->  {jobs[i].run_dir}")
            res = _execute(jobs[i])
            echo(f"{res.status:<6} {jobs[i].label}  ({res.seconds:.1f}s){'  ' + res.error if res.error else ''}")
            results[i] = res
    result = SuiteResult([r for r in results if r is not None], out_dir)
    ok_dirs = [r.job.run_dir for r in result.runs if r.ok]
    if ok_dirs:
        result.json_path = write_marl_eval(to_marl_eval(ok_dirs), out_dir / JSON_NAME)  # validated
        if plot:
            result.plot_path = plot_suite(result.json_path, out_dir / PLOT_NAME, ci=ci, title=suite.name)
    _write_json(out_dir / "suite_summary.json", {
        "name": suite.name,
        "runs": [{"run": r.job.label, "run_dir": r.job.run_dir, "status": r.status, "error": r.error,
                  "seconds": round(r.seconds, 2)} for r in result.runs],
        "marl_eval_json": str(result.json_path) if result.json_path else None,
        "plot": str(result.plot_path) if result.plot_path else None,
    })
    return result


# -- marl-eval JSON ----------------------------------------------------------------------------------


def _run_names(run_dir: Path) -> tuple[str, str, str, int]:
    """(environment, task, algorithm, seed) of a run: from the suite's job record, else config.yaml."""
    job_file = run_dir / JOB_FILE
    if job_file.exists():
        job = json.loads(job_file.read_text())
        return job["environment"], job["task"], job["algorithm"], int(job["seed"])
    from marl_ppo.config import from_yaml

    cfg_file = run_dir / "config.yaml"
    if not cfg_file.exists():
        raise FileNotFoundError(f"{run_dir} is not a run directory (no {JOB_FILE} and no config.yaml)")
    cfg = from_yaml(cfg_file.read_text())
    return cfg.env.kind, cfg.env.scenario, cfg.loss.algorithm, cfg.train.seed


def _run_failed(run_dir: Path) -> Optional[str]:
    result = run_dir / RESULT_FILE
    if result.exists():
        rec = json.loads(result.read_text())
        if rec.get("status") != "ok":
            return rec.get("error") or "failed"
    if (run_dir / "error.txt").exists():
        return (run_dir / "error.txt").read_text().splitlines()[0]
    if not (run_dir / "summary.json").exists():
        return "no summary.json (the run did not finish)"
    return None


def run_to_marl_eval(run_dir: str | Path) -> dict[str, Any]:
    """One run's ``{"step_<K>": {...}, ..., "absolute_metrics": {...}}`` from its logs.

    Evaluation points are the frames at which every group has an ``eval/<group>/episode_reward``
    scalar (the trainer logs them every ``log.eval_every`` iterations and once at the end; where two
    evaluations share a frame count the last one is kept, as :func:`read_scalars` does).
    """
    from marl_ppo.run_logging import read_scalars

    run_dir = Path(run_dir)
    prefix, suffix = "eval/", "/episode_reward"
    evals = {name[len(prefix):-len(suffix)]: dict(points) for name, points in read_scalars(run_dir).items()
             if name.startswith(prefix) and name.endswith(suffix)}
    if not evals:
        raise ValueError(f"{run_dir}: no evaluation scalars (eval/<group>/episode_reward) in logs/scalars")
    groups = sorted(evals)
    frames = sorted(set.intersection(*(set(v) for v in evals.values())))
    data: dict[str, Any] = {}
    for k, f in enumerate(frames, start=1):
        step: dict[str, Any] = {"step_count": int(f)}
        values = [evals[g][f] for g in groups]
        step.update({f"{g}_return": [evals[g][f]] for g in groups})
        step["return"] = [sum(values) / len(values)]  # BenchMARL's order: groups, then their mean
        data[f"step_{k}"] = step
    absolute = run_dir / ABSOLUTE_FILE
    if absolute.exists():
        metrics = json.loads(absolute.read_text())["metrics"]
        data["absolute_metrics"] = {**{f"{g}_return": metrics[f"{g}_return"] for g in groups}, "return": metrics["return"]}
    else:  # no final evaluation recorded: the last logged one
        last = data[f"step_{len(frames)}"]
        data["absolute_metrics"] = {k: list(v) for k, v in last.items() if k != "step_count"}
    return data


def to_marl_eval(run_dirs: Iterable[str | Path], *, skip_failed: bool = True) -> dict[str, Any]:
    """The marl-eval / BenchMARL JSON object for several run directories.

    Failed or unfinished runs are left out with a warning (``skip_failed=False``: an error).
    Two runs with the same environment, task, algorithm and seed are an error.
    """
    out: dict[str, Any] = {}
    where: dict[tuple, Path] = {}
    for run_dir in map(Path, run_dirs):
        why = _run_failed(run_dir)
        if why is not None:
            if not skip_failed:
                raise ValueError(f"{run_dir}: run failed: {why}")
            warnings.warn(f"left out of the marl-eval JSON: {run_dir} ({why})", stacklevel=2)
            continue
        env, task, algo, seed = _run_names(run_dir)
        key = (env, task, algo, seed)
        if key in where:
            raise ValueError(f"{run_dir} and {where[key]} are both {env}/{task}/{algo}/seed_{seed}")
        where[key] = run_dir
        out.setdefault(env, {}).setdefault(task, {}).setdefault(algo, {})[f"seed_{seed}"] = run_to_marl_eval(run_dir)
    return out


def write_marl_eval(data: Mapping[str, Any], path: str | Path) -> Path:
    """Checks ``data`` with :func:`validate_marl_eval` and writes it as JSON (strict: no NaN)."""
    validate_marl_eval(data)
    path = Path(path)
    _write_json(path, data)
    return path


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def validate_marl_eval(obj: Any, *, same_shape: bool = False) -> None:
    """Checks the marl-eval layout; raises :class:`ValueError` naming the first bad path.

    ``{env: {task: {algorithm: {run: {"step_<K>": {"step_count": int, metric: [numbers]},
    ..., "absolute_metrics": {metric: [numbers]}}}}}}``: names are non-empty strings (algorithm
    names without commas, as marl-eval requires), every run has at least one ``step_<K>`` and an
    ``absolute_metrics``, the steps' ``step_count`` grows with K, every step of a run has the same
    metrics and ``absolute_metrics`` has those metrics too, every metric is a non-empty list of
    finite numbers. ``same_shape=True`` also checks what marl-eval's aggregation needs across an
    environment: the same algorithms in every task, the same number of runs, the same steps and metrics.
    """

    def fail(path: list[str], problem: str) -> None:
        raise ValueError(f"marl-eval JSON: at {'/'.join(path) or '<root>'}: {problem}")

    def mapping(value: Any, path: list[str], what: str) -> Mapping:
        if not isinstance(value, Mapping):
            fail(path, f"expected a mapping of {what}, got {type(value).__name__}")
        if not value:
            fail(path, f"expected at least one {what}, got an empty mapping")
        for k in value:
            if not isinstance(k, str) or not k:
                fail(path, f"{what} names must be non-empty strings, got {k!r}")
        return value

    def metric_list(value: Any, path: list[str]) -> None:
        if not isinstance(value, list) or not value:
            fail(path, f"a metric must be a non-empty list of numbers, got {value!r}")
        for i, x in enumerate(value):
            if not _is_number(x):
                fail(path + [f"[{i}]"], f"expected a finite number, got {x!r}")

    shapes: dict[str, list[tuple[list[str], tuple]]] = {}
    for env, tasks in mapping(obj, [], "environment").items():
        for task, algos in mapping(tasks, [env], "task").items():
            for algo, runs in mapping(algos, [env, task], "algorithm").items():
                if "," in algo:
                    fail([env, task, algo], "algorithm names must not contain ',' (marl-eval splits on it)")
                for run, steps in mapping(runs, [env, task, algo], "run").items():
                    path = [env, task, algo, run]
                    mapping(steps, path, "step")
                    step_keys = []
                    for key in steps:
                        if key == "absolute_metrics":
                            continue
                        num = key[len("step_"):] if key.startswith("step_") else ""
                        if not num.isdigit():
                            fail(path + [key], "a run holds only 'step_<K>' entries and 'absolute_metrics'")
                        step_keys.append((int(num), key))
                    if not step_keys:
                        fail(path, "a run needs at least one 'step_<K>' entry")
                    if "absolute_metrics" not in steps:
                        fail(path, "missing 'absolute_metrics' (the final evaluation)")
                    metrics: Optional[set] = None
                    last_count = -1
                    for _, key in sorted(step_keys):
                        step = mapping(steps[key], path + [key], "metric")
                        if "step_count" not in step:
                            fail(path + [key], "missing 'step_count'")
                        count = step["step_count"]
                        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
                            fail(path + [key, "step_count"], f"expected a non-negative integer, got {count!r}")
                        if count <= last_count:
                            fail(path + [key, "step_count"], f"{count} does not grow (previous step: {last_count})")
                        last_count = count
                        names = set(step) - {"step_count"}
                        if not names:
                            fail(path + [key], "no metrics besides 'step_count'")
                        if metrics is None:
                            metrics = names
                        elif names != metrics:
                            fail(path + [key], f"metrics {sorted(names)} differ from the run's first step {sorted(metrics)}")
                        for m in sorted(names):
                            metric_list(step[m], path + [key, m])
                    absolute = mapping(steps["absolute_metrics"], path + ["absolute_metrics"], "metric")
                    if "step_count" in absolute:
                        fail(path + ["absolute_metrics", "step_count"], "absolute_metrics has no step_count")
                    if set(absolute) != metrics:
                        fail(path + ["absolute_metrics"],
                             f"metrics {sorted(absolute)} differ from the steps' metrics {sorted(metrics or ())}")
                    for m in sorted(absolute):
                        metric_list(absolute[m], path + ["absolute_metrics", m])
                    shapes.setdefault(env, []).append(
                        (path, (tuple(sorted(k for _, k in step_keys)), tuple(sorted(metrics or ())))))
    if same_shape:
        for env, tasks in obj.items():
            algo_sets = {task: sorted(algos) for task, algos in tasks.items()}
            first_task, first_algos = next(iter(algo_sets.items()))
            for task, algos in algo_sets.items():
                if algos != first_algos:
                    fail([env, task], f"algorithms {algos} differ from {env}/{first_task}'s {first_algos}")
            n_runs = {(t, a): len(r) for t, algos in tasks.items() for a, r in algos.items()}
            (ref_key, ref_n) = next(iter(n_runs.items()))
            for (t, a), n in n_runs.items():
                if n != ref_n:
                    fail([env, t, a], f"{n} runs, but {'/'.join(ref_key)} has {ref_n}")
            ref_path, ref_shape = shapes[env][0]
            for path, shape in shapes[env]:
                if shape != ref_shape:
                    fail(path, f"steps/metrics {shape} differ from {'/'.join(ref_path)}'s {ref_shape}")


# -- plot --------------------------------------------------------------------------------------------


def _band(values, ci: str, level: float = 0.95) -> tuple[float, float, float]:
    """Mean and a ``level`` confidence interval of the mean over seeds (no band for one seed)."""
    import numpy as np
    from scipy import stats

    x = np.asarray(values, dtype=float)
    mean = float(x.mean())
    if len(x) < 2 or np.allclose(x, x[0]):
        return mean, mean, mean
    if ci == "t":
        low, high = stats.t.interval(level, len(x) - 1, loc=mean, scale=stats.sem(x))
    elif ci == "bootstrap":
        res = stats.bootstrap((x,), np.mean, confidence_level=level, n_resamples=2000, method="percentile",
                              random_state=0)
        low, high = res.confidence_interval
    else:
        raise ValueError(f"ci must be 't' or 'bootstrap', got {ci!r}")
    return mean, float(low), float(high)


def plot_suite(
    json_path: str | Path | Mapping[str, Any],
    out_png: str | Path,
    *,
    metric: str = "return",
    ci: str = "t",
    title: Optional[str] = None,
) -> Path:
    """One panel per (environment, task): ``metric`` vs frames, one line per algorithm.

    At each evaluation step the line is the mean over seeds of each seed's mean ``metric``; the band
    is a 95% Student-t interval of that mean (``ci="bootstrap"``: a percentile bootstrap). Seeds are
    aligned by ``step_<K>``; x is the mean ``step_count`` of the seeds at that step.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    data = json.loads(Path(json_path).read_text()) if not isinstance(json_path, Mapping) else json_path
    validate_marl_eval(data)
    panels = [(env, task, algos) for env, tasks in data.items() for task, algos in tasks.items()]
    cols = min(3, len(panels))
    rows = -(-len(panels) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.8 * rows), squeeze=False)
    for ax, (env, task, algos) in zip(axes.flat, panels):
        for algo, runs in sorted(algos.items()):
            by_step: dict[int, list[tuple[int, float]]] = {}
            for steps in runs.values():
                for key, step in steps.items():
                    if key.startswith("step_") and metric in step:
                        by_step.setdefault(int(key[5:]), []).append((step["step_count"], float(np.mean(step[metric]))))
            xs, mean, low, high = [], [], [], []
            for k in sorted(by_step):
                counts, vals = zip(*by_step[k])
                m, lo, hi = _band(vals, ci)
                xs.append(float(np.mean(counts)))
                mean.append(m)
                low.append(lo)
                high.append(hi)
            if not xs:
                continue
            line, = ax.plot(xs, mean, marker="." if len(xs) < 30 else None, label=f"{algo} ({len(runs)} seeds)")
            ax.fill_between(xs, low, high, color=line.get_color(), alpha=0.25, linewidth=0)
        ax.set_title(f"{env} / {task}")
        ax.set_xlabel("frames")
        ax.set_ylabel(f"eval {metric}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    band = "95% t-interval" if ci == "t" else "95% bootstrap interval"
    fig.suptitle(f"{title + ': ' if title else ''}mean over seeds, {band}", fontsize="medium")
    fig.tight_layout()
    out_png = Path(out_png)
    out_png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_png, dpi=100)
    plt.close(fig)
    return out_png


# -- command line ------------------------------------------------------------------------------------


def build_parser(prog: str = "python -m marl_ppo.suite") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description="Run a benchmark suite (tasks x seeds) and write "
                                "marl-eval JSON results and an aggregate plot.")
    p.add_argument("suite", help="suite YAML file (see configs/suites/)")
    p.add_argument("--workers", type=int, help="processes at once (default: the suite's; 1: sequential, in-process)")
    p.add_argument("--out", help="output folder (default: the suite's 'out')")
    p.add_argument("--override", nargs="+", action="extend", default=[], metavar="KEY=VALUE",
                   help="config overrides for every run, applied last (e.g. train.total_frames=6000)")
    p.add_argument("--rerun", action="store_true", help="run again runs that finished before")
    p.add_argument("--ci", choices=("t", "bootstrap"), default="t", help="confidence band of the plot")
    p.add_argument("--no-plot", action="store_true", help="skip the aggregate plot")
    p.add_argument("--dry-run", action="store_true", help="list the runs and exit")
    return p


def main(argv: Sequence[str] | None = None, prog: str = "python -m marl_ppo.suite") -> int:
    """Command line: 0 when every run succeeded, 1 when some failed, 2 for a bad suite or arguments."""
    warnings.filterwarnings("ignore", message="PettingZoo in TorchRL is tested")
    args = build_parser(prog).parse_args(argv)
    try:
        suite = Suite.load(args.suite)
        if args.workers is not None:
            suite = suite.replace(workers=args.workers)
        if args.dry_run:
            for job in plan(suite, out=args.out, overrides=args.override):
                print(f"{job.label:<48} {job.run_dir}")
            return 0
        result = run_suite(suite, out=args.out, overrides=args.override, rerun=args.rerun,
                           plot=not args.no_plot, ci=args.ci)
    except SuiteError as err:
        print(f"{prog}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted; finished runs keep their directories (run again to continue)", file=sys.stderr)
        return 130
    print(result.table())
    if result.json_path:
        print(f"marl-eval JSON: {result.json_path}")
    if result.plot_path:
        print(f"plot: {result.plot_path}")
    if result.failed:
        print(f"{len(result.failed)} of {len(result.runs)} runs failed (see their error.txt)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    from marl_ppo import suite as _suite  # one module identity, whether run with -m or imported

    sys.exit(_suite.main())
