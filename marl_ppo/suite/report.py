"""A suite's results as statistics (:func:`write_report`): ``report.md``, ``report.json`` and figures beside
its ``marl_eval.json``.

Each task is scored on its ``score`` metric (:mod:`marl_ppo.suite.scoring`). Each variant's final score per
task (the mean of each run's ``absolute_metrics`` episodes) is summarised across its seeds: mean, sd and the
95 % interval of the mean, the interval ``returns.png`` draws at its final points (:func:`confidence_band`).
With ``rliable`` installed (the ``results`` extra), the scores are normalised per task by the suite's
protocol (:mod:`marl_ppo.suite.normalise`; by default marl-eval's, so the report's figures are those marl-eval
computes from ``marl_eval.json``) and aggregated per environment as marl-eval does: the interquartile mean,
the mean, the median and the optimality gap with stratified bootstrap intervals, the performance profile,
and the probability of improvement of each variant over each other one.

Every bootstrap draws from a generator seeded with 0 (:data:`marl_ppo.stats.RESAMPLES` resamples per task,
``AGGREGATE_RESAMPLES`` for the aggregates): the same JSON gives the same report. Whatever cannot be
computed (a task not scored, an environment whose runs differ between variants, a figure) is named in the
report with why, and the rest is written. Written by hand: the Markdown; rliable computes and draws the rest.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any, Mapping, Optional

import numpy as np

from marl_ppo.stats import METHOD_TEXT, T_BELOW
from marl_ppo.suite._files import write_json
from marl_ppo.suite.normalise import normalise
from marl_ppo.suite.plot import confidence_band
from marl_ppo.suite.scoring import SCORE

__all__ = ["final_scores", "summary", "aggregate", "write_report", "AGGREGATE_RESAMPLES"]

AGGREGATE_RESAMPLES = 2000
METRICS = ("IQM", "mean", "median", "optimality gap")
EXTRA_HINT = "pip install 'marl-ppo[results]' (rliable)"
PROTOCOL_TEXT = {
    "marl-eval": "marl-eval (Gorsane et al., 2022; id-marl-eval 0.0.4's data_process_pipeline and "
    "create_matrices_for_rliable): each task's score min-max normalised over every logged evaluation of every "
    "run, episode by episode (the per-step entries and the final evaluations), as marl-eval keeps its bounds",
    "final": "final: each task's score min-max normalised over the final evaluations of its runs only",
    "reference": "reference: each task's score normalised by its reference scores from the suite file, "
    "(score - random) / (expert - random)",
}
INTERVAL_TEXT = METHOD_TEXT


def final_scores(data: Mapping[str, Any], metric: str = SCORE) -> dict[str, dict[str, dict[str, float]]]:
    """``{variant: {"<env>/<task>": {run: final}}}``: each run's mean ``absolute_metrics`` ``metric`` (tasks
    without it left out)."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for env, tasks in data.items():
        for task, variants in tasks.items():
            for variant, runs in variants.items():
                for run, steps in runs.items():
                    if metric in steps["absolute_metrics"]:
                        final = float(np.mean(steps["absolute_metrics"][metric]))
                        out.setdefault(variant, {}).setdefault(f"{env}/{task}", {})[run] = final
    return out


def summary(values: list[float], ci: str) -> dict[str, Any]:
    """``{"n", "mean", "sd", "ci95", "values"}`` over seeds, the interval ``ci`` as the plot draws it."""
    x = np.asarray(values, dtype=float)
    mean, low, high = confidence_band(x, ci)
    sd = float(x.std(ddof=1)) if len(x) > 1 else None
    method = ("t" if len(x) < T_BELOW else "bootstrap") if ci == "auto" else ci
    return {"n": len(x), "mean": mean, "sd": sd, "ci95": [low, high], "method": method, "values": [float(v) for v in x]}


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


