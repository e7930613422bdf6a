"""The suite spec: a suite file's tasks, seeds, sweep and settings (:class:`Suite`, :class:`TaskSpec`,
:class:`SlurmSpec`), checked key by key, and :func:`plan`, which resolves it into one :class:`Job`
per (task, variant, seed)."""

from __future__ import annotations

import dataclasses
import difflib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Sequence

import yaml

from marl_ppo.config_files import config_path, shipped_configs, suite_path
from marl_ppo.options import ConfigError
from marl_ppo.suite.scoring import PROTOCOLS, ScoreSpec, competitive_reason, parse_score
from marl_ppo.suite.sweep import Grid, SweepError, grid_overrides, parse_sweep, run_slug, variant_name

SUITE_KEYS = (
    "name",
    "tasks",
    "seeds",
    "overrides",
    "sweep",
    "workers",
    "out",
    "threads",
    "absolute_eval_factor",
    "slurm",
    "vectorise_seeds",
    "protocol",
)
TASK_KEYS = ("config", "name", "overrides", "score", "reference")
SLURM_KEYS = ("cluster", "partition", "time", "cpus", "gpus", "mem_gb", "array_parallelism", "setup", "nodes")


class SuiteError(ValueError):
    """A suite file or suite argument that cannot run: an unknown key, a bad value, a missing file."""


# -- the suite spec ----------------------------------------------------------------------------------


def check_keys(where: str, given: Iterable[str], allowed: Sequence[str]) -> None:
    for key in given:
        if key not in allowed:
            close = difflib.get_close_matches(str(key), allowed, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise SuiteError(f"unknown key {key!r} in {where}; {hint}allowed keys: {', '.join(allowed)}")


def as_overrides(value: Any, where: str) -> list[str]:
    """``[k=v, ...]`` or a mapping ``{k: v}`` (dotted keys, nested mappings flattened) as ``k=v`` strings.

    >>> as_overrides({"train": {"total_frames": 6000}, "env.scenario": "balance"}, "overrides")
    ['train.total_frames=6000', 'env.scenario=balance']
    >>> as_overrides(["train.seed"], "overrides")
    Traceback (most recent call last):
    ...
    marl_ppo.suite.spec.SuiteError: overrides must be key=value strings, got ['train.seed']
    """
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
    """One task of a suite: a train config file, its own overrides, the task name in the results, what it is
    scored on (:mod:`marl_ppo.suite.scoring`; ``()``: the default) and its reference scores
    ``(random, expert)`` (``protocol: reference`` normalises its score between them)."""

    config: Optional[str] = None
    overrides: tuple[str, ...] = ()
    name: Optional[str] = None
    score: ScoreSpec = ()
    reference: Optional[tuple[float, float]] = None

    @classmethod
    def parse(cls, raw: Any, where: str, base: Optional[Path]) -> "TaskSpec":
        if isinstance(raw, str):
            raw = {"config": raw}
        if not isinstance(raw, Mapping):
            raise SuiteError(
                f"{where} must be a config path or a mapping with keys {', '.join(TASK_KEYS)}; got {raw!r}"
            )
        check_keys(where, raw, TASK_KEYS)
        config = raw.get("config")
        if config is not None:
            config = str(resolve_task(str(config), base, where))
        name = raw.get("name")
        if name is not None and (not isinstance(name, str) or not name or "," in name or "/" in name):
            raise SuiteError(f"{where}.name must be a non-empty string without ',' or '/', got {name!r}")
        try:
            score = parse_score(raw.get("score"), f"{where}.score")
        except ValueError as err:
            raise SuiteError(str(err)) from None
        overrides = tuple(as_overrides(raw.get("overrides"), f"{where}.overrides"))
        return cls(config, overrides, name, score, parse_reference(raw.get("reference"), f"{where}.reference"))


def parse_reference(raw: Any, where: str) -> Optional[tuple[float, float]]:
    """A task's ``reference: {random: R, expert: E}``: the scores normalised to 0 and 1 (``protocol: reference``).

    >>> parse_reference({"random": -2, "expert": 8.5}, "reference")
    (-2.0, 8.5)
    """
    if raw is None:
        return None
    ok = isinstance(raw, Mapping) and set(raw) == {"random", "expert"}
    values = [raw.get("random"), raw.get("expert")] if ok else []
    if not ok or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        raise SuiteError(f"{where} must be {{random: NUMBER, expert: NUMBER}} (reference scores), got {raw!r}")
    if values[0] == values[1]:
        raise SuiteError(f"{where}: random and expert must differ (they become 0 and 1), got {values[0]} for both")
    return float(values[0]), float(values[1])


def resolve_task(path: str, base: Optional[Path], where: str) -> Path:
    p = Path(path).expanduser()
    if p.is_absolute():
        candidates = [p]
    else:
        candidates = ([base / p] if base is not None else []) + [Path.cwd() / p]
    for c in candidates:
        if c.exists():
            return c.resolve()
    if p.as_posix().removesuffix(".yaml") in shipped_configs():  # a shipped config by name (tuned/balance)
        return config_path(p)
    raise SuiteError(
        f"{where}: config file {path!r} not found (tried {', '.join(str(c) for c in candidates)}; "
        f"nor is it a shipped config: {shipped_configs()})"
    )


@dataclass(frozen=True)
class SlurmSpec:
    """The suite file's ``slurm:`` section: how the ``slurm`` launcher asks for each job.

    Attributes:
        cluster: submitit's cluster: ``slurm``, or ``local`` (jobs as local processes: for tests) or ``debug``.
        partition: SLURM partition (``None``: the cluster's default).
        time: time limit per job, in minutes.
        cpus: CPUs per job (default: the suite's ``threads``, else 1).
        gpus: GPUs per job.
        mem_gb: memory per job in GB (``None``: the cluster's default).
        array_parallelism: jobs of the array running at once.
        setup: shell lines run before each job (e.g. ``source venv/bin/activate``).
        nodes: machines a job of ``train.ranks`` > 1 runs on, ``train.ranks / nodes`` processes on each.
    """

    cluster: str = "slurm"
    partition: Optional[str] = None
    time: int = 60
    cpus: Optional[int] = None
    gpus: int = 0
    mem_gb: Optional[int] = None
    array_parallelism: int = 256
    setup: tuple[str, ...] = ()
    nodes: int = 1

    @classmethod
    def parse(cls, raw: Any, where: str) -> "SlurmSpec":
        if raw is None:
            return cls()
        if not isinstance(raw, Mapping):
            raise SuiteError(f"{where} must be a mapping with keys {', '.join(SLURM_KEYS)}; got {raw!r}")
        check_keys(where, raw, SLURM_KEYS)
        kw = dict(raw)
        if kw.get("cluster", "slurm") not in ("slurm", "local", "debug"):
            raise SuiteError(f"{where}.cluster must be one of ['slurm', 'local', 'debug'], got {kw['cluster']!r}")
        for key in ("time", "cpus", "gpus", "mem_gb", "array_parallelism", "nodes"):
            v = kw.get(key)
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < (0 if key == "gpus" else 1)):
                raise SuiteError(f"{where}.{key} must be an integer >= {0 if key == 'gpus' else 1}, got {v!r}")
        setup = kw.get("setup", ())
        kw["setup"] = tuple([setup] if isinstance(setup, str) else setup)
        return cls(**kw)


