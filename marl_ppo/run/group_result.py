"""A seed group's result (``train.seeds``): one summary across its seeds and one figure, in the group's own
directory beside the seeds' (``<log.root>/<name>-seeds``).

``group_summary.json`` holds, for each final return, every seed's value, their mean and sd and the 95 %
interval of the mean (:func:`marl_ppo.stats.describe`: Student's t below 10 seeds): the evaluation's (each seed's
``summary.json``) and the training return each seed last logged (``collect/<group>/episode_reward``).
Below :data:`MIN_INTERVAL_SEEDS` seeds there is no interval (``ci95: null`` and a note saying why): a
bootstrap of two values is their range, not a 95 % interval. ``returns.png`` and ``diagnostics.png`` draw
the group's mean curves in their band (:func:`~marl_ppo.run.plots.plot_runs`). A seed that failed is named
with its reason and left out.

The group's directory is claimed when the group starts (created exclusively, :func:`group_directory`) and
named in each seed's ``seeds_group.json``, so a resumed group writes its result where it began.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from marl_ppo.run.logger import read_scalars
from marl_ppo.stats import METHOD_TEXT, describe

__all__ = ["GROUP_SUMMARY", "MIN_INTERVAL_SEEDS", "TOO_FEW", "group_directory", "write_group_result", "group_lines"]

GROUP_SUMMARY = "group_summary.json"
MIN_INTERVAL_SEEDS = 3  # a bootstrap "interval" of one or two values is only their range
TOO_FEW = "too few seeds for an interval"
METHOD = f"{METHOD_TEXT['auto']} (none below {MIN_INTERVAL_SEEDS} seeds)"


def group_directory(name: str, run_dirs: Sequence[Path]) -> Path:
    """A new group's directory, claimed: ``<name>-seeds`` beside its first seed's, created exclusively, or the next
    ``-2``, ``-3``... that no other group has created (two groups started together never share one, and a new
    group never takes the directory of an interrupted one, which its resume will write)."""
    base = Path(run_dirs[0]).parent / f"{name}-seeds"
    path, n = base, 1
    while True:
        try:
            path.mkdir(parents=True)  # atomic: exactly one of two groups creates it
            return path
        except FileExistsError:
            n += 1
            path = base.with_name(f"{base.name}-{n}")


def _finals(run_dir: Path) -> dict[str, float]:
    """A seed's final returns: its evaluation (``summary.json``) and the training return it last logged."""
    summary = json.loads((run_dir / "summary.json").read_text())
    finals = {k: float(v) for k, v in summary.items() if k.startswith("eval/") and k != "eval/episodes" and _number(v)}
    for name, points in read_scalars(run_dir).items():
        if name.startswith("collect/") and name.endswith("/episode_reward") and points:
            finals[name] = points[-1][1]
    return finals


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def write_group_result(group_dir: Path, run_dirs: Sequence[Path], seeds: Sequence[int], plot: bool = True) -> dict:
    """Writes the group's ``group_summary.json`` (and its figures with ``plot``) from its seeds' directories;
    returns the summary."""
    done = [(s, Path(d)) for s, d in zip(seeds, run_dirs) if (Path(d) / "summary.json").exists()]
    failed = {str(s): _reason(Path(d)) for s, d in zip(seeds, run_dirs) if not (Path(d) / "summary.json").exists()}
    finals = [_finals(d) for _, d in done]
    keys = sorted(set.intersection(*(set(f) for f in finals))) if finals else []
    summary = {
        "seeds": [s for s, _ in done],
        "run_dirs": [str(d) for _, d in done],
        "failed": failed,
        "frames": json.loads((done[0][1] / "summary.json").read_text()).get("frames") if done else None,
        "interval": METHOD,
        "final": {k: _statistics([f[k] for f in finals]) for k in keys},
    }
    group_dir = Path(group_dir)
    group_dir.mkdir(parents=True, exist_ok=True)
    (group_dir / GROUP_SUMMARY).write_text(json.dumps(summary, indent=2) + "\n")
    if plot and len(done) > 0:
        from marl_ppo.run.plots import plot_runs

        plot_runs([d for _, d in done], group_dir)
    return summary


def _statistics(values: list[float]) -> dict[str, Any]:
    """:func:`~marl_ppo.stats.describe` of the seeds' values, without an interval below :data:`MIN_INTERVAL_SEEDS`."""
    d = describe(values)
    if d["n"] < MIN_INTERVAL_SEEDS:
        d["ci95"] = None
        d["no_interval"] = f"{TOO_FEW} ({d['n']} < {MIN_INTERVAL_SEEDS})"
    return d


def _reason(run_dir: Path) -> str:
    error = run_dir / "error.txt"
    return error.read_text().splitlines()[0] if error.exists() else "no summary.json (the run did not finish)"


def group_lines(summary: dict, group_dir: Path) -> list[str]:
    """The group's result in a few lines, for the end of ``marl-ppo train``."""
    lines = [f"seed group {summary['seeds']}: {group_dir / GROUP_SUMMARY}"]
    for key, d in summary["final"].items():
        sd = f" ± {d['sd']:.4g} (sd)" if d["sd"] is not None else ""
        if d.get("ci95") is None:  # one or two seeds: their values, and no interval
            values = ", ".join(f"{v:.4g}" for v in d["values"])
            lines.append(f"  {key}: {d['mean']:.4g}{sd}, values [{values}] (n={d['n']}: {TOO_FEW})")
        else:
            ci = f"[{d['ci95'][0]:.4g}, {d['ci95'][1]:.4g}]"
            lines.append(f"  {key}: {d['mean']:.4g}{sd}, 95% CI {ci} (n={d['n']}, {d['method']})")
    lines += [f"  seed {s} left out: {why}" for s, why in summary["failed"].items()]
    return lines