def write_report(
    data: Mapping[str, Any],
    out_dir: str | Path,
    *,
    title: str | None = None,
    protocol: str = "marl-eval",
    references: Optional[Mapping[str, tuple[float, float]]] = None,
    ci: str = "auto",
    scored_on: Optional[Mapping[str, list[str]]] = None,
    not_scored: Optional[Mapping[str, str]] = None,
) -> Path:
    """Writes ``report.md`` and ``report.json`` (and, with rliable, ``aggregate.png``, ``profiles.png`` and
    ``improvement.png`` per environment) into ``out_dir`` from a suite's marl-eval ``data`` (its tasks scored:
    ``scored_on`` says on what, ``not_scored`` why not); returns the Markdown's path."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    finals = final_scores(data)
    per_task = {v: {t: summary(list(r.values()), ci) for t, r in tasks.items()} for v, tasks in finals.items()}
    report: dict[str, Any] = {
        "protocol": protocol,
        "interval": INTERVAL_TEXT[ci],
        "scored_on": dict(scored_on or {}),
        "final_score": per_task,
        "not_scored": dict(not_scored or {}),
        "environments": {},
        "not_computed": {},
    }
    lines = [f"# {title or 'Suite'}: results", "", f"Protocol: {PROTOCOL_TEXT[protocol]}.", ""]
    lines += [f"- `{t}` scored on {' + '.join(f'`{m}`' for m in on)}" for t, on in report["scored_on"].items()]
    lines += [
        "",
        "Final score of each variant per task: the mean over its seeds of each run's final evaluation",
        f"(`absolute_metrics`), the sample sd, and the {INTERVAL_TEXT[ci]} of the mean: the final points of",
        "`returns.png`.",
        "",
        "| variant | task | seeds | mean | sd | 95 % interval | method |",
        "|---|---|---:|---:|---:|---|---|",
    ]
    for v, tasks in per_task.items():
        for t, d in sorted(tasks.items()):
            sd = f"{d['sd']:.4g}" if d["sd"] is not None else "–"
            lines.append(
                f"| {v} | {t} | {d['n']} | {d['mean']:.4g} | {sd} | [{d['ci95'][0]:.4g}, {d['ci95'][1]:.4g}] "
                f"| {d['method']} |"
            )
    for task, why in report["not_scored"].items():
        report["not_computed"][f"score of {task}"] = why
    if importlib.util.find_spec("rliable") is None:
        report["not_computed"]["aggregates"] = f"rliable is not installed: {EXTRA_HINT}"
    else:
        lines += _aggregates(data, report, protocol, references, out_dir)
    if report["not_computed"]:
        lines += ["", "## Not computed", ""]
        lines += [f"- {what}: {why}" for what, why in report["not_computed"].items()]
    write_json(out_dir / "report.json", report)
    path = out_dir / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def _aggregates(
    data: Mapping[str, Any],
    report: dict[str, Any],
    protocol: str,
    references: Optional[Mapping[str, tuple[float, float]]],
    out_dir: Path,
) -> list[str]:
    """Each environment's rliable aggregates into ``report`` and its figures; their Markdown lines."""
    import warnings

    normalised, refused = normalise(data, protocol, references)
    for env, why in refused.items():
        report["not_computed"][f"aggregates of {env}"] = why
    lines = []
    for env, norm in normalised.items():
        with warnings.catch_warnings():  # rliable 1.2 hands arch its seeded RandomState as random_state=
            warnings.filterwarnings("ignore", "random_state is deprecated", FutureWarning)
            stats = {"tasks": norm["tasks"], "bounds": norm["bounds"], **aggregate(norm["scores"])}
        report["environments"][env] = stats
        suffix = "" if len(data) == 1 else f"-{env}"
        lines += _aggregate_lines(env, stats, suffix)
        try:
            _figures(stats, out_dir, suffix)
        except Exception as err:  # a figure is not worth the report: say which and why
            report["not_computed"][f"figures of {env}"] = f"{type(err).__name__}: {err}"
    return lines


def _aggregate_lines(env: str, stats: Mapping[str, Any], suffix: str) -> list[str]:
    lines = [
        "",
        f"## Aggregate over the tasks of {env} (rliable)",
        "",
        f"Tasks: {', '.join(f'`{t}`' for t in stats['tasks'])}; per environment, as marl-eval aggregates; "
        f"stratified bootstrap 95 % intervals ({AGGREGATE_RESAMPLES} resamples, seed 0). Figures: "
        f"`aggregate{suffix}.png`, `profiles{suffix}.png`, `improvement{suffix}.png`.",
        "",
        "| variant | " + " | ".join(METRICS) + " |",
        "|---|" + "---|" * len(METRICS),
    ]
    for v, st in stats["aggregate"].items():
        cells = [f"{st[m]['value']:.3f} [{st[m]['ci95'][0]:.3f}, {st[m]['ci95'][1]:.3f}]" for m in METRICS]
        lines.append(f"| {v} | " + " | ".join(cells) + " |")
    if stats["probability_of_improvement"]:
        lines += ["", "| X | Y | P(X > Y) | 95 % interval |", "|---|---|---:|---|"]
        for pair, p in stats["probability_of_improvement"].items():
            x, y = pair.split(",", 1)
            lines.append(f"| {x} | {y} | {p['value']:.3f} | [{p['ci95'][0]:.3f}, {p['ci95'][1]:.3f}] |")
    return lines


def _figures(report: Mapping[str, Any], out_dir: Path, suffix: str) -> None:
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
    fig.savefig(out_dir / f"aggregate{suffix}.png", dpi=100, bbox_inches="tight")
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
    fig.savefig(out_dir / f"profiles{suffix}.png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    if report["probability_of_improvement"]:
        pairs = report["probability_of_improvement"]
        ax = plot_utils.plot_probability_of_improvement(
            {p: np.array([q["value"]]) for p, q in pairs.items()},
            {p: np.array([[q["ci95"][0]], [q["ci95"][1]]]) for p, q in pairs.items()},
        )
        ax.figure.savefig(out_dir / f"improvement{suffix}.png", dpi=100, bbox_inches="tight")
        plt.close(ax.figure)
