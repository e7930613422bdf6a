"""Logging for a run: torchrl's loggers (CSV by default), a tqdm progress bar, and an error record.

CSV scalars land in ``<run_dir>/logs/scalars/<metric>.csv`` as ``frames,value`` lines (torchrl's
``CSVLogger``), appended, so a resumed run continues the same files.
"""
from __future__ import annotations

import traceback
from pathlib import Path

from tqdm.auto import tqdm

__all__ = ["RunLogger", "Progress"]


class Progress:
    """A tqdm bar over frames: fps, mean return per group and ETA."""

    def __init__(self, total: int, initial: int, enabled: bool) -> None:
        self.bar = tqdm(total=total, initial=initial, unit="frames", disable=not enabled, dynamic_ncols=True)

    def update(self, frames: int, returns: dict[str, float | None], fps: float) -> None:
        post = {"fps": f"{fps:.0f}"}
        post.update({g: f"{r:.3f}" for g, r in returns.items() if r is not None})
        self.bar.set_postfix(post, refresh=False)
        self.bar.update(frames)

    def close(self) -> None:
        self.bar.close()


class RunLogger:
    """Sends metrics to every configured torchrl logger; writes ``error.txt`` when a run fails."""

    def __init__(self, run_dir: Path, loggers: list[str], exp_name: str) -> None:
        from torchrl.record.loggers import get_logger

        self.run_dir = Path(run_dir)
        self.loggers = []
        for kind in loggers:
            if kind == "csv":
                from torchrl.record.loggers import CSVLogger

                self.loggers.append(CSVLogger(exp_name="logs", log_dir=str(self.run_dir)))
            else:
                try:
                    self.loggers.append(get_logger(kind, logger_name=str(self.run_dir / kind), experiment_name=exp_name))
                except ImportError as err:
                    raise ImportError(f"log.loggers asks for {kind!r}, which is not installed: {err}") from err

    def progress(self, total: int, initial: int, enabled: bool) -> Progress:
        return Progress(total, initial, enabled)

    def log(self, metrics: dict[str, float], step: int) -> None:
        for logger in self.loggers:
            for name, value in metrics.items():
                logger.log_scalar(name, value, step=step)

    def error(self, err: BaseException) -> None:
        (self.run_dir / "error.txt").write_text(
            f"{type(err).__name__}: {err}\n\n" + "".join(traceback.format_exception(err))
        )

    def close(self) -> None:
        for logger in self.loggers:
            exp = getattr(logger, "experiment", None)
            for f in getattr(exp, "files", {}).values():  # CSV
                f.close()
            if hasattr(exp, "flush") and hasattr(exp, "close"):  # TensorBoard's SummaryWriter
                exp.close()


def read_scalars(run_dir: str | Path) -> dict[str, list[tuple[int, float]]]:
    """Every CSV scalar of a run: ``{metric: [(frames, value), ...]}``, the last value per step kept."""
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
