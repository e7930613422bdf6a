"""``marl-ppo tune``: a search over config keys on Ray Tune, each trial a normal run directory.

:func:`check_tune` checks a :class:`~marl_ppo.suite.tune_spec.TuneSpec` against the config and the
env before Ray starts; :func:`run_tune` runs it (``tune.Tuner`` with the spec's searcher and
scheduler; ``resume=True``: ``Tuner.restore``, finished trials kept) and writes the results in the
spec's ``out`` folder:

* ``best.yaml``: the best trial's config as a plain train config (``marl-ppo train best.yaml``);
* ``trials.csv`` and ``trials.md``: every trial's values, metric (last and best), frames, status and
  run directory; ``tune.png``: the metric of every trial against frames;
* ``marl_eval.json``: the finished trials as a suite writes them (each trial an algorithm
  ``<algorithm>[<trial>]``);
* ``trials/<trial>/``: the run directories (``marl-ppo eval`` / ``plot`` work on them as on any run);
  ``ray/<name>/``: Tune's own experiment folder (its checkpoints are copies of the runs').

Schedulers count in frames (``frames``, reported by every trial), so that a trial resumed from a
checkpoint after a failure is measured on the same clock.
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from marl_ppo.config import Config, ConfigError, load_config, to_yaml
from marl_ppo.run.resume import changeable
from marl_ppo.suite.marl_eval import run_to_marl_eval, write_marl_eval
from marl_ppo.suite.ray_launcher import connect
from marl_ppo.suite.runner import writable_folder
from marl_ppo.suite.spec import SuiteError
from marl_ppo.suite.tune_spec import SchedulerSpec, TuneSpec, flow
from marl_ppo.suite.tune_trial import run_trial
from marl_ppo.table import resolve

__all__ = ["TrialResult", "TuneResult", "check_tune", "run_tune", "fifo_scheduler", "asha_scheduler", "pbt_scheduler"]


@dataclass
class TrialResult:
    name: str
    params: dict[str, Any]
    status: str  # finished | stopped (by the scheduler) | failed | interrupted | not started (Ctrl-C)
    frames: int
    last: Optional[float]
    best: Optional[float]
    run_dir: Path
    error: Optional[str] = None
    history: list[tuple[int, float]] = dataclasses.field(default_factory=list)


@dataclass
class TuneResult:
    trials: list[TrialResult]
    best: Optional[TrialResult]
    out: Path
    interrupted: bool = False  # stopped (Ctrl-C) before every trial ended: no best, resume to finish


def check_tune(spec: TuneSpec) -> Config:
    """The base config, after checking every space value, the metric and PBT's mutations against it."""
    for module, what in [("ray.tune", "marl-ppo tune needs Ray Tune")] + (
        [("optuna", "searcher: optuna needs Optuna")] if spec.searcher == "optuna" else []
    ):
        try:
            __import__(module)
        except ImportError as err:
            raise SuiteError(
                f"{what}, which cannot be imported here ({err}): pip install 'marl-ppo[cluster]'"
            ) from None
    try:
        base = load_config(spec.task, list(spec.overrides))
    except ConfigError as err:
        raise SuiteError(f"{spec.source}: task {spec.task!r} with the file's overrides: {err}") from None
    domains = [("space", d) for d in spec.space] + [
        ("scheduler.mutations", d) for d in spec.scheduler.mutations.values()
    ]
    for where, domain in domains:
        for value in domain.samples():
            try:
                load_config(spec.task, [*spec.overrides, domain.override(value)])
            except ConfigError as err:
                raise SuiteError(f"{spec.source}: {where}.{domain.key}: {err}") from None
    exploits = spec.scheduler.row.exploits  # continues trials from others' checkpoints: resumed runs
    for key in [*spec.scheduler.mutations, *(d.key for d in spec.space)] if exploits else []:
        if not changeable(key):
            raise SuiteError(
                f"{spec.source}: {key}: {spec.scheduler.kind.upper()} continues a trial from another's checkpoint, "
                "so its space and mutations may hold only keys a resumed run may change (docs/runs.md); "
                f"{key} is not one of them"
            )
    if spec.metric.startswith("eval/") and base.log.eval_every != 1:
        raise SuiteError(
            f"{spec.source}: metric {spec.metric!r} is logged every log.eval_every={base.log.eval_every} "
            "iterations; Tune gets a report per iteration: set log.eval_every=1 in overrides, or tune a collect/ metric"
        )
    groups = _group_names(base)
    if spec.metric_group != "mean" and spec.metric_group not in groups:
        raise SuiteError(
            f"{spec.source}: metric {spec.metric!r} is never logged: the env's groups are {groups} "
            f"(or 'mean' for their mean)"
        )
    return base


