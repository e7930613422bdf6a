"""Learning-curve plots from run directories (matplotlib, PNG).

``plot_runs([run_a, run_b], out_dir)`` writes, one line per run and group (and head):

* ``returns.png``: the env's **raw** episode return during collection, and the deterministic
  evaluation return (or, for runs without evaluations, the **routed** training reward the reward
  table wrote), labelled as such;
* ``diagnostics.png``: the update's diagnostics per group and per head, side by side: entropy,
  approximate KL and clip fraction (where the runs logged them);
* ``metrics.png`` with ``metrics=[...]``: the chosen metrics, by name or glob pattern
  (``train/agents/loss_critic``, ``train/*/move/entropy``), one panel each.
"""

from __future__ import annotations

import fnmatch
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from marl_ppo.run.logger import read_scalars  # noqa: E402

__all__ = ["plot_runs", "DIAGNOSTICS"]

# (metric leaf, axis label) of the diagnostics figure; logged per group and, for composite actions, per head
DIAGNOSTICS = (("entropy", "entropy"), ("kl_approx", "approximate KL"), ("clip_fraction", "clip fraction"))


def _curves(runs: dict[str, dict], pattern: str) -> list[tuple[str, list]]:
    """``(label, points)`` of every metric matching the glob ``pattern``, for every run."""
    out = []
    for run, scalars in runs.items():
        for name, points in sorted(scalars.items()):
            if points and fnmatch.fnmatchcase(name, pattern):
                out.append((f"{run}: {name}" if len(runs) > 1 else name, points))
    return out


def _short(label: str, strip: tuple[str, str]) -> str:
    short = label.replace(strip[0], "", 1)
    if strip[1] and short.endswith(strip[1]):
        short = short[: -len(strip[1])]
    return short.strip("/") or "all"


def _panel(ax, curves: list[tuple[str, list]], ylabel: str, title: str, strip: tuple[str, str] = ("", "")) -> bool:
    # sorted by the short label: a group or head keeps its colour from panel to panel
    for short, points in sorted((_short(label, strip), points) for label, points in curves):
        frames, values = zip(*points)
        ax.plot(frames, values, marker="." if len(points) < 30 else None, label=short)
    ax.set_xlabel("frames")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if curves:
        ax.legend(fontsize="small")
    return bool(curves)


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def plot_runs(run_dirs: list[str | Path], out_dir: str | Path, metrics: list[str] | None = None) -> list[Path]:
    """Writes learning-curve PNGs for one or several runs; returns the files written.

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
    runs = {Path(r).name: read_scalars(r) for r in run_dirs}
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []

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
    written.append(_save(fig, out_dir / "returns.png"))

    panels = [(leaf, label, _curves(runs, f"train/*/{leaf}")) for leaf, label in DIAGNOSTICS]
    panels = [p for p in panels if p[2]]
    if panels:
        fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 4), squeeze=False)
        for ax, (leaf, label, curves) in zip(axes[0], panels):
            _panel(ax, curves, label, f"{label} per group and head", ("train/", f"/{leaf}"))
        written.append(_save(fig, out_dir / "diagnostics.png"))

    if metrics:
        chosen = [(m, _curves(runs, m)) for m in metrics]
        missing = [m for m, curves in chosen if not curves]
        if missing:
            known = sorted({name for scalars in runs.values() for name in scalars})
            raise ValueError(f"no logged metric matches {missing}; the runs logged: {', '.join(known)}")
        fig, axes = plt.subplots(1, len(chosen), figsize=(5.5 * len(chosen), 4), squeeze=False)
        for ax, (m, curves) in zip(axes[0], chosen):
            _panel(ax, curves, m.rsplit("/", 1)[-1], m)
        written.append(_save(fig, out_dir / "metrics.png"))
    return written
