"""Learning-curve plots from run directories (matplotlib, PNG).

``plot_runs([run_a, run_b], out_dir)`` writes, one line per run (or seed group) and agent group (and head):

* ``returns.png``: the env's **raw** episode return during collection, and the deterministic
  evaluation return (or, for runs without evaluations, the **routed** training reward the reward
  table wrote), labelled as such;
* ``diagnostics.png``: the update's diagnostics per group and per head, side by side: entropy,
  approximate KL and clip fraction (where the runs logged them);
* ``metrics.png`` with ``metrics=[...]``: the chosen metrics, by name or glob pattern
  (``train/agents/loss_critic``, ``train/*/move/entropy``), one panel each.

Runs of one config that differ only in the seed (``train.seed``, ``train.seeds``, ``log.name``) are
one **seed group**: one line, the mean over its seeds at the frames they all logged, in a band, the
95 % interval of that mean (:func:`marl_ppo.stats.mean_interval`: Student's t below 10 seeds); a group of two seeds
has no interval (a bootstrap of two values is their range): its band is the seeds' range, and the
figure's title says so. ``separate=True`` draws each run on its own.
"""

from __future__ import annotations

import fnmatch
import hashlib
import re
from pathlib import Path

import matplotlib
import numpy as np
import yaml

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from marl_ppo.run.logger import read_scalars  # noqa: E402
from marl_ppo.stats import T_BELOW, mean_interval  # noqa: E402

__all__ = ["plot_runs", "seed_groups", "DIAGNOSTICS", "MIN_INTERVAL_SEEDS"]

# below 3 seeds a band is the seeds' range, not an interval: group_result.MIN_INTERVAL_SEEDS, the record's rule (not
# imported: group_result draws through this module; tests/run/test_many_seeds.py holds the two equal)
MIN_INTERVAL_SEEDS, TOO_FEW = 3, "too few seeds for an interval"

# (metric leaf, axis label) of the diagnostics figure; logged per group and, for composite actions, per head
DIAGNOSTICS = (("entropy", "entropy"), ("kl_approx", "approximate KL"), ("clip_fraction", "clip fraction"))


def _without_seed(run_dir: Path) -> object:
    """What a run's ``config.yaml`` says apart from its seed and name (a run without one: its directory)."""
    path = run_dir / "config.yaml"
    if not path.exists():
        return str(run_dir.resolve())
    cfg = yaml.safe_load(path.read_text()) or {}
    for section, keys in (("train", ("seed", "seeds")), ("log", ("name", "root", "progress"))):
        for key in keys:
            (cfg.get(section) or {}).pop(key, None)
    return cfg


def seed_groups(run_dirs: list[str | Path], separate: bool = False) -> dict[str, list[Path]]:
    """``{label: run directories}``: runs of one config that differ only in the seed together, in the order
    given (``separate``: each run alone). A group is labelled by its first run's directory name without its
    seed (``navigation-mappo-seed0`` -> ``navigation-mappo (3 seeds)``)."""
    groups: list[tuple[object, list[Path]]] = []
    for run_dir in map(Path, run_dirs):
        key = None if separate else _without_seed(run_dir)
        found = next((members for k, members in groups if key is not None and k == key), None)
        if found is None:
            groups.append((key, [run_dir]))
        else:
            found.append(run_dir)
    labels: dict[str, list[Path]] = {}
    for _, members in groups:
        label = members[0].name
        if len(members) > 1:
            label = f"{re.sub(r'-seed[0-9]+(-[0-9]+)?$', '', label)} ({len(members)} seeds)"
        while label in labels:
            label += "'"
        labels[label] = members
    return labels


def _curves(runs: dict[str, list[dict]], pattern: str) -> list[tuple[str, list[list]]]:
    """``(label, points of each seed)`` of every metric matching the glob ``pattern``, for every run or seed group."""
    out = []
    for run, members in runs.items():
        for name in sorted({name for scalars in members for name in scalars}):
            if fnmatch.fnmatchcase(name, pattern) and all(scalars.get(name) for scalars in members):
                out.append((f"{run}: {name}" if len(runs) > 1 else name, [scalars[name] for scalars in members]))
    return out


def _short(label: str, strip: tuple[str, str]) -> str:
    short = label.replace(strip[0], "", 1)
    if strip[1] and short.endswith(strip[1]):
        short = short[: -len(strip[1])]
    return short.strip("/") or "all"


def _draw(ax, label: str, seeds: list[list]) -> None:
    """One run's line, or a seed group's mean at the frames every seed logged, in its 95 % bootstrap band (below
    :data:`~marl_ppo.run.group_result.MIN_INTERVAL_SEEDS` seeds: their range)."""
    if len(seeds) == 1:
        frames, values = zip(*seeds[0])
        ax.plot(frames, values, marker="." if len(frames) < 30 else None, label=label)
        return
    frames = sorted(set.intersection(*(set(dict(points)) for points in seeds)))
    values = np.array([[dict(points)[f] for points in seeds] for f in frames])  # [frames, seeds]
    if len(seeds) < MIN_INTERVAL_SEEDS:
        low, high = values.min(axis=1), values.max(axis=1)
    else:
        low, high, _ = mean_interval(values)
    (line,) = ax.plot(frames, values.mean(axis=1), marker="." if len(frames) < 30 else None, label=label)
    ax.fill_between(frames, low, high, color=line.get_color(), alpha=0.25, linewidth=0)


