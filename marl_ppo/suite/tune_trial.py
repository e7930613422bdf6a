"""One Ray Tune trial: our :class:`~marl_ppo.run.trainer.Trainer` in a normal run directory.

The trial's config is the tune file's task, its overrides, then the trial's sampled values. It
reports once per iteration the metrics the run logs anyway (plus ``frames``, the schedulers' clock,
and the tuned metric), and, at every iteration that writes a checkpoint, that checkpoint: Tune's
:class:`ray.tune.Checkpoint` is a folder holding the run's own ``iter_*.pt`` (the same file
``--resume`` reads; no second format). The last iteration is reported once the run's record is
complete (final evaluation, summary), marked ``done``: no scheduler acts on a finished trial. A
trial whose worker died restarts here with Tune's checkpoint: the run directory is resumed exactly
from its newest usable checkpoint, its logs keeping each step once.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

from marl_ppo.suite.tune_spec import flow

__all__ = ["run_trial", "TuneReport", "trial_overrides", "metric_value", "ORIGIN_FILE"]

ORIGIN_FILE = "trial.json"  # beside the checkpoint Tune keeps: which trial wrote it, at which frame


def metric_value(metric: str, stats: dict[str, float]) -> float | None:
    """``metric`` read from an iteration's logged ``stats``; ``<kind>/mean/<name>`` is the mean over groups."""
    if metric in stats:
        return float(stats[metric])
    kind, group, name = metric.split("/")
    if group != "mean":
        return None
    values = [v for k, v in stats.items() if k.startswith(f"{kind}/") and k.endswith(f"/{name}") and k.count("/") == 2]
    return sum(values) / len(values) if values else None


class TuneReport:
    """The trainer callback that reports to Tune (see the module docstring)."""

    def __init__(self, metric: str) -> None:
        self.metric = metric
        self._held: dict[str, Any] | None = None
        self._final: tuple[dict[str, Any], Path] | None = None
        self.stopped = False  # by Tune's scheduler: the run ends after this iteration, its record complete

    def _report(self, trainer, metrics: dict[str, Any], checkpoint=None) -> None:
        from ray import tune

        if self.stopped:
            return
        try:
            tune.report(metrics, checkpoint=checkpoint)
        except SystemExit:  # a scheduler's stop: Ray ends the trial's thread from inside report()
            from marl_ppo.run.directory import note

            if metrics.get("done"):  # the last report of a finished run: the trial ends as it should
                return
            self.stopped = True
            note(trainer.run_dir, f"stopped or paused by Ray Tune's scheduler at frame {trainer.frames}")
            trainer.stop()  # instead: the final checkpoint, evaluation, plots and summary, as any run's

    def on_update_end(self, trainer, stats: dict[str, float]) -> None:
        metrics = {k: float(v) for k, v in stats.items() if isinstance(v, (int, float))}
        value = metric_value(self.metric, metrics)
        if value is None:
            raise KeyError(
                f"the tuned metric {self.metric!r} was not logged at iteration {trainer.iteration}; logged: "
                f"{sorted(k for k in metrics if k.endswith('episode_reward'))}"
            )
        metrics.update({self.metric: value, "frames": trainer.frames, "iteration": trainer.iteration})
        every, last = trainer.cfg.log.checkpoint_every, trainer.frames >= trainer.cfg.train.total_frames
        if last or (every and trainer.iteration % every == 0):
            self._held = metrics  # reported with the checkpoint this iteration writes
        else:
            self._report(trainer, metrics)

    def on_checkpoint(self, trainer, path: Path) -> None:
        metrics, self._held = self._held, None
        if metrics is None:
            return
        if trainer.frames >= trainer.cfg.train.total_frames:
            self._final = (metrics, Path(path))  # reported once the run's record is complete
        else:
            self._report_checkpoint(trainer, metrics, Path(path))

    def on_run_end(self, trainer, summary: dict[str, Any]) -> None:
        """The last iteration, reported after the final evaluation and summary, as ``done``: no scheduler
        acts on a trial that spent its budget (PBT would otherwise hand it another trial's final state)."""
        if self._final is not None:
            metrics, path = self._final
            self._final = None
            self._report_checkpoint(trainer, {**metrics, "done": True}, path)

    def _report_checkpoint(self, trainer, metrics: dict[str, Any], path: Path) -> None:
        from ray import tune

        with tempfile.TemporaryDirectory() as folder:  # Tune copies it into its storage before returning
            shutil.copy2(path, Path(folder) / path.name)
            origin = {"trial_id": tune.get_context().get_trial_id(), "file": path.name, "frames": trainer.frames}
            (Path(folder) / ORIGIN_FILE).write_text(json.dumps(origin))
            self._report(trainer, metrics, tune.Checkpoint.from_directory(folder))


