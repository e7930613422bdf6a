"""Logging for a run: torchrl's loggers (CSV by default), a tqdm progress bar, and an error record.

CSV scalars land in ``<run_dir>/logs/scalars/<metric>.csv`` as ``frames,value`` lines (torchrl's
``CSVLogger``), appended, so a resumed run continues the same files. A resumed run first drops
what was logged after its checkpoint's step (:func:`truncate_scalars`; TensorBoard through
``purge_step``), so that each step appears once, with the values of the run that continued.

A logger kind is a row of :data:`~marl_ppo.log_options.LOGGER_KINDS` (its torchrl class, package and
options) and a row of :data:`BACKENDS` here, of the same name: how a run opens the kind's logger in
its directory and closes it. No code branches on a logger's name.
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from marl_ppo.log_options import LOGGER_KINDS, LogConfig, MlflowConfig, WandbConfig
from marl_ppo.run import media as log_media
from marl_ppo.table import Table, resolve

__all__ = ["RunLogger", "Progress", "Backend", "BACKENDS", "read_scalars", "truncate_scalars"]


class Progress:
    """A tqdm bar over frames: one rate (tqdm's frames/s), ETA, and the mean return per group.

    The rate is tqdm's own (smoothed over recent iterations); ``time/fps`` in the logs is the
    exact figure per iteration.
    """

    def __init__(self, total: int, initial: int, enabled: bool) -> None:
        self.bar = tqdm(total=total, initial=initial, unit="frames", disable=not enabled, dynamic_ncols=True)

    def update(self, frames: int, returns: dict[str, float | None]) -> None:
        self.bar.set_postfix({g: f"{r:.3f}" for g, r in returns.items() if r is not None}, refresh=False)
        self.bar.update(frames)

    def close(self) -> None:
        self.bar.close()


class RunLogger:
    """Sends metrics to every configured torchrl logger; writes ``error.txt`` when a run fails."""

    def __init__(
        self,
        run_dir: Path,
        log: "LogConfig | list[str]",
        exp_name: str,
        *,
        resume_step: int | None = None,
        config: dict[str, Any] | None = None,
    ) -> None:
        """``log``: the run's :class:`~marl_ppo.config.LogConfig` (or just the logger names);
        ``resume_step``: a resumed run's checkpoint step (what was logged after it is dropped
        first); ``config``: the resolved config, sent to each logger as its hyper-parameters."""
        log = log if isinstance(log, LogConfig) else LogConfig(loggers=list(log))
        self.run_dir = Path(run_dir)
        self.loggers, self._backends = [], []
        if resume_step is not None:
            truncate_scalars(self.run_dir, resume_step)
        for name in log.loggers:
            kind, backend = LOGGER_KINDS.lookup(name), BACKENDS.lookup(name)
            try:
                logger = backend.open(resolve(kind.logger), self.run_dir, log.options_of(name), exp_name, resume_step)
            except ImportError as err:
                raise ImportError(f"log.loggers asks for {name!r}, which is not installed: {err}") from err
            self.loggers.append(logger)
            self._backends.append(backend)
        if config is not None:
            for logger in self.loggers:
                log_media.log_config(logger, config)

    def progress(self, total: int, initial: int, enabled: bool) -> Progress:
        return Progress(total, initial, enabled)

    def log(self, metrics: dict[str, float], step: int) -> None:
        try:
            for logger in self.loggers:
                for name, value in metrics.items():
                    logger.log_scalar(name, value, step=step)
        except OSError as err:  # torchrl's loggers name no file
            raise OSError(
                err.errno, f"cannot write the run's logs under {self.run_dir / 'logs'}: {err.strerror}"
            ) from err

    def log_file(self, name: str, path: Path, step: int) -> None:
        """An evaluation GIF or a plot PNG to every logger that shows media (see :mod:`marl_ppo.run.media`)."""
        for logger in self.loggers:
            log_media.log_file(logger, name, path, step)

    def log_summary(self, summary: dict[str, Any]) -> None:
        for logger in self.loggers:
            log_media.log_summary(logger, summary)

    def error(self, err: BaseException, reason: str | None = None) -> None:
        """Writes ``error.txt`` (the reason, then the traceback); says so on stderr if it cannot."""
        text = f"{reason or f'{type(err).__name__}: {err}'}\n\n" + "".join(traceback.format_exception(err))
        try:
            (self.run_dir / "error.txt").write_text(text)
        except OSError as write_err:
            print(
                f"marl-ppo: could not write {self.run_dir / 'error.txt'} ({write_err.strerror}); "
                f"the error was:\n{text}",
                file=sys.stderr,
            )

    def close(self) -> None:
        """Flushes and closes every logger's files (safe to call twice)."""
        for backend, logger in zip(self._backends, self.loggers):
            backend.close(logger)
        self.loggers, self._backends = [], []


@dataclass(frozen=True)
class Backend:
    """How a run opens and closes the logger of the :data:`~marl_ppo.log_options.LOGGER_KINDS` row of the
    same name: ``open(cls, run_dir, options, exp_name, resume_step)`` makes the logger from ``cls``, the
    row's torchrl class, and ``options``, its options (``None`` for a kind that takes none);
    ``close(logger)`` flushes and closes its files."""

    name: str
    open: Callable[[type, Path, Any, str, "int | None"], Any]
    close: Callable[[Any], None]