def _panel(ax, curves: list[tuple[str, list]], ylabel: str, title: str, strip: tuple[str, str] = ("", "")) -> bool:
    # sorted by the short label: a group or head keeps its colour from panel to panel
    for short, seeds in sorted(((_short(label, strip), seeds) for label, seeds in curves), key=lambda c: c[0]):
        _draw(ax, short, seeds)
    ax.set_xlabel("frames")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if curves:
        ax.legend(fontsize="small")
    return bool(curves)


def _save(fig, path: Path, note: str | None) -> Path:
    """Saves ``fig``; the PNG's ``Description`` text names each panel's lines (and the seed groups' band)."""
    if note:
        fig.suptitle(note, fontsize="small")
    fig.tight_layout()
    lines = [f"{ax.get_title()}: {', '.join(line.get_label() for line in ax.get_lines())}" for ax in fig.axes]
    fig.savefig(path, dpi=100, metadata={"Description": "\n".join([note or "one line per run", *lines])})
    plt.close(fig)
    return path


def _band_note(groups: list[tuple[str, int]]) -> str | None:
    """The figures' title for seed groups (``(label, seeds)``): what their line and band are."""
    bands = {
        True: f"mean over seeds, 95% interval of the mean (Student's t below {T_BELOW} seeds)",
        False: f"mean over seeds, band: the seeds' range ({TOO_FEW})",
    }
    parts = []
    for enough, band in bands.items():
        members = [f"{g} ({n} seeds)" for g, n in groups if (n >= MIN_INTERVAL_SEEDS) == enough]
        if members:
            parts.append(f"{', '.join(members)}: {band}")
    return "; ".join(parts) or None


def comparison_folder(run_dirs: list[str | Path]) -> Path:
    """Where ``marl-ppo plot`` writes by default: one run's own ``plots/``; several runs' comparison in a folder of
    its own beside the first (``plots_A+B``), so that no run's own plots are replaced.

    >>> comparison_folder(["runs/a"]).as_posix(), comparison_folder(["runs/a", "other/b"]).as_posix()
    ('runs/a/plots', 'runs/plots_a+b')
    """
    first = Path(run_dirs[0])
    if len(run_dirs) == 1:
        return first / "plots"
    name = "+".join(Path(d).name for d in run_dirs)
    if len(name) > 100:  # many runs: a short name that still tells the sets apart
        name = f"{name[:80]}+{len(run_dirs)}runs-{hashlib.sha1(name.encode()).hexdigest()[:8]}"
    return first.parent / f"plots_{name}"


def plot_runs(
    run_dirs: list[str | Path], out_dir: str | Path, metrics: list[str] | None = None, *, separate: bool = False
) -> list[Path]:
    """Writes learning-curve PNGs for one or several runs, seed groups in one band each (:func:`seed_groups`;
    ``separate``: one line per run); returns the files written.

    ``metrics``: names or glob patterns of logged metrics for ``metrics.png`` (a pattern that
    matches nothing is an error naming the metrics that exist). A directory that does not exist or
    holds no logged metrics is refused (``FileNotFoundError``) before anything is written.
    """
    for r in run_dirs:  # nothing is created for a directory that holds no run's logs
        if not Path(r).is_dir():
            raise FileNotFoundError(f"{r} is not a run directory (it does not exist)")
        if not any((Path(r) / "logs" / "scalars").rglob("*.csv")):
            raise FileNotFoundError(
                f"{r} holds no logged metrics (no logs/scalars/**.csv): not a run directory "
                "written by marl-ppo train, or a run stopped before its first iteration"
            )
    runs = {label: [read_scalars(r) for r in members] for label, members in seed_groups(run_dirs, separate).items()}
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    note = _band_note([(label.rsplit(" (", 1)[0], len(m)) for label, m in runs.items() if len(m) > 1])

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    _panel(
        axes[0],
        _curves(runs, "collect/*/episode_reward"),
        "raw env return per episode",
        "collection: the env's raw return",
        ("collect/", "/episode_reward"),
    )
    if not _panel(
        axes[1],
        _curves(runs, "eval/*/episode_reward"),
        "raw env return per episode",
        "evaluation: raw return, deterministic actions",
        ("eval/", "/episode_reward"),
    ):
        _panel(
            axes[1],
            _curves(runs, "collect/*/train_reward"),
            "routed training reward per step",
            "training reward (reward table)",
            ("collect/", "/train_reward"),
        )
    written.append(_save(fig, out_dir / "returns.png", note))

    panels = [(leaf, label, _curves(runs, f"train/*/{leaf}")) for leaf, label in DIAGNOSTICS]
    panels = [p for p in panels if p[2]]
    if panels:
        fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 4), squeeze=False)
        for ax, (leaf, label, curves) in zip(axes[0], panels):
            _panel(ax, curves, label, f"{label} per group and head", ("train/", f"/{leaf}"))
        written.append(_save(fig, out_dir / "diagnostics.png", note))

    if metrics:
        chosen = [(m, _curves(runs, m)) for m in metrics]
        missing = [m for m, curves in chosen if not curves]
        if missing:
            known = sorted({name for members in runs.values() for scalars in members for name in scalars})
            raise ValueError(f"no logged metric matches {missing}; the runs logged: {', '.join(known)}")
        fig, axes = plt.subplots(1, len(chosen), figsize=(5.5 * len(chosen), 4), squeeze=False)
        for ax, (m, curves) in zip(axes[0], chosen):
            _panel(ax, curves, m.rsplit("/", 1)[-1], m)
        written.append(_save(fig, out_dir / "metrics.png", note))
    return written
