"""A suite's results as statistics (:func:`write_report`): ``report.md``, ``report.json`` and figures beside
its ``marl_eval.json``.

Each variant's final return per task (the mean of each run's ``absolute_metrics`` episodes) is summarised
across its seeds: mean, sd and the 95 % bootstrap interval of the mean (:func:`marl_ppo.stats.describe`).
With ``rliable`` installed (the ``results`` extra), the protocol of Agarwal et al. (2021) follows, as
BenchMARL and marl-eval report it: the returns min-max normalised per task over every run of the suite,
then per variant the interquartile mean, the mean, the median and the optimality gap with stratified
bootstrap intervals, the performance profile (the fraction of runs above each normalised score), and the
probability of improvement of each variant over each other one.

Every bootstrap draws from a generator seeded with 0 (:data:`marl_ppo.stats.RESAMPLES` resamples per task,
``AGGREGATE_RESAMPLES`` for the aggregates): the same JSON gives the same report. Written by hand: the score
matrices and the Markdown; rliable computes and draws the rest.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from marl_ppo.stats import RESAMPLES, describe
from marl_ppo.suite._files import write_json

__all__ = ["final_returns", "normalised_scores", "aggregate", "write_report", "AGGREGATE_RESAMPLES"]

AGGREGATE_RESAMPLES = 2000
METRICS = ("IQM", "mean", "median", "optimality gap")
EXTRA_HINT = "pip install 'marl-ppo[results]' (rliable)"


def final_returns(data: Mapping[str, Any], metric: str = "return") -> dict[str, dict[str, dict[str, float]]]:
    """``{variant: {"<env>/<task>": {run: final return}}}``: each run's mean ``absolute_metrics`` ``metric``."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for env, tasks in data.items():
        for task, variants in tasks.items():
            for variant, runs in variants.items():
                per_task = out.setdefault(variant, {}).setdefault(f"{env}/{task}", {})
                for run, steps in runs.items():
                    per_task[run] = float(np.mean(steps["absolute_metrics"][metric]))
    return out


def normalised_scores(
    finals: Mapping[str, Mapping[str, Mapping[str, float]]],
) -> tuple[list[str], dict[str, np.ndarray]]:
    """The tasks and each variant's ``[runs, tasks]`` matrix of returns min-max normalised per task over every run of
    every variant (a task whose runs all score the same: 1). Runs are taken in their names' order; every task of a
    variant needs the same number of runs (a :class:`ValueError` names the one that differs)."""
    tasks = sorted({task for per_task in finals.values() for task in per_task})
    low = {t: min(v for per_task in finals.values() for v in per_task.get(t, {}).values()) for t in tasks}
    high = {t: max(v for per_task in finals.values() for v in per_task.get(t, {}).values()) for t in tasks}
    scores = {}
    for variant, per_task in finals.items():
        counts = {t: len(per_task.get(t, {})) for t in tasks}
        if len(set(counts.values())) != 1:
            raise ValueError(f"variant {variant} has different numbers of runs per task: {counts}")
        columns = []
        for t in tasks:
            values = np.array([per_task[t][run] for run in sorted(per_task[t])])
            span = high[t] - low[t]
            columns.append((values - low[t]) / span if span > 0 else np.ones_like(values))
        scores[variant] = np.stack(columns, axis=1)
    return tasks, scores


def aggregate(scores: Mapping[str, np.ndarray], seed: int = 0) -> dict[str, Any]:
    """rliable's aggregate statistics of normalised ``scores`` (``{variant: [runs, tasks]}``): point estimates and
    stratified bootstrap 95 % intervals of :data:`METRICS`, performance profiles over 51 thresholds in [0, 1], and
    the probability of improvement of each variant over each other one."""
    from rliable import library as rly
    from rliable import metrics

    # rliable 1.2's stratified bootstraps draw their resamples with numpy's global np.random.choice, whatever
    # random_state they are handed: seed the global generator for the call and give the caller's state back.
    outer = np.random.get_state()
    np.random.seed(seed)
    try:
        return _aggregate(scores, seed, rly, metrics)
    finally:
        np.random.set_state(outer)


def _aggregate(scores: Mapping[str, np.ndarray], seed: int, rly, metrics) -> dict[str, Any]:
    def stats(x):
        return np.array(
            [
                metrics.aggregate_iqm(x),
                metrics.aggregate_mean(x),
                metrics.aggregate_median(x),
                metrics.aggregate_optimality_gap(x),
            ]
        )

    points, intervals = rly.get_interval_estimates(
        dict(scores), stats, reps=AGGREGATE_RESAMPLES, random_state=np.random.RandomState(seed)
    )
    taus = np.linspace(0.0, 1.0, 51)
    profiles, profile_cis = rly.get_interval_estimates(
        dict(scores),
        lambda x: rly.score_distributions(x, taus),
        reps=AGGREGATE_RESAMPLES,
        random_state=np.random.RandomState(seed),
    )  # rliable's create_performance_profile, with a seeded generator
    names = list(scores)
    pairs = {f"{x},{y}": [scores[x], scores[y]] for x in names for y in names if x != y}
    improvement, improvement_cis = (
        rly.get_interval_estimates(
            pairs,
            metrics.probability_of_improvement,
            reps=AGGREGATE_RESAMPLES,
            random_state=np.random.RandomState(seed),
        )
        if pairs
        else ({}, {})
    )
    return {
        "aggregate": {
            v: {
                m: {"value": float(points[v][i]), "ci95": [float(intervals[v][0][i]), float(intervals[v][1][i])]}
                for i, m in enumerate(METRICS)
            }
            for v in names
        },  # fmt: skip
        "profiles": {"tau": taus.tolist(), **{v: profiles[v].tolist() for v in names}},
        "profile_ci95": {v: profile_cis[v].tolist() for v in names},
        "probability_of_improvement": {
            p: {"value": float(np.squeeze(improvement[p])), "ci95": [float(np.squeeze(c)) for c in improvement_cis[p]]}
            for p in pairs
        },
    }