def trial_overrides(record: dict[str, Any], params: dict[str, Any], run_dir: Path) -> list[str]:
    """The trial's overrides: the tune file's, the sampled values, and where and how the run records."""
    threads = max(1, int(record["cpus"]))
    return [
        *record["overrides"],
        *(f"{key}={flow(value)}" for key, value in params.items()),
        f"train.num_threads={threads}",
        "log.progress=false",
        f"log.root={run_dir.parent}",
        f"log.name={run_dir.name}",
    ]


def _adopt(run_dir: Path, folder: Path, origin: dict[str, Any]) -> None:
    """PBT's exploit: another trial's checkpoint becomes this run's newest (its own later ones removed),
    so that resuming continues from the donor's exact state."""
    from marl_ppo.run.checkpoints import checkpoint_candidates

    ckpt_dir = run_dir / "checkpoints"
    iteration = int(origin["file"].removeprefix("iter_").removesuffix(".pt"))
    for path in checkpoint_candidates(ckpt_dir):
        if path.name == "last.pt" or int(path.stem.removeprefix("iter_")) >= iteration:
            path.unlink()
    for name in (origin["file"], "last.pt"):
        shutil.copy2(folder / origin["file"], ckpt_dir / name)


def run_trial(params: dict[str, Any], record: dict[str, Any]) -> None:
    """Tune's function trainable: trains one trial's run; restarted with a checkpoint, resumes it: its own
    (after a failure) or, under PBT, another trial's (exploit), with this trial's values (explore)."""
    from ray import tune

    from marl_ppo.config import load_config
    from marl_ppo.run.directory import note
    from marl_ppo.run.trainer import Trainer

    trial_id = tune.get_context().get_trial_id()
    run_dir = Path(record["out"]) / "trials" / trial_id
    callbacks = [TuneReport(record["metric"])]
    saved = run_dir / "config.yaml"
    checkpoint = tune.get_checkpoint()
    if checkpoint is not None and saved.exists():
        with checkpoint.as_directory() as folder:
            origin = json.loads((Path(folder) / ORIGIN_FILE).read_text())
            if origin["trial_id"] != trial_id:
                _adopt(run_dir, Path(folder), origin)
                note(
                    run_dir,
                    f"PBT: continues from trial {origin['trial_id']}'s {origin['file']} (frame {origin['frames']})",
                )
    if checkpoint is not None and saved.exists() and any((run_dir / "checkpoints").glob("iter_*.pt")):
        values = [f"{key}={flow(value)}" for key, value in params.items()]  # PBT's explore: recorded as changes
        trainer = Trainer(load_config(saved, values), run_dir=run_dir, resume=True, callbacks=callbacks)
    else:
        if run_dir.exists():  # a start that reached no checkpoint: begin again
            shutil.rmtree(run_dir)
        cfg = load_config(record["task"], trial_overrides(record, params, run_dir))
        trainer = Trainer(cfg, run_dir=run_dir, callbacks=callbacks)
    trainer.fit()