@dataclass(frozen=True)
class Suite:
    """A benchmark suite: tasks × sweep variants × seeds, common overrides, how many worker processes,
    where to write, and how SLURM jobs ask for resources."""

    tasks: tuple[TaskSpec, ...]
    seeds: tuple[int, ...] = (0,)
    overrides: tuple[str, ...] = ()
    workers: int = 1
    out: str = "runs/suite"
    name: Optional[str] = None
    threads: Optional[int] = None
    absolute_eval_factor: int = 10
    sweep: Grid = ()
    slurm: SlurmSpec = SlurmSpec()
    vectorise_seeds: bool = False  # each (task, variant)'s seeds in one process (train.seeds, docs/seeds.md)
    protocol: str = "marl-eval"  # how the report normalises each task's score (marl_ppo.suite.normalise)

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
        if not isinstance(self.vectorise_seeds, bool):
            raise SuiteError(f"vectorise_seeds must be true or false, got {self.vectorise_seeds!r}")
        if self.protocol not in PROTOCOLS:
            raise SuiteError(f"protocol must be one of {list(PROTOCOLS)}, got {self.protocol!r}")
        unset = [t.name or t.config or "defaults" for t in self.tasks if t.reference is None]
        if self.protocol == "reference" and unset:
            raise SuiteError(f"protocol reference needs every task's reference: {{random, expert}}; missing: {unset}")

    @classmethod
    def from_dict(cls, raw: Any, base: Optional[Path] = None, source: str = "suite") -> "Suite":
        """A suite from its YAML mapping; relative task config paths resolve against ``base``."""
        if not isinstance(raw, Mapping):
            raise SuiteError(f"{source} must be a mapping with keys {', '.join(SUITE_KEYS)}; got {type(raw).__name__}")
        check_keys(source, raw, SUITE_KEYS)
        if "tasks" not in raw or not isinstance(raw["tasks"], list):
            raise SuiteError(
                f"{source}: 'tasks' must be a list of config files or {{config, overrides, name}} mappings"
            )
        tasks = tuple(TaskSpec.parse(t, f"{source}: tasks[{i}]", base) for i, t in enumerate(raw["tasks"]))
        seeds = raw.get("seeds", [0])
        seeds = [seeds] if isinstance(seeds, int) else seeds
        if not isinstance(seeds, list):
            raise SuiteError(f"{source}: seeds must be a list of integers, got {seeds!r}")
        kwargs: dict[str, Any] = {
            k: raw[k]
            for k in ("workers", "out", "name", "threads", "absolute_eval_factor", "vectorise_seeds", "protocol")
            if raw.get(k) is not None
        }
        if "out" in kwargs:
            kwargs["out"] = str(kwargs["out"])
        try:
            kwargs["sweep"] = parse_sweep(raw.get("sweep"), f"{source}: sweep")
        except SweepError as err:
            raise SuiteError(str(err)) from None
        kwargs["slurm"] = SlurmSpec.parse(raw.get("slurm"), f"{source}: slurm")
        return cls(
            tasks=tasks,
            seeds=tuple(seeds),
            overrides=tuple(as_overrides(raw.get("overrides"), f"{source}: overrides")),
            **kwargs,
        )

    @classmethod
    def load(cls, path: str | Path) -> "Suite":
        """A suite from a YAML file, or the shipped suite of that name (``tiny``)."""
        try:
            path = suite_path(path)
        except ConfigError as err:
            raise SuiteError(str(err)) from None
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
    """One (task, variant, seed) run, resolved: names for the results, the run directory, the full config.

    ``variant`` is the sweep variant's name (empty without a sweep); the results call the run's
    algorithm :attr:`result_algorithm`, ``<algorithm>[<variant>]``.
    """

    environment: str
    task: str
    algorithm: str
    seed: int
    run_dir: str
    config_yaml: str
    absolute_episodes: int
    threads: Optional[int]
    variant: str = ""
    score: ScoreSpec = ()  # what the task is scored on, and its reference scores: the run does not depend on them
    reference: Optional[tuple[float, float]] = None
    ranks: int = 1  # train.ranks: processes of the run (the slurm launcher starts them)

    @property
    def result_algorithm(self) -> str:
        return f"{self.algorithm}[{self.variant}]" if self.variant else self.algorithm

    @property
    def label(self) -> str:
        return f"{self.environment}/{self.task}/{self.result_algorithm}/seed_{self.seed}"


