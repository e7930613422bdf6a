"""The YAML files configs and suites are read from: a path, or one shipped with the package, by name.

The package ships its configs in ``marl_ppo/configs/`` (``navigation``, ``balance``, ..., the tuned
``tuned/navigation`` and ``tuned/balance``; suites in
``configs/suites/``, tuning experiments in ``configs/tune/``; in a checkout, ``configs/`` at the root
is a link to them), so that an installed package trains ``marl-ppo train balance`` from any folder.
A name is looked up only where no file of that name exists: ``marl-ppo train balance.yaml`` in a
folder holding its own ``balance.yaml`` reads that one.

>>> shipped_configs()[:4]
['adversarial_pursuit', 'ant_2x4_happo', 'ant_2x4_mappo', 'balance']
>>> config_path("navigation").name, suite_path("tiny").name
('navigation.yaml', 'tiny.yaml')
"""

from __future__ import annotations

import difflib
from pathlib import Path

from marl_ppo.options import ConfigError

__all__ = [
    "CONFIGS",
    "shipped_configs",
    "shipped_suites",
    "shipped_tunes",
    "config_path",
    "suite_path",
    "tune_path",
    "read_config_file",
]

CONFIGS = Path(__file__).resolve().parent / "configs"  # package data (pyproject.toml: package-data)


def shipped_configs() -> list[str]:
    """The names of the train configs shipped with the package: ``navigation``, ..., and the tuned ones,
    ``tuned/navigation``, ... (the best trials of ``configs/tune/``'s searches)."""
    tuned = [f"tuned/{p.stem}" for p in (CONFIGS / "tuned").glob("*.yaml")]
    return sorted([p.stem for p in CONFIGS.glob("*.yaml")] + tuned)


def shipped_suites() -> list[str]:
    """The names of the suites shipped with the package."""
    return sorted(p.stem for p in (CONFIGS / "suites").glob("*.yaml"))


def shipped_tunes() -> list[str]:
    """The names of the tuning experiments shipped with the package (``marl-ppo tune NAME``)."""
    return sorted(p.stem for p in (CONFIGS / "tune").glob("*.yaml"))


def _find(arg: str | Path, folder: Path, names: list[str], what: str) -> Path:
    path = Path(arg)
    if path.exists():
        return path
    name = path.as_posix().removesuffix(".yaml").removesuffix(".yml")
    if name in names:  # a bare name, or a shipped subfolder's (tuned/navigation)
        return folder / f"{name}.yaml"
    close = difflib.get_close_matches(name, names, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    raise ConfigError(f"{what} {str(arg)!r} does not exist: neither a file nor a shipped {what} ({names}){hint}")


def config_path(arg: str | Path) -> Path:
    """``arg`` if it is a file, else the shipped config of that name (``balance`` or ``balance.yaml``)."""
    return _find(arg, CONFIGS, shipped_configs(), "config")


def suite_path(arg: str | Path) -> Path:
    """``arg`` if it is a file, else the shipped suite of that name (``tiny``)."""
    return _find(arg, CONFIGS / "suites", shipped_suites(), "suite")


def tune_path(arg: str | Path) -> Path:
    """``arg`` if it is a file, else the shipped tune file of that name (``tiny``)."""
    return _find(arg, CONFIGS / "tune", shipped_tunes(), "tune file")


def read_config_file(path: Path):
    """A config file's YAML: a mapping of sections (``env:``, ``train:``, ...), not a list or a suite file."""
    from omegaconf import DictConfig, OmegaConf

    loaded = OmegaConf.load(path)
    if not isinstance(loaded, DictConfig):
        raise ConfigError(
            f"config file {str(path)!r} holds a {type(loaded).__name__.removesuffix('Config').lower()}, "
            "not a mapping of sections such as env:, model:, loss:, train:, log:"
        )
    if "tasks" in loaded and "env" not in loaded:
        raise ConfigError(
            f"{str(path)!r} is a suite file (it has tasks:), not a train config: run it with marl-ppo suite {path}"
        )
    return loaded
