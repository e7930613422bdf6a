"""A suite's results from its marl-eval JSON (:func:`write_results`): the scores, ``marl_eval.json``,
``scoring.json``, ``returns.png`` and the report, written one after another so that one that fails costs only
itself. The suite runner and ``suite merge`` (which rebuilds them from a suite's output folder) share it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional

from marl_ppo.suite.marl_eval import write_marl_eval
from marl_ppo.suite.scoring import ScoreSpec, add_scores, write_scoring

__all__ = ["Written", "write_results", "REBUILD_HINT"]

JSON_NAME, PLOT_NAME = "marl_eval.json", "returns.png"
REBUILD_HINT = "the runs are kept; `marl-ppo suite merge {out} --out DIR` rebuilds the results from marl_eval.json"


@dataclass
class Written:
    """The files written (``None``: not written) and, for each that could not be, why."""

    json_path: Optional[Path] = None
    plot_path: Optional[Path] = None
    report_path: Optional[Path] = None
    errors: dict[str, str] = field(default_factory=dict)


def _why(err: BaseException) -> str:
    return f"{type(err).__name__}: {err}"


def write_results(
    data: dict[str, Any],
    out_dir: Path,
    *,
    specs: Mapping[str, ScoreSpec],
    protocol: str = "marl-eval",
    references: Optional[Mapping[str, tuple[float, float]]] = None,
    ci: str = "auto",
    plot: bool = True,
    title: Optional[str] = None,
    scored_before: Optional[Mapping[str, list[str]]] = None,
) -> Written:
    """Scores ``data``'s tasks (``specs``: ``{"<env>/<task>": score}``; :func:`add_scores`) and writes
    ``marl_eval.json``, ``scoring.json``, ``returns.png`` (``plot``) and ``report.md`` in ``out_dir``. Never
    raises for what it writes after the JSON: each failure is in :attr:`Written.errors`, and the report says
    which tasks it could not score and why. ``scored_before``: what merged parts' tasks were scored on."""
    from marl_ppo.suite.plot import plot_suite
    from marl_ppo.suite.report import write_report

    out = Written()
    scored_on, not_scored = add_scores(data, specs)
    scored_on = {t: list((scored_before or {}).get(t, on)) if on == ["score"] else on for t, on in scored_on.items()}
    out.json_path = write_marl_eval(data, out_dir / JSON_NAME)  # validated: a JSON that fails here is a bug
    scoring = {
        "protocol": protocol,
        "ci": ci,
        "scored_on": scored_on,
        "not_scored": not_scored,
        "references": {t: list(r) for t, r in (references or {}).items()},
    }
    write_scoring(out_dir, scoring)
    if plot:
        try:
            out.plot_path = plot_suite(data, out_dir / PLOT_NAME, ci=ci, title=title)
        except Exception as err:  # the figure is lost, not the suite's results
            out.errors[PLOT_NAME] = _why(err)
    try:
        out.report_path = write_report(
            data,
            out_dir,
            title=title,
            protocol=protocol,
            references=references,
            ci=ci,
            scored_on=scored_on,
            not_scored=not_scored,
        )
    except Exception as err:
        out.errors["report.md"] = _why(err)
    return out
