"""A run's directory: its name, the rule that a new run never writes into another run's, and its notes.

A new run's directory is planned by name (:func:`run_directory`, before anything is built, so that a bad
config is refused before any directory exists) and claimed when its record opens
(:func:`claim_run_directory`): its ``config.yaml`` is created exclusively (``O_EXCL``), so of two runs that
planned the same name at the same moment (two ``marl-ppo train`` started together, ``torchrun`` ranks)
exactly one gets it, and the other takes the next free name.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from torchrl.envs import TransformedEnv

from marl_ppo.config import Config, TrainConfig, rounded_budget

__all__ = [
    "run_directory",
    "claim_run_directory",
    "collector_text",
    "note",
    "start_notes",
    "finished_summary",
    "write_summary",
]


def run_directory(cfg: Config, run_dir: str | Path | None, resume: bool) -> Path:
    """The run's planned directory. A new run never writes into another run's directory: the default name
    (``<log.root>/<run name>``) gets the next free ``-2``, ``-3``... suffix, and an explicit directory
    holding a run is refused; a resumed run uses the directory as it is. One directory holds one seed
    (``cfg`` is a single seed's config, see :func:`~marl_ppo.run.seeds.seed_configs`). Nothing is created:
    a new run claims its directory when it opens it (:func:`claim_run_directory`)."""
    if run_dir is not None:
        run_dir = Path(run_dir)
        if not resume and (run_dir / "config.yaml").exists():
            raise _taken(run_dir)
        return run_dir
    base = Path(cfg.log.root) / cfg.run_name()
    if resume:
        return base
    path, n = base, 1
    while (path / "config.yaml").exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    return path


def claim_run_directory(cfg: Config, run_dir: Path, config_yaml: str) -> Path:
    """Claims ``run_dir`` (as :func:`run_directory` planned it) for a new run by creating its ``config.yaml``
    exclusively with ``config_yaml``; returns the directory claimed. Where another run has created it since
    (two runs started together), a default name (``<log.root>/<run name>[-N]``) takes the next free suffix
    and an explicit directory is refused (:class:`FileExistsError`), as :func:`run_directory` refuses it."""
    base = Path(cfg.log.root) / cfg.run_name()
    default = run_dir.parent == base.parent and re.fullmatch(re.escape(base.name) + r"(-(\d+))?", run_dir.name)
    n = int(default.group(2) or 1) if default else 1
    path = run_dir
    while True:
        path.mkdir(parents=True, exist_ok=True)
        try:
            with open(path / "config.yaml", "x") as f:  # O_CREAT | O_EXCL: one of two runs creates it
                f.write(config_yaml)
            return path
        except FileExistsError:
            if not default:
                raise _taken(path) from None
            n += 1
            path = base.with_name(f"{base.name}-{n}")


def _taken(run_dir: Path) -> FileExistsError:
    return FileExistsError(
        f"{run_dir} already holds a run; resume it (marl-ppo train --resume {run_dir}) or choose another directory"
    )


def note(run_dir: Path, text: str) -> None:
    """One dated line in the run's notes (``run.log``): what the run got or changed that a fresh run of its
    ``config.yaml`` would not show (the collector it got, a setting changed on resume)."""
    with open(Path(run_dir) / "run.log", "a") as f:
        f.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {text}\n")


def start_notes(run_dir: Path, collector: str, train: TrainConfig) -> None:
    """The notes a run starts with: the collector it got, and its budget where ``train.total_frames`` is not
    a whole number of batches."""
    note(run_dir, f"collector: {collector}")
    if train.total_frames % (train.frames_per_batch * train.ranks):
        note(run_dir, f"frames: {rounded_budget(train)}")


def collector_text(collector, env: Any = None, seeds: Sequence[int] = (), ranks: int = 1) -> str:
    """The collector a run got, in one line (its notes and ``summary.json`` keep it), with the reason the
    lean VMAS path declined where it did, how ``env`` steps where it says
    (:class:`~marl_ppo.envs.aec_games.AecGames`), the ``seeds`` it collects for (``train.seeds``) and the
    ``ranks`` that each run one (``train.ranks``)."""
    text = collector.description
    if collector.declined:
        text += f"; the lean VMAS collector declined: {collector.declined}"
    stepping = getattr(env.base_env if isinstance(env, TransformedEnv) else env, "description", None)
    if isinstance(stepping, str):
        text += f"; {stepping}"
    text += f", {len(seeds)} seeds in one process (train.seeds)" if seeds else ""
    return text + (f"; on each of {ranks} ranks (the batch: {ranks} x train.frames_per_batch)" * (ranks > 1))


def finished_summary(run_dir: Path, frames: int, total_frames: int) -> dict[str, Any]:
    """A finished run resumed (or one stopped early, its record complete): says so in one line and returns
    its ``summary.json`` as it is (untouched)."""
    ended = "has finished" if frames >= total_frames else "was stopped before its budget"
    print(
        f"marl-ppo: {run_dir} {ended} ({frames} frames, train.total_frames={total_frames}): nothing to "
        "train; its summary.json is kept",
        file=sys.stderr,
    )
    path = Path(run_dir) / "summary.json"
    return json.loads(path.read_text()) if path.exists() else {"frames": frames, "run_dir": str(run_dir)}


def write_summary(
    run_dir: Path, iteration: int, frames: int, final: dict[str, float], collector: str | None
) -> dict[str, Any]:
    """Writes the run's ``summary.json`` (iteration, frames, the final evaluation, the collector) and returns it."""
    summary = {"iteration": iteration, "frames": frames, "run_dir": str(run_dir), **final}
    if collector is not None:
        summary["collector"] = collector
    path = Path(run_dir) / "summary.json"
    tmp = path.with_name("summary.json.tmp")  # through a temporary file: a reader never sees it half written
    tmp.write_text(json.dumps(summary, indent=2))
    os.replace(tmp, path)
    return summary
