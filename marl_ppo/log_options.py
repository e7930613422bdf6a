"""The run's records: loggers, evaluation, checkpoints (``log.*``), the options of :mod:`marl_ppo.run`.

Read by :mod:`marl_ppo.config` (a :class:`~marl_ppo.config.Config` holds one :class:`LogConfig`);
no torch here.

The logger kinds ``log.loggers`` names are rows of one :class:`~marl_ppo.table.Table`,
:data:`LOGGER_KINDS`: each row names torchrl's logger class (``"module:Class"``, imported when a run
opens it), the package it needs beyond torchrl and the extra of marl-ppo that installs it, and its
options (``log.wandb``: the :class:`LogConfig` field of the kind's name). How a run opens and closes
each kind's logger is its row of :data:`~marl_ppo.run.logger.BACKENDS`.

>>> LogConfig(loggers=["csv", "tensorboard"]).loggers
['csv', 'tensorboard']
>>> LOGGER_KINDS.lookup("wandb").logger, LOGGER_KINDS.lookup("wandb").extra
('torchrl.record.loggers.wandb:WandbLogger', 'loggers')
>>> LogConfig().options_of("mlflow").experiment, LogConfig().options_of("csv")
('marl_ppo', None)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from marl_ppo.options import ConfigError, at_least, choice, installed
from marl_ppo.table import Table

__all__ = ["LogConfig", "WandbConfig", "MlflowConfig", "LoggerKind", "LOGGER_KINDS"]


@dataclass
class WandbConfig:
    """Weights & Biases, used when ``log.loggers`` lists ``wandb``.

    Attributes:
        project: the W&B project.
        entity: the W&B team or user (empty: your default entity).
        group: a group for related runs (a sweep, the seeds of one setting).
        tags: tags of the run.
        mode: ``online``, ``offline`` (files under ``<run_dir>/wandb/``, sent later with
            ``wandb sync``) or ``disabled``.
    """

    project: str = "marl_ppo"
    entity: Optional[str] = None
    group: Optional[str] = None
    tags: list[str] = field(default_factory=list)
    mode: str = "online"

    def __post_init__(self) -> None:
        choice("log.wandb.mode", self.mode, ("online", "offline", "disabled"))


@dataclass
class MlflowConfig:
    """MLflow, used when ``log.loggers`` lists ``mlflow``.

    Attributes:
        tracking_uri: where runs are recorded (a server URL, ``sqlite:///mlflow.db``, a
            ``file:`` folder); empty: ``file:<run_dir>/mlflow``, a file store in the run directory.
        experiment: the MLflow experiment the run belongs to.
    """

    tracking_uri: Optional[str] = None
    experiment: str = "marl_ppo"


@dataclass(frozen=True)
class LoggerKind:
    """One logger kind (a name of ``log.loggers``): ``logger`` is torchrl's class (``"module:Class"``),
    ``package`` what it imports beyond torchrl (``None``: nothing) and ``extra`` the extra of marl-ppo that
    installs it, ``options`` its options dataclass (the :class:`LogConfig` field of the kind's name)."""

    name: str
    logger: str
    package: Optional[str] = None
    extra: Optional[str] = None
    options: Optional[type] = None


LOGGER_KINDS: Table[LoggerKind] = Table(
    "logger kind",
    [
        LoggerKind("csv", "torchrl.record.loggers.csv:CSVLogger"),
        LoggerKind("tensorboard", "torchrl.record.loggers.tensorboard:TensorboardLogger", "tensorboard", "loggers"),
        LoggerKind("wandb", "torchrl.record.loggers.wandb:WandbLogger", "wandb", "loggers", WandbConfig),
        LoggerKind("mlflow", "torchrl.record.loggers.mlflow:MLFlowLogger", "mlflow", "loggers", MlflowConfig),
    ],
)


@dataclass
class LogConfig:
    """Run directory, loggers, evaluation and checkpoints.

    Attributes:
        root: parent folder of run directories.
        name: run directory name (default: ``<scenario>-<algorithm>-seed<seed>``).
        loggers: any of ``csv``, ``tensorboard``, ``wandb``, ``mlflow``.
        eval_every: evaluate every K iterations (0: only at the end).
        eval_episodes: evaluation episodes, exactly this many (VMAS: one vectorized batch;
            PettingZoo: shared out between at most ``env.num_envs`` copies).
        eval_deterministic: the evaluations play each policy's mode (false: they sample its actions,
            as collection does; BenchMARL's ``evaluation_deterministic_actions``).
        eval_both: every evaluation also plays the other way, greedy beside sampled
            (``eval/<group>/episode_reward_greedy`` and ``_sampled``, on the same episodes); false: the
            configured way alone, at half the evaluation's cost.
        checkpoint_every: write a checkpoint every K iterations (the final one is always written).
        progress: show a progress bar.
        plot: write learning-curve PNGs at the end of a run.
        video: VMAS and PettingZoo: save a GIF of one evaluation episode at every evaluation
            (``videos/`` in the run directory; also sent to TensorBoard, W&B and MLflow).
        eval_opponents: opponent sources the trained policy also plays at every evaluation, in each
            seat it can take: win, draw and loss rates per seat (``docs/opponents.md``).
        wandb: W&B project, entity, group, tags and mode (:class:`WandbConfig`).
        mlflow: MLflow tracking URI and experiment (:class:`MlflowConfig`).
    """

    root: str = "runs"
    name: Optional[str] = None
    loggers: list[str] = field(default_factory=lambda: ["csv"])
    eval_every: int = 2
    eval_episodes: int = 10
    eval_deterministic: bool = True
    eval_both: bool = True
    checkpoint_every: int = 5
    progress: bool = True
    plot: bool = True
    video: bool = False
    eval_opponents: list[str] = field(default_factory=list)
    wandb: WandbConfig = field(default_factory=WandbConfig)
    mlflow: MlflowConfig = field(default_factory=MlflowConfig)

    def __post_init__(self) -> None:
        for lg in self.loggers:
            choice("log.loggers[]", lg, tuple(LOGGER_KINDS.names()))
        at_least("log.eval_every", self.eval_every, 0, " (0: only at the end)")
        at_least("log.checkpoint_every", self.checkpoint_every, 0, " (0: only at the end)")
        at_least("log.eval_episodes", self.eval_episodes, 1)

    def options_of(self, name: str) -> Any:
        """The options of logger kind ``name``: this section's field of its name (``log.wandb``), the defaults
        of its options type for a kind registered without one, ``None`` for a kind that takes none."""
        kind = LOGGER_KINDS.lookup(name)
        if kind.options is None:
            return None
        options = getattr(self, name, None)
        return options if isinstance(options, kind.options) else kind.options()

    def check_installed(self) -> None:
        """Raises :class:`~marl_ppo.options.ConfigError` for the first logger whose package is missing here,
        naming the extra that installs it."""
        for name in self.loggers:
            kind = LOGGER_KINDS.lookup(name)
            if kind.package is not None and not installed(kind.package):
                raise ConfigError(
                    f"log.loggers: {name} needs the {kind.package!r} package, which is not installed here: "
                    f"pip install 'marl-ppo[{kind.extra}]'"
                )
