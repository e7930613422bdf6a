"""Learning-curve plots from run directories (matplotlib, PNG).

``plot_runs([run_a, run_b], out_dir)`` writes ``returns.png`` (episode return per group vs frames,
one line per run and group) and, where runs logged per-head entropies, ``entropy.png``.
"""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from marl_ppo.run_logging import read_scalars  # noqa: E402

__all__ = ["plot_runs"]


def _panel(ax, runs: dict[str, dict], prefix: str, suffix: str, ylabel: str) -> bool:
    drew = False
    for label, scalars in runs.items():
        for name, points in sorted(scalars.items()):
            if name.startswith(prefix) and name.endswith(suffix) and points:
                frames, values = zip(*points)
                middle = name[len(prefix):-len(suffix)].strip("/") or "all"
                ax.plot(frames, values, marker="." if len(points) < 30 else None,
                        label=f"{label}: {middle}" if len(runs) > 1 else middle)
                drew = True
    ax.set_xlabel("frames")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    if drew:
        ax.legend(fontsize="small")
    return drew


def plot_runs(run_dirs: list[str | Path], out_dir: str | Path) -> list[Path]:
    """Writes learning-curve PNGs for one or several runs; returns the files written."""
    runs = {Path(r).name: read_scalars(r) for r in run_dirs}
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    _panel(axes[0], runs, "collect/", "/episode_reward", "episode return (training)")
    axes[0].set_title("collection")
    if not _panel(axes[1], runs, "eval/", "/episode_reward", "episode return (deterministic)"):
        _panel(axes[1], runs, "collect/", "/train_reward", "mean routed training reward")
        axes[1].set_title("training reward")
    else:
        axes[1].set_title("evaluation")
    fig.tight_layout()
    path = out_dir / "returns.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    written.append(path)

    fig, ax = plt.subplots(figsize=(6, 4))
    if _panel(ax, runs, "train/", "/entropy", "entropy"):
        ax.set_title("entropy per group and head")
        fig.tight_layout()
        path = out_dir / "entropy.png"
        fig.savefig(path, dpi=100)
        written.append(path)
    plt.close(fig)
    return written
