"""The aggregate plot of a suite's marl-eval JSON: each task's score vs frames, the mean over seeds with a band,
and the final evaluation's point with its interval, the same figures as the report's table."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping, NamedTuple, Optional

from marl_ppo.suite.marl_eval import validate_marl_eval
from marl_ppo.suite.scoring import SCORE

CIS = ("auto", "bootstrap", "t")


def confidence_band(values, ci: str, level: float = 0.95) -> tuple[float, float, float]:
    """Mean and a ``level`` confidence interval of the mean over seeds (no band for one seed): ``"auto"``
    (Student's t below :data:`marl_ppo.stats.T_BELOW` seeds, else the bootstrap), ``"bootstrap"``, the
    percentile bootstrap of :func:`marl_ppo.stats.bootstrap_interval` (seeded), or ``"t"``, Student's t."""
    import numpy as np

    from marl_ppo.stats import mean_interval

    if ci not in CIS:
        raise ValueError(f"ci must be one of {list(CIS)}, got {ci!r}")
    x = np.asarray(values, dtype=float)
    mean = float(x.mean())
    if len(x) < 2 or np.allclose(x, x[0]):
        return mean, mean, mean
    low, high, _ = mean_interval(x, ci, level=level)
    return mean, float(low), float(high)


class Curve(NamedTuple):
    """One line of a panel: the mean over seeds and its band at each evaluation step, the number of seeds, the
    metric drawn, and the final evaluation's ``(x, mean, low, high)`` (``absolute_metrics``)."""

    x: list[float]
    mean: list[float]
    low: list[float]
    high: list[float]
    seeds: int
    metric: str
    final: tuple[float, float, float, float]


def _metric(runs: Mapping[str, Any], metric: str) -> str:
    """``metric``, or ``return`` for a task whose runs lack it (a task left unscored)."""
    first = next(iter(runs.values()))
    return metric if metric in first["absolute_metrics"] else "return"


def suite_curves(data: Mapping[str, Any], *, metric: str = SCORE, ci: str = "auto") -> dict[str, dict[str, Curve]]:
    """The lines :func:`plot_suite` draws: ``{"<env>/<task>": {algorithm: Curve}}``.

    At each evaluation step the line is the mean over seeds of each seed's mean ``metric`` (a task without it:
    ``return``); the band is the 95 % interval ``ci`` of that mean (:func:`confidence_band`), as is the final
    point's, over each seed's mean ``absolute_metrics``: the report's per-task figures. Seeds are aligned by
    ``step_<K>``; x is the mean ``step_count`` of the seeds at that step. Sweep variants (``mappo[lr=0.001]``)
    are algorithms of their own: one line each per task.
    """
    import numpy as np

    validate_marl_eval(data)
    panels: dict[str, dict[str, Curve]] = {}
    for env, tasks in data.items():
        for task, algos in tasks.items():
            lines = panels.setdefault(f"{env}/{task}", {})
            for algo, runs in sorted(algos.items()):
                name = _metric(runs, metric)
                by_step: dict[int, list[tuple[int, float]]] = {}
                for steps in runs.values():
                    for key, step in steps.items():
                        if key.startswith("step_") and name in step:
                            point = (step["step_count"], float(np.mean(step[name])))
                            by_step.setdefault(int(key[5:]), []).append(point)
                xs, mean, low, high = [], [], [], []
                for k in sorted(by_step):
                    counts, vals = zip(*by_step[k])
                    m, lo, hi = confidence_band(vals, ci)
                    xs.append(float(np.mean(counts)))
                    mean.append(m)
                    low.append(lo)
                    high.append(hi)
                if xs:
                    finals = [float(np.mean(s["absolute_metrics"][name])) for s in runs.values()]
                    lines[algo] = Curve(xs, mean, low, high, len(runs), name, (xs[-1], *confidence_band(finals, ci)))
    return panels


def plot_suite(
    json_path: str | Path | Mapping[str, Any],
    out_png: str | Path,
    *,
    metric: str = SCORE,
    ci: str = "auto",
    title: Optional[str] = None,
) -> Path:
    """One panel per (environment, task): ``metric`` vs frames, one line per algorithm or sweep variant, and
    its final evaluation as a point with its interval.

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
        for algo, c in lines.items():
            (line,) = ax.plot(c.x, c.mean, marker="." if len(c.x) < 30 else None, label=f"{algo} ({c.seeds} seeds)")
            ax.fill_between(c.x, c.low, c.high, color=line.get_color(), alpha=0.25, linewidth=0)
            x, m, lo, hi = c.final
            ax.errorbar([x], [m], yerr=[[m - lo], [hi - m]], fmt="D", color=line.get_color(), capsize=3)
        ax.set_title(panel.replace("/", " / ", 1))
        ax.set_xlabel("frames (◆: final evaluation)")
        ax.set_ylabel(f"eval {next(iter(lines.values())).metric}" if lines else "eval")
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