def _group_names(cfg: Config) -> list[str]:
    from marl_ppo.envs import make_env
    from marl_ppo.groups.specs import read_group_specs

    env = make_env(dataclasses.replace(cfg.env, num_envs=min(cfg.env.num_envs, 2)), seed=0)
    try:
        return list(read_group_specs(env))
    finally:
        env.close()


def _scheduler(spec: TuneSpec, base: Config):
    """The Ray scheduler of the spec's ``scheduler:`` (its line's ``make``)."""
    return resolve(spec.scheduler.row.make)(spec.scheduler, base)


def fifo_scheduler(s: SchedulerSpec, base: Config):
    """``fifo``: every trial runs its budget."""
    from ray.tune.schedulers import FIFOScheduler

    return FIFOScheduler()


def asha_scheduler(s: SchedulerSpec, base: Config):
    """``asha``: stops bad trials at rungs of ``grace_period`` x ``reduction_factor``^k iterations (in frames)."""
    from ray.tune.schedulers import ASHAScheduler

    fpb = base.train.frames_per_batch
    return ASHAScheduler(
        time_attr="frames",
        # past the last report: a trial that reaches its budget ends itself (final evaluation and summary)
        max_t=s.max_t * fpb if s.max_t else base.train.total_frames + fpb,
        grace_period=s.grace_period * fpb,
        reduction_factor=s.reduction_factor,
    )


def pbt_scheduler(s: SchedulerSpec, base: Config):
    """``pbt``: Population Based Training, every ``perturbation_interval`` iterations (in frames)."""
    from ray.tune.schedulers import PopulationBasedTraining

    return PopulationBasedTraining(
        time_attr="frames",
        perturbation_interval=s.perturbation_interval * base.train.frames_per_batch,
        quantile_fraction=s.quantile,
        hyperparam_mutations={k: d.to_pbt() for k, d in s.mutations.items()},
        custom_explore_fn=functools.partial(clip_to_domains, s.mutations),
        synch=s.synch,
    )


def clip_to_domains(mutations: dict, config: dict) -> dict:
    """PBT's explore step, last: every perturbed value back within its domain (Ray has no bounds)."""
    return {**config, **{k: d.clip(config[k]) for k, d in mutations.items() if k in config}}


def trial_dirname(trial) -> str:
    """Tune's folder of a trial is named by its id, as its run directory is: a result names its trial by
    where it lies (its last metrics may be the ones PBT copied from the trial it cloned)."""
    return trial.trial_id


def _searcher(spec: TuneSpec):
    if spec.searcher == "optuna":
        from ray.tune.search.optuna import OptunaSearch

        return OptunaSearch(seed=spec.seed)
    from ray.tune.search import BasicVariantGenerator

    # Tune's random and grid sampling; it takes its own limit (Tune ignores max_concurrent_trials for it, with a
    # warning, and runs as many trials as the CPUs allow)
    return BasicVariantGenerator(random_state=spec.seed, max_concurrent=spec.max_concurrent)


