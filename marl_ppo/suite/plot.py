"""The aggregate plot of a suite's marl-eval JSON: mean return vs frames over seeds, with a band."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping, Optional

from marl_ppo.suite.marl_eval import validate_marl_eval


def confidence_band(values, ci: str, level: float = 0.95) -> tuple[float, float, float]:
    """Mean and a ``level`` confidence interval of the mean over seeds (no band for one seed)."""
    import numpy as np
    from scipy import stats

    x = np.asarray(values, dtype=float)
    mean = float(x.mean())
    if len(x) < 2 or np.allclose(x, x[0]):
        return mean, mean, mean
    if ci == "t":
        low, high = stats.t.interval(level, len(x) - 1, loc=mean, scale=stats.sem(x))
    elif ci == "bootstrap":
        res = stats.bootstrap(
            (x,), np.mean, confidence_level=level, n_resamples=2000, method="percentile", random_state=0
        )
        low, high = res.confidence_interval
    else:
        raise ValueError(f"ci must be 't' or 'bootstrap', got {ci!r}")
    return mean, float(low), float(high)


Curve = tuple[list[float], list[float], list[float], list[float], int]  # x, mean, low, high, seeds


def suite_curves(data: Mapping[str, Any], *, metric: str = "return", ci: str = "t") -> dict[str, dict[str, Curve]]:
    """The lines :func:`plot_suite` draws: ``{"<env>/<task>": {algorithm: (x, mean, low, high, seeds)}}``.

    At each evaluation step the line is the mean over seeds of each seed's mean ``metric``; the band
    is a 95% Student-t interval of that mean (``ci="bootstrap"``: a percentile bootstrap). Seeds are
    aligned by ``step_<K>``; x is the mean ``step_count`` of the seeds at that step. Sweep variants
    (``mappo[lr=0.001]``) are algorithms of their own: one line each per task.
    """
    import numpy as np

    validate_marl_eval(data)
    panels: dict[str, dict[str, Curve]] = {}
    for env, tasks in data.items():
        for task, algos in tasks.items():
            lines = panels.setdefault(f"{env}/{task}", {})
            for algo, runs in sorted(algos.items()):
                by_step: dict[int, list[tuple[int, float]]] = {}
                for steps in runs.values():
                    for key, step in steps.items():
                        if key.startswith("step_") and metric in step:
                            by_step.setdefault(int(key[5:]), []).append(
                                (step["step_count"], float(np.mean(step[metric])))
                            )
                xs, mean, low, high = [], [], [], []
                for k in sorted(by_step):
                    counts, vals = zip(*by_step[k])
                    m, lo, hi = confidence_band(vals, ci)
                    xs.append(float(np.mean(counts)))
                    mean.append(m)
                    low.append(lo)
                    high.append(hi)
                if xs:
                    lines[algo] = (xs, mean, low, high, len(runs))
    return panels


def plot_suite(
    json_path: str | Path | Mapping[str, Any],
    out_png: str | Path,
    *,
    metric: str = "return",
    ci: str = "t",
    title: Optional[str] = None,
) -> Path:
    """One panel per (environment, task): ``metric`` vs frames, one line per algorithm or sweep variant.

    The lines are :func:`suite_curves`'; the PNG's ``Description`` text lists each panel's lines
    (``vmas/navigation: mappo[lr=0.001], mappo[lr=0.0003]``).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = json.loads(Path(json_path).read_text()) if not isinstance(json_path, Mapping) else json_path
    panels = suite_curves(data, metric=metric, ci=ci)
    cols = min(3, len(panels))
    rows = -(-len(panels) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.8 * rows), squeeze=False)
    for ax, (panel, lines) in zip(axes.flat, panels.items()):
        for algo, (xs, mean, low, high, n_seeds) in lines.items():
            (line,) = ax.plot(xs, mean, marker="." if len(xs) < 30 else None, label=f"{algo} ({n_seeds} seeds)")
            ax.fill_between(xs, low, high, color=line.get_color(), alpha=0.25, linewidth=0)
        ax.set_title(panel.replace("/", " / ", 1))
        ax.set_xlabel("frames")
        ax.set_ylabel(f"eval {metric}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    for ax in list(axes.flat)[len(panels) :]:
        ax.set_visible(False)
    band = "95% t-interval" if ci == "t" else "95% bootstrap interval"
    fig.suptitle(f"{title + ': ' if title else ''}mean over seeds, {band}", fontsize="medium")
    fig.tight_layout()
    out_png = Path(out_png)
    out_png.parent.mkdir(parents=True, exist_ok=True)
    description = "\n".join(f"{panel}: {', '.join(lines)}" for panel, lines in panels.items())
    fig.savefig(out_png, dpi=100, metadata={"Description": description})
    plt.close(fig)
    return out_png
