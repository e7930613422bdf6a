"""What a run plays against, recorded so that the run can be read and continued from anywhere.

* :func:`absolute_sources`: a scripted opponent's file (``bots/x.py:act``) and a ``checkpoint:`` run
  directory, in ``opponents`` and ``log.eval_opponents``, are made absolute before the config is
  recorded, so the run's ``eval`` and ``--resume`` find them from any folder (as ``env.factory`` is).
* :func:`pin_opponents`: a frozen opponent (``opponents: {g: checkpoint:RUN_DIR[:GROUP]}``) is copied
  into the new run's directory when the run starts: ``opponents/<g>/`` holds the other run's
  ``config.yaml`` and the checkpoint it was played from, with ``pinned.json`` (the source as given,
  the checkpoint's iteration and SHA-256), and the recorded config names the copy. The other run may
  train on or be deleted: this run's ``eval`` and ``--resume`` play what it played.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from marl_ppo.config import Config
from marl_ppo.envs.custom import absolute_factory, factory_path
from marl_ppo.opponents import parse_source
from marl_ppo.run.checkpoints import load_checkpoint

__all__ = ["absolute_sources", "absolute_source", "pin_opponents", "pinned_configs", "recorded_players"]


def absolute_source(text: str) -> str:
    """``text`` with the path it names made absolute (other sources as they are)."""
    source = parse_source("opponent", text)
    if source.row.names_run:
        group = f":{source.group}" if source.group else ""
        return f"{source.kind}:{Path(source.target).expanduser().resolve()}{group}"
    if source.row.names_callable:
        return absolute_factory(source.target)
    return text


def absolute_sources(cfg: Config) -> Config:
    """``cfg`` with every opponent source's path absolute (the config a run records)."""
    opponents = {g: absolute_source(t) for g, t in cfg.opponents.items()}
    evals = [absolute_source(t) for t in cfg.log.eval_opponents]
    if opponents == cfg.opponents and evals == cfg.log.eval_opponents:
        return cfg
    return dataclasses.replace(cfg, opponents=opponents, log=dataclasses.replace(cfg.log, eval_opponents=evals))


def pin_opponents(cfg: Config, run_dir: Path) -> Config:
    """Copies each ``checkpoint:`` opponent of ``cfg`` into ``run_dir/opponents/<group>/``; returns ``cfg``
    naming the copies."""
    opponents = dict(cfg.opponents)
    for g, text in cfg.opponents.items():
        source = parse_source(f"opponents.{g}", text)
        if not source.row.names_run:
            continue
        other = Path(source.target).expanduser().resolve()
        if other.is_relative_to(run_dir.resolve()):  # already a copy of this run's
            continue
        copy = run_dir / "opponents" / g
        (copy / "checkpoints").mkdir(parents=True, exist_ok=True)
        shutil.copyfile(other / "config.yaml", copy / "config.yaml")
        shutil.copyfile(other / "checkpoints" / "last.pt", copy / "checkpoints" / "last.pt")
        data = (copy / "checkpoints" / "last.pt").read_bytes()
        record = {
            "source": text,
            "run_dir": str(other),
            "checkpoint": "last.pt",
            "iteration": load_checkpoint(copy / "checkpoints" / "last.pt")["iteration"],
            "sha256": hashlib.sha256(data).hexdigest(),
        }
        (copy / "pinned.json").write_text(json.dumps(record, indent=1) + "\n")
        group = f":{source.group}" if source.group else ""
        opponents[g] = f"{source.kind}:{copy.resolve()}{group}"
    return cfg if opponents == cfg.opponents else dataclasses.replace(cfg, opponents=opponents)


def pinned_configs(configs: Sequence[Config], run_dirs: Sequence[Path]) -> list[Config]:
    """Each new run's config with its frozen opponents pinned into its directory (:func:`pin_opponents`)."""
    return [pin_opponents(c, Path(d)) for c, d in zip(configs, run_dirs)]


def recorded_players(cfg: Config, players: Mapping[str, Callable]) -> Config:
    """``cfg`` with each of ``players`` (``{group: act}``) as ``opponents.GROUP``: its import path, or, for a
    function that cannot be imported again (a notebook's), its ``module:qualname`` with a warning that
    ``eval`` and ``--resume`` then need it passed again."""
    opponents = dict(cfg.opponents)
    for g, act in players.items():
        path = factory_path(act)
        if path is None:
            path = f"{getattr(act, '__module__', 'notebook')}:{getattr(act, '__qualname__', 'player')}"
            warnings.warn(
                f"player {act!r} for group {g!r} cannot be named in the run's config.yaml (a lambda, a closure or "
                "a notebook's function): pass it again with load_policy(run_dir, players={...}) / "
                "Trainer(..., players={...}, resume=True), or define it in a module",
                stacklevel=4,
            )
        opponents[g] = path
    return dataclasses.replace(cfg, opponents=opponents)
