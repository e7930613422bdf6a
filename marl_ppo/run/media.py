"""What torchrl's loggers do not send on their own: the config, media files and the run's summary.

torchrl's loggers (``CSVLogger``, ``TensorboardLogger``, ``WandbLogger``, ``MLFlowLogger``) send
scalars. A run also has its resolved config, its evaluation GIFs, its plots and its summary;
each backend takes them in its own form, written here by hand because torchrl's ``log_video``
wants a tensor and moviepy, and its ``log_hparams`` wants a flat dict for TensorBoard and MLflow:

============  =====================  ======================  ======================  ===========
backend       config                 video (GIF)             plots (PNG)             summary
============  =====================  ======================  ======================  ===========
tensorboard   hparams (flattened)    animated image          image                   text
wandb         ``run.config``         ``wandb.Video`` (gif)   ``wandb.Image``         ``run.summary``
mlflow        params (flattened)     artifact ``videos/``    artifact ``plots/``     metrics
csv           ``config.yaml``        ``videos/`` on disk     ``plots/`` on disk      ``summary.json``
============  =====================  ======================  ======================  ===========

>>> flatten({"train": {"lr": 0.001, "hidden": [64, 64]}, "name": None})
{'train.lr': 0.001, 'train.hidden': '[64, 64]', 'name': 'None'}
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

__all__ = ["flatten", "log_config", "log_file", "log_summary"]


def flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested config -> ``{"a.b": value}`` with numbers and bools kept, everything else as text."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(flatten(value, f"{name}."))
        elif isinstance(value, (bool, int, float, str)):
            out[name] = value
        else:
            out[name] = json.dumps(value) if isinstance(value, (list, dict)) else str(value)
    return out


_KINDS = {"TensorboardLogger": "tensorboard", "WandbLogger": "wandb", "MLFlowLogger": "mlflow", "CSVLogger": "csv"}


def _kind(logger) -> str:
    """Which torchrl logger this is (subclasses included)."""
    for cls in type(logger).__mro__:
        if cls.__name__ in _KINDS:
            return _KINDS[cls.__name__]
    return "other"


def log_config(logger, config: dict[str, Any]) -> None:
    """The resolved config as the backend's hyper-parameters."""
    kind = _kind(logger)
    if kind == "tensorboard":
        from torch.utils.tensorboard.summary import hparams

        # into the run's own event file (SummaryWriter.add_hparams would start another run folder)
        writer = logger.experiment.file_writer
        for summary in hparams(flatten(config), {}):
            writer.add_summary(summary)
    elif kind == "wandb":
        logger.experiment.config.update(config, allow_val_change=True)
    elif kind == "mlflow":
        import mlflow

        mlflow.log_params(flatten(config))


def log_file(logger, name: str, path: Path, step: int) -> None:
    """An evaluation GIF or a plot PNG, as the backend shows it (CSV: the file on disk is it)."""
    kind, path = _kind(logger), Path(path)
    if kind == "tensorboard":
        from PIL import Image
        from tensorboard.compat.proto.summary_pb2 import Summary

        with Image.open(path) as img:  # TensorBoard's image dashboard plays an animated GIF as is
            width, height = img.size
        image = Summary.Image(height=height, width=width, colorspace=3, encoded_image_string=path.read_bytes())
        logger.experiment.file_writer.add_summary(Summary(value=[Summary.Value(tag=name, image=image)]), step)
    elif kind == "wandb":
        import wandb

        media = wandb.Video(str(path), format="gif") if path.suffix == ".gif" else wandb.Image(str(path))
        prefix = name.rpartition("/")[0]
        logger.experiment.log({name: media, f"{prefix}/step" if prefix else "step": step})
    elif kind == "mlflow":
        import mlflow

        mlflow.log_artifact(str(path), artifact_path=name.rpartition("/")[0] or None)


def log_summary(logger, summary: dict[str, Any]) -> None:
    """The run's summary: numbers as summary metrics, the rest as text."""
    kind = _kind(logger)
    numbers = {k: float(v) for k, v in summary.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    if kind == "tensorboard":
        logger.experiment.add_text("summary", "```\n" + json.dumps(summary, indent=2) + "\n```")
    elif kind == "wandb":
        logger.experiment.summary.update(summary)
    elif kind == "mlflow":
        import mlflow

        mlflow.log_metrics({f"summary/{k}": v for k, v in numbers.items()})
        buffer = io.StringIO(json.dumps(summary, indent=2))
        mlflow.log_text(buffer.getvalue(), "summary.json")
