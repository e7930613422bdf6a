"""The run's records: loggers, evaluation, checkpoints (``log.*``), the options of :mod:`marl_ppo.run`.

Read by :mod:`marl_ppo.config` (a :class:`~marl_ppo.config.Config` holds one :class:`LogConfig`);
no torch here.

>>> LogConfig(loggers=["csv", "tensorboard"]).loggers
['csv', 'tensorboard']
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from marl_ppo.options import at_least, choice

__all__ = ["LogConfig", "WandbConfig", "MlflowConfig"]


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
    checkpoint_every: int = 5
    progress: bool = True
    plot: bool = True
    video: bool = False
    eval_opponents: list[str] = field(default_factory=list)
    wandb: WandbConfig = field(default_factory=WandbConfig)
    mlflow: MlflowConfig = field(default_factory=MlflowConfig)

    def __post_init__(self) -> None:
        for lg in self.loggers:
            choice("log.loggers[]", lg, ("csv", "tensorboard", "wandb", "mlflow"))
        at_least("log.eval_every", self.eval_every, 0, " (0: only at the end)")
        at_least("log.checkpoint_every", self.checkpoint_every, 0, " (0: only at the end)")
        at_least("log.eval_episodes", self.eval_episodes, 1)