def _csv(cls: type, run_dir: Path, options: None, exp_name: str, resume_step: int | None):
    """torchrl's CSV logger, its scalars under ``<run_dir>/logs/scalars/``."""
    return cls(exp_name="logs", log_dir=str(run_dir))


def _close_csv(logger) -> None:
    files = logger.experiment.files
    for f in files.values():
        f.close()
    files.clear()


def _tensorboard(cls: type, run_dir: Path, options: None, exp_name: str, resume_step: int | None):
    """torchrl's TensorBoard logger under ``<run_dir>/tensorboard``; on resume its writer purges the events
    after ``resume_step``."""

    class _Resumable(cls):
        def _create_experiment(self):
            from torch.utils.tensorboard import SummaryWriter

            # purge_step: readers drop the events at or after it that an earlier session wrote
            purge = None if resume_step is None else resume_step + 1
            return SummaryWriter(log_dir=os.path.join(self.log_dir, self.exp_name), purge_step=purge)

    return _Resumable(exp_name=exp_name, log_dir=str(run_dir / "tensorboard"))


def _wandb(cls: type, run_dir: Path, cfg: WandbConfig, exp_name: str, resume_step: int | None):
    """torchrl's W&B logger; a resumed run goes on logging into the same W&B run (its id is kept)."""
    id_file = run_dir / "wandb" / "run_id"
    run_id = id_file.read_text().strip() if id_file.exists() else None
    logger = cls(
        exp_name,
        save_dir=str(run_dir),
        id=run_id,
        project=cfg.project,
        entity=cfg.entity,
        group=cfg.group,
        tags=list(cfg.tags),
        mode=cfg.mode,
        log_env_packages=False,
    )
    run_id = getattr(logger.experiment, "id", None)
    if run_id:
        id_file.parent.mkdir(parents=True, exist_ok=True)
        id_file.write_text(run_id)
    return logger


def _mlflow(cls: type, run_dir: Path, cfg: MlflowConfig, exp_name: str, resume_step: int | None):
    """torchrl's MLflow logger, in ``cfg.experiment``, the run named as the run directory."""
    import mlflow

    uri = cfg.tracking_uri or (run_dir / "mlflow").resolve().as_uri()
    if uri.startswith("file:"):
        # MLflow 3 refuses a file store unless asked: it is what a run directory can hold by itself
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    mlflow.set_tracking_uri(uri)
    if mlflow.get_experiment_by_name(cfg.experiment) is None:
        # created here, not by torchrl's logger: torchrl sets a file store's artifact location to the
        # store's root, where MLflow's own client then reads each run's artifacts as a malformed
        # experiment. Created by MLflow, artifacts live inside their experiment's folder.
        try:
            mlflow.create_experiment(cfg.experiment)
        except mlflow.exceptions.MlflowException:  # another run of a suite created it meanwhile
            if mlflow.get_experiment_by_name(cfg.experiment) is None:
                raise
    logger = cls(cfg.experiment, tracking_uri=uri)
    _ = logger.experiment  # starts the run
    mlflow.set_tag("mlflow.runName", exp_name)
    return logger


def _close_mlflow(logger) -> None:
    import mlflow

    mlflow.end_run()


BACKENDS: Table[Backend] = Table(
    "logger backend",
    [
        Backend("csv", _csv, _close_csv),
        Backend("tensorboard", _tensorboard, lambda logger: logger.experiment.close()),  # its SummaryWriter
        Backend("wandb", _wandb, lambda logger: logger.experiment.finish()),  # the W&B run
        Backend("mlflow", _mlflow, _close_mlflow),
    ],
)


def truncate_scalars(run_dir: str | Path, step: int) -> int:
    """Drops every CSV scalar logged after ``step`` (a resumed run's checkpoint); returns how many.

    A run killed after logging an iteration but before checkpointing it logs that iteration
    again when it resumes: without this, the files would hold the step twice.
    """
    root = Path(run_dir) / "logs" / "scalars"
    dropped = 0
    for path in root.rglob("*.csv"):
        lines = path.read_text().splitlines()
        kept = [ln for ln in lines if ln.strip() and _step(ln) <= step]
        dropped += sum(1 for ln in lines if ln.strip()) - len(kept)
        if len(kept) != len(lines):
            tmp = path.with_name(path.name + ".tmp")
            tmp.write_text("".join(ln + "\n" for ln in kept))
            os.replace(tmp, path)
    return dropped


def _step(line: str) -> float:
    return float(line.split(",", 1)[0])


def read_scalars(run_dir: str | Path) -> dict[str, list[tuple[int, float]]]:
    """Every CSV scalar of a run: ``{metric: [(frames, value), ...]}``.

    Each step appears once in a run's files (a resumed run drops what it logs again); should a
    file hold a step twice all the same (a directory written by an earlier version), the last
    value is kept.
    """
    root = Path(run_dir) / "logs" / "scalars"
    out: dict[str, list[tuple[int, float]]] = {}
    for path in sorted(root.rglob("*.csv")):
        name = str(path.relative_to(root).with_suffix(""))
        points: dict[int, float] = {}
        for line in path.read_text().splitlines():
            if line.strip():
                step, value = line.split(",")
                points[int(float(step))] = float(value)
        out[name] = sorted(points.items())
    return out
