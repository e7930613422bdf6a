"""The tuning spec: a ``TUNE.yaml`` file's base config, search space, searcher, scheduler and metric.

::

    name: navigation_asha
    task: navigation                 # a train config: a shipped name, or a path relative to this file
    overrides: [train.total_frames=120000, log.eval_every=1]
    space:                           # any config keys; each a domain
      train.lr: {loguniform: [1.0e-5, 1.0e-2]}
      loss.entropy_coeff: {choice: [0.0, 0.01]}
      train.num_epochs: {randint: [2, 11]}     # [low, high): 2..10, as Ray Tune's randint
      loss.clip_epsilon: {uniform: [0.1, 0.3]}
      model.hidden: {grid: [[64, 64], [256, 256]]}   # every value, num_samples times each
    searcher: random                 # or optuna (Optuna's TPE through Ray Tune)
    scheduler: {kind: asha, grace_period: 2, reduction_factor: 2}   # fifo | asha | pbt (synch: true waits at intervals)
    metric: eval/agents/episode_reward   # eval|collect / <group>|mean / episode_reward
    mode: max
    num_samples: 8
    resources: {cpus: 1, gpus: 0}    # per trial; train.num_threads follows cpus
    max_failures: 1                  # a trial whose worker dies restarts from its last checkpoint
    seed: 0                          # the searcher's: the same file samples the same trials
    out: runs/tune/navigation_asha

Everything is checked when the file is read (:meth:`TuneSpec.load`), before Ray starts: unknown keys,
empty ranges, a space key the config does not have or a value it refuses, a metric name that no run
logs, PBT mutations of keys a resumed run may not change (``run/resume.CHANGEABLE``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional

import yaml

from marl_ppo.config_files import tune_path
from marl_ppo.options import ConfigError
from marl_ppo.suite.spec import SuiteError, as_overrides, check_keys, resolve_task
from marl_ppo.table import Table

__all__ = [
    "Domain",
    "DomainKind",
    "DOMAIN_KINDS",
    "SchedulerKind",
    "SCHEDULER_KINDS",
    "SchedulerSpec",
    "TuneSpec",
    "TUNE_KEYS",
    "DOMAINS",
    "flow",
]

TUNE_KEYS = (
    "name",
    "task",
    "overrides",
    "space",
    "searcher",
    "scheduler",
    "metric",
    "mode",
    "num_samples",
    "resources",
    "max_failures",
    "seed",
    "out",
)


@dataclass(frozen=True)
class DomainKind:
    """One kind of search domain (a ``space:`` or PBT ``mutations:`` value).

    Attributes:
        name: how the file writes it (``{uniform: [0.1, 0.3]}``).
        tune: the ``ray.tune`` function that builds its search space (``grid_search``, ``uniform``).
        bounds: its arguments are ``[low, high]`` numbers, ``low < high`` (otherwise a list of values, each
            sampled; PBT shifts a list's value to a neighbour or resamples it, and clips a range's).
        positive: its bounds must be > 0 (a log scale).
        integer: its bounds are integers and ``high`` is excluded (Ray Tune's ``randint``).
        grid: every value is run, ``num_samples`` times each (the ``optuna`` searcher takes none).
    """

    name: str
    tune: str
    bounds: bool = False
    positive: bool = False
    integer: bool = False
    grid: bool = False


DOMAIN_KINDS: Table[DomainKind] = Table(
    "search domain",
    [
        DomainKind("choice", "choice"),
        DomainKind("grid", "grid_search", grid=True),
        DomainKind("uniform", "uniform", bounds=True),
        DomainKind("loguniform", "loguniform", bounds=True, positive=True),
        DomainKind("randint", "randint", bounds=True, integer=True),
    ],
)
DOMAINS = tuple(DOMAIN_KINDS.names())


@dataclass(frozen=True)
class SchedulerKind:
    """One Ray Tune scheduler ``scheduler: {kind: ...}`` names.

    Attributes:
        name: its ``kind:``.
        keys: the keys its ``scheduler:`` mapping takes.
        make: ``"module:function"`` ``(spec, base) -> scheduler`` (the scheduler spec and the base config),
            imported when the search starts (Ray is not imported before).
        exploits: it continues a trial from another trial's checkpoint with perturbed values (PBT): it needs
            ``mutations``, its space and mutations may hold only keys a resumed run may change, and every
            trial's checkpoints are kept.
    """

    name: str
    keys: tuple[str, ...]
    make: str
    exploits: bool = False


_RUNNER = "marl_ppo.suite.tune_runner"
SCHEDULER_KINDS: Table[SchedulerKind] = Table(
    "scheduler",
    [
        SchedulerKind("fifo", ("kind",), f"{_RUNNER}:fifo_scheduler"),
        SchedulerKind("asha", ("kind", "grace_period", "reduction_factor", "max_t"), f"{_RUNNER}:asha_scheduler"),
        SchedulerKind(
            "pbt",
            ("kind", "perturbation_interval", "quantile", "mutations", "synch"),
            f"{_RUNNER}:pbt_scheduler",
            exploits=True,
        ),
    ],
)


def flow(value: Any) -> str:
    """``value`` as a ``key=value`` override's right side (YAML flow style: ``[64, 64]``, ``0.001``)."""
    return yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("...").strip()


@dataclass(frozen=True)
class Domain:
    """One key's search domain: ``kind`` (one of :data:`DOMAINS`) and its ``args`` (values or bounds)."""

    key: str
    kind: str
    args: tuple

    @property
    def row(self) -> DomainKind:
        """The domain's kind, its line in :data:`DOMAIN_KINDS`."""
        return DOMAIN_KINDS.lookup(self.kind)

    @classmethod
    def parse(cls, key: str, raw: Any, where: str) -> "Domain":
        if not isinstance(raw, Mapping) or len(raw) != 1:
            raise SuiteError(f"{where}: expected one domain such as {{choice: [a, b]}} or {{uniform: [0.1, 0.3]}}")
        ((kind, args),) = raw.items()
        check_keys(where, [kind], DOMAIN_KINDS.names())
        if not isinstance(args, list) or not args:
            raise SuiteError(f"{where}.{kind}: expected a non-empty list, got {args!r}")
        row = DOMAIN_KINDS.lookup(kind)
        if row.bounds:
            if len(args) != 2 or not all(isinstance(a, (int, float)) and not isinstance(a, bool) for a in args):
                raise SuiteError(f"{where}.{kind}: expected [low, high] numbers, got {args!r}")
            low, high = args
            if not low < high:
                raise SuiteError(f"{where}.{kind}: an empty range [{low}, {high}]: low must be < high")
            if row.positive and low <= 0:
                raise SuiteError(f"{where}.{kind}: bounds must be > 0, got [{low}, {high}]")
            if row.integer and not all(isinstance(a, int) for a in args):
                raise SuiteError(f"{where}.{kind}: integer bounds [low, high) expected, got {args!r}")
        return cls(key, kind, tuple(args))

    def samples(self) -> list[Any]:
        """Values that stand for the domain when the config checks it (every value, or both ends)."""
        if not self.row.bounds:
            return list(self.args)
        low, high = self.args
        return [low, high - 1] if self.row.integer else [low, high]

    def to_tune(self):
        """The Ray Tune search space object."""
        from ray import tune

        make = getattr(tune, self.row.tune)
        return make(*self.args) if self.row.bounds else make(list(self.args))

    def to_pbt(self):
        """The domain as a PBT mutation. Ray perturbs a search-space object (``tune.choice`` included) by
        multiplying the current value by 0.8 or 1.2, which would leave a choice's values (or fail on
        strings); a plain list is shifted to a neighbouring value or resampled, within the list."""
        return self.to_tune() if self.row.bounds else list(self.args)

    def clip(self, value: Any) -> Any:
        """A PBT-perturbed value brought back into the domain's range (Ray's ``* 1.2`` does not look at
        the bounds: ``uniform: [0.9, 0.999]`` for ``gamma`` would reach 1.2); lists are left alone."""
        if not self.row.bounds:
            return value
        low, high = self.args
        return min(max(value, low), high - 1 if self.row.integer else high)

    def override(self, value: Any) -> str:
        return f"{self.key}={flow(value)}"


@dataclass(frozen=True)
class SchedulerSpec:
    """``scheduler:``: ``fifo`` (every trial runs its budget), ``asha`` (stops bad trials at rungs of
    ``grace_period`` x ``reduction_factor``^k iterations, up to ``max_t``), or ``pbt``."""

    kind: str = "fifo"
    grace_period: int = 1
    reduction_factor: float = 2.0
    max_t: Optional[int] = None  # default: the trial's iterations (train.total_frames / frames_per_batch)
    perturbation_interval: int = 2
    quantile: float = 0.25
    mutations: dict[str, Domain] = field(default_factory=dict)
    synch: bool = False  # PBT: exploit only once every live trial has reached the interval (Ray's `synch`)

    @property
    def row(self) -> SchedulerKind:
        """The scheduler's kind, its line in :data:`SCHEDULER_KINDS`."""
        return SCHEDULER_KINDS.lookup(self.kind)

    @classmethod
    def parse(cls, raw: Any, where: str) -> "SchedulerSpec":
        if isinstance(raw, str):
            raw = {"kind": raw}
        if not isinstance(raw, Mapping):
            raise SuiteError(f"{where}: expected fifo, asha or pbt, or a mapping with kind:, got {raw!r}")
        kind = raw.get("kind", "fifo")
        check_keys(f"{where}.kind", [kind], SCHEDULER_KINDS.names())
        check_keys(where, raw, SCHEDULER_KINDS.lookup(kind).keys)
        kw = {k: v for k, v in raw.items() if k != "mutations"}
        if "mutations" in raw:
            if not isinstance(raw["mutations"], Mapping) or not raw["mutations"]:
                raise SuiteError(f"{where}.mutations: expected a mapping of config keys to domains")
            kw["mutations"] = {k: Domain.parse(k, v, f"{where}.mutations.{k}") for k, v in raw["mutations"].items()}
        spec = cls(**kw)
        for name in ("grace_period", "perturbation_interval"):
            if not isinstance(getattr(spec, name), int) or getattr(spec, name) < 1:
                raise SuiteError(f"{where}.{name} must be an integer >= 1, got {getattr(spec, name)!r}")
        if not isinstance(spec.synch, bool):
            raise SuiteError(f"{where}.synch must be true or false, got {spec.synch!r}")
        if not spec.reduction_factor > 1:
            raise SuiteError(f"{where}.reduction_factor must be > 1, got {spec.reduction_factor!r}")
        if not 0 < spec.quantile <= 0.5:
            raise SuiteError(f"{where}.quantile must be in (0, 0.5], got {spec.quantile!r}")
        if spec.row.exploits and not spec.mutations:
            raise SuiteError(f"{where}: {kind} needs mutations: the keys it may perturb, each a domain")
        return spec


@dataclass(frozen=True)
class TuneSpec:
    """A tuning experiment (see the module docstring for the file)."""

    task: str  # the resolved train config file
    space: tuple[Domain, ...]
    metric: str
    name: str = "tune"
    overrides: tuple[str, ...] = ()
    searcher: str = "random"
    scheduler: SchedulerSpec = field(default_factory=SchedulerSpec)
    mode: str = "max"
    num_samples: int = 4
    cpus: float = 1.0
    gpus: float = 0.0
    max_failures: int = 0
    seed: int = 0  # the searcher's (the trials' own seeds are train.seed)
    max_concurrent: int = 0  # trials at once at most (0: as many as the cluster's CPUs allow)
    out: str = "runs/tune"
    source: str = "<tune>"

    @classmethod
    def load(cls, path: str | Path, overrides: tuple[str, ...] = ()) -> "TuneSpec":
        """The spec in the file at ``path`` (or a shipped ``configs/tune/NAME.yaml``), checked; ``overrides``
        apply to every trial after the file's."""
        try:
            path = tune_path(path)
        except ConfigError as err:
            raise SuiteError(str(err)) from None
        try:
            raw = yaml.safe_load(path.read_text())
        except yaml.YAMLError as err:
            raise SuiteError(f"tune file {str(path)!r} is not valid YAML: {err}") from None
        spec = cls.from_dict(raw, base=path.resolve().parent, source=str(path))
        return dataclasses.replace(spec, overrides=spec.overrides + tuple(overrides)) if overrides else spec

    @classmethod
    def from_dict(cls, raw: Any, base: Optional[Path] = None, source: str = "<tune>") -> "TuneSpec":
        if not isinstance(raw, Mapping):
            raise SuiteError(f"{source}: a tune file is a mapping with task:, space:, metric:")
        check_keys(source, raw, TUNE_KEYS)
        for key in ("task", "space", "metric"):
            if key not in raw:
                raise SuiteError(f"{source}: {key}: is missing")
        task = str(resolve_task(str(raw["task"]), base, f"{source}: task"))
        if isinstance(raw["space"], Mapping) and not raw["space"]:
            raise SuiteError(
                f"{source}: space: is empty; give at least one config key to search, e.g. train.lr: [1e-4, 1e-3]"
            )
        if not isinstance(raw["space"], Mapping):
            raise SuiteError(f"{source}: space: expected a mapping of config keys to domains")
        space = tuple(Domain.parse(str(k), v, f"{source}: space.{k}") for k, v in raw["space"].items())
        resources = raw.get("resources") or {}
        check_keys(f"{source}: resources", resources, ("cpus", "gpus"))
        kw: dict[str, Any] = {
            "task": task,
            "space": space,
            "metric": str(raw["metric"]),
            "overrides": tuple(as_overrides(raw.get("overrides"), f"{source}: overrides")),
            "scheduler": SchedulerSpec.parse(raw.get("scheduler", "fifo"), f"{source}: scheduler"),
            "cpus": float(resources.get("cpus", 1)),
            "gpus": float(resources.get("gpus", 0)),
            "source": source,
        }
        for key in ("name", "searcher", "mode", "num_samples", "max_failures", "seed", "out"):
            if key in raw:
                kw[key] = raw[key]
        spec = cls(**kw)
        spec.validate(source)
        return spec

    def validate(self, where: str) -> None:
        """Raises :class:`SuiteError` for a setting out of range (the config and env checks: check_tune)."""
        if self.searcher not in ("random", "optuna"):
            raise SuiteError(f"{where}: searcher must be 'random' or 'optuna', got {self.searcher!r}")
        if self.mode not in ("max", "min"):
            raise SuiteError(f"{where}: mode must be 'max' or 'min', got {self.mode!r}")
        if not isinstance(self.num_samples, int) or self.num_samples < 1:
            raise SuiteError(f"{where}: num_samples must be an integer >= 1, got {self.num_samples!r}")
        if not isinstance(self.max_failures, int) or self.max_failures < 0:
            raise SuiteError(f"{where}: max_failures must be an integer >= 0, got {self.max_failures!r}")
        if not self.cpus > 0 or self.gpus < 0:
            raise SuiteError(f"{where}: resources need cpus > 0 and gpus >= 0, got {self.cpus}, {self.gpus}")
        if self.searcher == "optuna" and any(d.row.grid for d in self.space):
            raise SuiteError(f"{where}: the optuna searcher takes no grid: domain (use choice:)")
        kind, _, tail = self.metric.partition("/")
        if kind not in ("eval", "collect") or not tail.endswith("/episode_reward") or tail.count("/") != 1:
            raise SuiteError(
                f"{where}: metric {self.metric!r} is not one that runs log per iteration; expected "
                "eval/<group>/episode_reward, collect/<group>/episode_reward, or eval|collect/mean/episode_reward"
            )

    @property
    def metric_group(self) -> str:
        return self.metric.split("/")[1]