def run_tune(
    spec: TuneSpec, *, resume: bool = False, address: Optional[str] = None, echo: Callable[[str], None] = print
) -> TuneResult:
    """Runs the search (see the module docstring); the results, also written in ``spec.out``."""
    base = check_tune(spec)
    if resume and not (Path(spec.out).resolve() / "ray" / spec.name).is_dir():  # before anything is written
        raise SuiteError(f"cannot resume: {Path(spec.out).resolve() / 'ray' / spec.name} holds no Tune experiment")
    out = writable_folder(Path(spec.out).resolve())
    record = {
        "task": spec.task,
        "overrides": list(spec.overrides),
        "metric": spec.metric,
        "cpus": spec.cpus,
        "out": str(out),
    }
    # every trial checkpoints often (tiny files): Tune's advice to checkpoint less is not for us
    os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")
    ours = connect(address)
    try:
        from ray import tune

        trainable = tune.with_resources(
            tune.with_parameters(run_trial, record=record), {"cpu": spec.cpus, "gpu": spec.gpus}
        )
        experiment = out / "ray" / spec.name
        if resume:
            if not tune.Tuner.can_restore(str(experiment)):
                raise SuiteError(f"cannot resume: {experiment} holds no Tune experiment to continue")
            tuner = tune.Tuner.restore(str(experiment), trainable, resume_unfinished=True, resume_errored=True)
        else:
            tuner = tune.Tuner(
                trainable,
                param_space={d.key: d.to_tune() for d in spec.space},
                tune_config=tune.TuneConfig(
                    metric=spec.metric,
                    mode=spec.mode,
                    num_samples=spec.num_samples,
                    search_alg=_searcher(spec),
                    scheduler=_scheduler(spec, base),
                    trial_dirname_creator=trial_dirname,
                    # a Searcher (optuna) is limited by Tune's ConcurrencyLimiter; the variant generator by itself
                    max_concurrent_trials=(spec.max_concurrent or None) if spec.searcher == "optuna" else None,
                ),
                run_config=tune.RunConfig(
                    name=spec.name,
                    storage_path=str(out / "ray"),
                    failure_config=tune.FailureConfig(max_failures=spec.max_failures),
                    # PBT exploits other trials' checkpoints: keep them all (a run's are small) so none goes early
                    checkpoint_config=tune.CheckpointConfig(num_to_keep=None if spec.scheduler.row.exploits else 2),
                    verbose=0,
                ),
            )
        echo(f"tune {spec.name}: {spec.num_samples} sample(s) of {len(spec.space)} key(s), out {out}")
        grid = tuner.fit()
    finally:
        if ours:
            import ray

            ray.shutdown()
    return _write_results(spec, grid, out, echo)


def _trial_result(spec: TuneSpec, result, out: Path) -> TrialResult:
    history: list[tuple[int, float]] = []
    frame = result.metrics_dataframe
    if frame is not None and spec.metric in frame and "frames" in frame:
        history = [(int(f), float(v)) for f, v in zip(frame["frames"], frame[spec.metric])]
    metrics = result.metrics or {}
    run_dir = out / "trials" / Path(result.path).name
    params = dict(result.config or {})
    values = [v for _, v in history]
    pick = max if spec.mode == "max" else min
    status = "failed" if result.error else _status(run_dir)
    return TrialResult(
        name=run_dir.name,
        params=params,
        status=status,
        frames=int(metrics.get("frames", 0)),
        last=values[-1] if values else None,
        best=pick(values) if values else None,
        run_dir=run_dir,
        error=str(result.error).splitlines()[-1] if result.error else None,
        history=history,
    )


def _status(run_dir: Path) -> str:
    """``finished`` (its budget), ``stopped`` (by the scheduler, its record complete) or ``failed``."""
    try:
        summary = json.loads((run_dir / "summary.json").read_text())
        total = load_config(run_dir / "config.yaml").train.total_frames
    except (OSError, ValueError, ConfigError):
        return "failed"
    return "finished" if summary["frames"] >= total else "stopped"


def _complete(run_dir: Path) -> None:
    """The final evaluation, plots and summary of a trial the scheduler stopped, from its last checkpoint:
    Tune ends a stopped trial's process without waiting (the last trials' with the experiment)."""
    from marl_ppo.run.trainer import Trainer

    trainer = Trainer(load_config(run_dir / "config.yaml"), run_dir=run_dir, resume=True)
    trainer.stop()  # before fit: completes the record, trains nothing
    trainer.fit()


def _interrupted(experiment: str) -> bool:
    """Whether the search stopped before every trial ended (Ctrl-C): Ray then returns from ``fit()`` as if
    it had ended, with the trials it did not end saved as pending for ``Tuner.restore``."""
    import logging

    from ray.tune import ExperimentAnalysis

    quiet = logging.getLogger("ray.tune")
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # one warning per trial without results: those are the ones we look for
    try:
        trials = ExperimentAnalysis(experiment).trials
    finally:
        quiet.setLevel(level)
    return any(t.status not in ("TERMINATED", "ERROR") for t in trials)