def write_report(data: Mapping[str, Any], out_dir: str | Path, *, title: str | None = None) -> Path:
    """Writes ``report.md`` and ``report.json`` (and, with rliable, ``aggregate.png``, ``profiles.png`` and
    ``improvement.png``) into ``out_dir`` from a suite's marl-eval ``data``; returns the Markdown's path."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    finals = final_returns(data)
    per_task = {v: {t: describe(list(runs.values())) for t, runs in tasks.items()} for v, tasks in finals.items()}
    report: dict[str, Any] = {"final_return": per_task}
    lines = [f"# {title or 'Suite'}: results", ""]
    lines += [
        "Final return of each variant per task: the mean over its seeds of each run's final evaluation",
        "(`absolute_metrics`), the sample sd, and the 95 % bootstrap interval of the mean",
        f"({RESAMPLES} resamples, seed 0).",
        "",
        "| variant | task | seeds | mean | sd | 95 % interval |",
        "|---|---|---:|---:|---:|---|",
    ]
    for v, tasks in per_task.items():
        for t, d in sorted(tasks.items()):
            sd = f"{d['sd']:.4g}" if d["sd"] is not None else "–"
            lines.append(
                f"| {v} | {t} | {d['n']} | {d['mean']:.4g} | {sd} | [{d['ci95'][0]:.4g}, {d['ci95'][1]:.4g}] |"
            )
    if importlib.util.find_spec("rliable") is None:
        lines += ["", f"Aggregate statistics (IQM, performance profiles, probability of improvement): {EXTRA_HINT}."]
    else:
        import warnings

        try:
            tasks, scores = normalised_scores(finals)
        except ValueError as err:  # the runs are kept: the report says why it has no aggregates
            lines += ["", f"No aggregate statistics: {err} (rliable's stratified bootstrap needs as many per task)."]
            report["aggregate_refused"] = str(err)
        else:
            with warnings.catch_warnings():  # rliable 1.2 hands arch its seeded RandomState as random_state=
                warnings.filterwarnings("ignore", "random_state is deprecated", FutureWarning)
                report.update(tasks=tasks, **aggregate(scores))
            lines += _aggregate_lines(report, len(tasks))
            _figures(report, out_dir)
    write_json(out_dir / "report.json", report)
    path = out_dir / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def _aggregate_lines(report: Mapping[str, Any], n_tasks: int) -> list[str]:
    lines = [
        "",
        "## Aggregate over tasks (rliable)",
        "",
        f"Scores: each task's returns min-max normalised over every run of the suite ({n_tasks} task(s)); "
        f"stratified bootstrap 95 % intervals ({AGGREGATE_RESAMPLES} resamples, seed 0). Figures: `aggregate.png`, "
        "`profiles.png`, `improvement.png`.",
        "",
        "| variant | " + " | ".join(METRICS) + " |",
        "|---|" + "---|" * len(METRICS),
    ]
    for v, stats in report["aggregate"].items():
        cells = [f"{stats[m]['value']:.3f} [{stats[m]['ci95'][0]:.3f}, {stats[m]['ci95'][1]:.3f}]" for m in METRICS]
        lines.append(f"| {v} | " + " | ".join(cells) + " |")
    if report["probability_of_improvement"]:
        lines += ["", "| X | Y | P(X > Y) | 95 % interval |", "|---|---|---:|---|"]
        for pair, p in report["probability_of_improvement"].items():
            x, y = pair.split(",", 1)
            lines.append(f"| {x} | {y} | {p['value']:.3f} | [{p['ci95'][0]:.3f}, {p['ci95'][1]:.3f}] |")
    return lines


def _figures(report: Mapping[str, Any], out_dir: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from rliable import plot_utils

    names = list(report["aggregate"])
    points = {v: np.array([report["aggregate"][v][m]["value"] for m in METRICS]) for v in names}
    cis = {v: np.array([[report["aggregate"][v][m]["ci95"][k] for m in METRICS] for k in (0, 1)]) for v in names}
    fig, _ = plot_utils.plot_interval_estimates(
        points,
        cis,
        metric_names=list(METRICS),
        algorithms=names,
        row_height=0.6,
        xlabel_y_coordinate=-0.1 - 0.5 / len(names),
    )
    fig.savefig(out_dir / "aggregate.png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    taus = np.array(report["profiles"]["tau"])
    fig, ax = plt.subplots(figsize=(6, 4))
    plot_utils.plot_performance_profiles(
        {v: np.array(report["profiles"][v]) for v in names},
        taus,
        performance_profile_cis={v: np.array(report["profile_ci95"][v]) for v in names},
        ax=ax,
        legend=True,
    )
    fig.savefig(out_dir / "profiles.png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    if report["probability_of_improvement"]:
        pairs = report["probability_of_improvement"]
        ax = plot_utils.plot_probability_of_improvement(
            {p: np.array([q["value"]]) for p, q in pairs.items()},
            {p: np.array([[q["ci95"][0]], [q["ci95"][1]]]) for p, q in pairs.items()},
        )
        ax.figure.savefig(out_dir / "improvement.png", dpi=100, bbox_inches="tight")
        plt.close(ax.figure)
