"""Grid sweeps: a suite's ``sweep:`` (or ``marl-ppo train -m``) crossed into named variants.

A sweep maps config keys to lists of values; every combination is a *variant*, crossed with the
suite's tasks and seeds. A variant's name lists its values by short key (the last part of the dotted
key, the whole key where two swept keys end alike), in the sweep's key order, read back from the
resolved config (``1e-3`` and ``0.001`` name the same variant). ``loss.algorithm`` is left out of
the name because the algorithm field already shows it: results name a run's algorithm
``<algorithm>[<variant>]``, e.g. ``mappo[lr=0.001;hidden=64x64]``.

>>> grid = parse_sweep({"train.lr": [1e-3, 3e-4], "loss.algorithm": ["mappo", "ippo"]})
>>> [v for v in grid_overrides(grid)][:2]
[('train.lr=0.001', 'loss.algorithm=mappo'), ('train.lr=0.001', 'loss.algorithm=ippo')]
>>> short_names(["train.lr", "env.device", "train.device"])
{'train.lr': 'lr', 'env.device': 'env.device', 'train.device': 'train.device'}
>>> format_value([64, 64]), format_value(0.0003), format_value(True)
('64x64', '0.0003', 'true')
>>> split_multirun(["train.lr=1e-3,3e-4", "model.hidden=[64,64],[32]", "env.num_envs=8"])
({'train.lr': ['1e-3', '3e-4'], 'model.hidden': ['[64,64]', '[32]']}, ['env.num_envs=8'])
"""

from __future__ import annotations

import itertools
import json
import re
from typing import Any, Iterator, Mapping, Sequence

__all__ = [
    "parse_sweep",
    "grid_overrides",
    "short_names",
    "format_value",
    "variant_name",
    "run_slug",
    "split_multirun",
    "RESERVED_SWEEP_KEYS",
]

Grid = tuple[tuple[str, tuple[Any, ...]], ...]
# set by the suite itself: seeds come from `seeds`, run directories from `out` and the names
RESERVED_SWEEP_KEYS = ("train.seed", "log.root", "log.name")
NAME_FREE_KEYS = ("loss.algorithm",)  # shown by the algorithm field, not in the variant name


class SweepError(ValueError):
    """A sweep that cannot run (raised as :class:`~marl_ppo.suite.spec.SuiteError` by the suite)."""


def parse_sweep(raw: Any, where: str = "sweep") -> Grid:
    """A sweep mapping ``{key: [values]}`` checked and frozen; a single value counts as a list of one."""
    if raw is None:
        return ()
    if not isinstance(raw, Mapping):
        raise SweepError(f"{where} must be a mapping of config keys to lists of values, got {type(raw).__name__}")
    grid = []
    for key, values in raw.items():
        if not isinstance(key, str) or not re.fullmatch(r"[A-Za-z_][\w]*(\.[\w]+)+|recipe", key):
            raise SweepError(f"{where}: {key!r} is not a dotted config key such as 'train.lr' (or recipe)")
        if key in RESERVED_SWEEP_KEYS:
            raise SweepError(f"{where}: {key!r} cannot be swept (the suite sets it; use 'seeds' for seeds)")
        values = list(values) if isinstance(values, (list, tuple)) else [values]
        if not values:
            raise SweepError(f"{where}.{key}: expected at least one value")
        if len({json.dumps(v, sort_keys=True) for v in values}) != len(values):
            raise SweepError(f"{where}.{key}: values must be distinct, got {values}")
        grid.append((key, tuple(values)))
    return tuple(grid)


def _override(key: str, value: Any) -> str:
    return f"{key}={value if isinstance(value, str) else json.dumps(value)}"


def grid_overrides(grid: Grid) -> Iterator[tuple[str, ...]]:
    """Every combination of the grid as ``key=value`` overrides (the first key varies slowest)."""
    if not grid:
        yield ()
        return
    keys = [k for k, _ in grid]
    for combo in itertools.product(*(values for _, values in grid)):
        yield tuple(_override(k, v) for k, v in zip(keys, combo))


def short_names(keys: Sequence[str]) -> dict[str, str]:
    """Each key's last dotted part, or the whole key where two keys share their last part."""
    last = [k.rsplit(".", 1)[-1] for k in keys]
    return {k: (s if last.count(s) == 1 else k) for k, s in zip(keys, last)}


def format_value(value: Any) -> str:
    """A value as it reads in a variant name: ``0.001``, ``true``, ``64x64``, ``{a:1+b:2}``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "x".join(format_value(v) for v in value) or "[]"
    if isinstance(value, Mapping):
        return "{" + "+".join(f"{k}:{format_value(v)}" for k, v in value.items()) + "}"
    return str(value)


def variant_name(grid: Grid, cfg: Any) -> str:
    """The variant name of ``cfg`` (a resolved :class:`~marl_ppo.config.Config`) for ``grid``'s keys."""
    from omegaconf import OmegaConf

    keys = [k for k, _ in grid if k not in NAME_FREE_KEYS]
    if not keys:
        return ""
    node = OmegaConf.structured(cfg)
    short = short_names(keys)
    parts = []
    for k in keys:
        value = OmegaConf.select(node, k)
        if OmegaConf.is_config(value):
            value = OmegaConf.to_container(value)
        parts.append(f"{short[k]}={format_value(value)}")
    name = ";".join(parts)
    bad = sorted(set(name) & set(",/[]"))
    if bad:
        raise SweepError(
            f"variant name {name!r} holds {bad}, which marl-eval names cannot hold; sweep values other than these"
        )
    return name


def run_slug(variant: str) -> str:
    """The variant as a directory-name part: ``lr=0.001;hidden=64x64`` -> ``lr=0.001-hidden=64x64``."""
    return re.sub(r"[^\w.=+:{}-]", "_", variant.replace(";", "-"))


def _split_top_level(text: str) -> list[str]:
    parts, depth, quote, cur = [], 0, None, ""
    for ch in text:
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "[{(":
            depth += 1
        elif ch in "]})":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        cur += ch
    parts.append(cur)
    return parts


def split_multirun(overrides: Sequence[str]) -> tuple[dict[str, list[str]], list[str]]:
    """hydra's ``-m`` habit: ``key=a,b`` (a comma outside brackets) is swept; other overrides stay fixed."""
    sweep: dict[str, list[str]] = {}
    fixed: list[str] = []
    for o in overrides:
        if "=" not in o:
            raise SweepError(f"overrides must be key=value, got {o!r}")
        key, value = o.split("=", 1)
        values = _split_top_level(value)
        if len(values) > 1:
            if key in sweep:
                raise SweepError(f"{key!r} is swept twice")
            if any(not v for v in values):
                raise SweepError(f"{o!r}: empty value in the sweep")
            sweep[key] = values
        else:
            fixed.append(o)
    return sweep, fixed