def plan(
    suite: Suite, *, out: str | Path | None = None, overrides: Sequence[str] = (), remote: bool = False
) -> list[Job]:
    """Every (task, variant, seed) run of ``suite`` with its resolved config; config errors raise
    here, before any run. Overrides apply as: task file, suite, task, sweep variant, ``overrides``.

    ``remote``: the jobs run elsewhere (Ray, SLURM): no progress bar, one torch thread by default,
    as in worker processes."""
    from marl_ppo.config import ConfigError, load_config, to_yaml
    from marl_ppo.run.ranks import check_ranks

    out_dir = Path(out if out is not None else suite.out).resolve()
    apart = remote or suite.workers > 1
    workers_threads = suite.threads if suite.threads is not None else (1 if apart else None)
    jobs: list[Job] = []
    seen: dict[str, str] = {}
    for i, task in enumerate(suite.tasks):
        for variant_overrides in grid_overrides(suite.sweep):
            where = f"tasks[{i}]" + (f" with sweep {list(variant_overrides)}" if variant_overrides else "")
            for seed in suite.seeds:
                try:
                    cfg = load_config(task.config, [*suite.overrides, *task.overrides, *variant_overrides, *overrides])
                    variant = variant_name(suite.sweep, cfg)
                except (ConfigError, SweepError) as err:
                    raise SuiteError(f"{where} ({task.config or 'defaults'}): {err}") from None
                name = task.name or cfg.env.scenario
                cfg.train.seed = seed
                cfg.log.root = str(out_dir / "runs")
                cfg.log.name = f"{name}-{cfg.loss.algorithm}{'-' + run_slug(variant) if variant else ''}-seed{seed}"
                try:  # what train.ranks cannot run with, before any run
                    check_ranks(cfg)
                except ConfigError as err:
                    raise SuiteError(f"{where} ({name}): {err}") from None
                competitive = competitive_reason(cfg)
                if competitive and not task.score:
                    raise SuiteError(
                        f"{where} ({name}): competitive ({competitive}): name what it is scored on, "
                        "e.g. score: GROUP or score: vs_<source>/<seat>/win_rate"
                    )
                if apart:  # a progress bar per worker would only fill worker.log
                    cfg.log.progress = False
                episodes = suite.absolute_eval_factor * cfg.log.eval_episodes
                job = Job(
                    cfg.env.kind,
                    name,
                    cfg.loss.algorithm,
                    seed,
                    str(Path(cfg.log.root) / cfg.log.name),
                    to_yaml(cfg),
                    episodes,
                    workers_threads,
                    variant,
                    task.score,
                    task.reference,
                    cfg.train.ranks,
                )
                for key in (job.label, job.run_dir):
                    if key in seen:
                        raise SuiteError(
                            f"{where} and {seen[key]} are both {job.label} ({job.run_dir}); give one of them a "
                            "different "
                            "'name', or sweep values that differ once resolved"
                        )
                    seen[key] = where
                jobs.append(job)
    return jobs