def _write_results(spec: TuneSpec, grid, out: Path, echo: Callable[[str], None]) -> TuneResult:
    interrupted = _interrupted(grid.experiment_path)
    for i in range(len(grid) if not interrupted else 0):  # an interrupted trial goes on at --resume: not completed
        run_dir = out / "trials" / Path(grid[i].path).name
        stopped = grid[i].error is None and not (run_dir / "summary.json").exists()
        if stopped and any((run_dir / "checkpoints").glob("iter_*.pt")):
            _complete(run_dir)
    trials = [_trial_result(spec, grid[i], out) for i in range(len(grid))]
    finished = [t for t in trials if t.status == "finished" and t.last is not None]
    pick = max if spec.mode == "max" else min
    best = pick(finished, key=lambda t: t.last) if finished and not interrupted else None
    if interrupted:
        (out / "best.yaml").unlink(missing_ok=True)  # a best of an unfinished search is not its best
        for t in trials:  # a trial Ray stopped at the signal looks stopped or failed: it was interrupted
            if t.status != "finished":
                t.status = "interrupted" if t.run_dir.is_dir() else "not started"
    if best is not None:
        params = [f"{k}={flow(v)}" for k, v in best.params.items()]
        (out / "best.yaml").write_text(
            f"# the best trial of tune {spec.name!r} ({best.name}: {spec.metric} = {best.last:.4g} at its last "
            f"report); run it with: marl-ppo train best.yaml\n"
            + to_yaml(load_config(spec.task, [*spec.overrides, *params]))
        )
    keys = [d.key for d in spec.space]
    rows = [
        {
            "trial": t.name,
            **{k: t.params.get(k) for k in keys},
            f"{spec.metric} (last)": t.last,
            f"{spec.metric} (best)": t.best,
            "frames": t.frames,
            "status": t.status,
            "run_dir": str(t.run_dir) if t.run_dir.is_dir() else "",
        }
        for t in trials
    ]
    with open(out / "trials.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["trial"])
        writer.writeheader()
        writer.writerows(rows)
    if rows:  # trials.md: the best first (by the metric at the last report), values to 4 significant digits
        last = f"{spec.metric} (last)"
        ranked = sorted(rows, key=lambda r: (r[last] is None, -(r[last] or 0) if spec.mode == "max" else r[last] or 0))
        lines = ["| " + " | ".join(rows[0]) + " |", "|" + " --- |" * len(rows[0])]
        lines += ["| " + " | ".join(_cell(v) for v in row.values()) + " |" for row in ranked]
        (out / "trials.md").write_text("\n".join(lines) + "\n")
    _plot(spec, trials, out / "tune.png")
    data: dict[str, Any] = {}
    for t in finished:
        cfg = load_config(t.run_dir / "config.yaml")
        algo = f"{cfg.loss.algorithm}[{t.name}]"
        data.setdefault(cfg.env.kind, {}).setdefault(cfg.env.scenario, {}).setdefault(algo, {})[
            f"seed_{cfg.train.seed}"
        ] = run_to_marl_eval(t.run_dir)
    if data:
        write_marl_eval(data, out / "marl_eval.json")
    for t in trials:
        echo(f"{t.status:<9} {t.name}  {spec.metric}={t.last}  frames={t.frames}  {t.params}")
    if best is not None:
        echo(f"best: {best.name} ({spec.metric} = {best.last:.4g}); {out / 'best.yaml'}")
    return TuneResult(trials, best, out, interrupted=interrupted)


def _cell(value: Any) -> str:
    """A value as ``trials.md`` shows it: floats to 4 significant digits, nothing for none."""
    if value is None:
        return ""
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _plot(spec: TuneSpec, trials: list[TrialResult], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    ax.set_prop_cycle(color=plt.get_cmap("tab20").colors)  # up to 20 trials in distinct colours
    for t in trials:
        if t.history:
            values = ", ".join(f"{k.rsplit('.', 1)[-1]}={_cell(v)}" for k, v in t.params.items())
            ax.plot(*zip(*t.history), label=f"{t.name} ({t.status}): {values}", marker=".")
    ax.set_xlabel("frames")
    ax.set_ylabel(spec.metric)
    ax.set_title(f"tune {spec.name}: {spec.metric} per trial")
    if any(t.history for t in trials):
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
