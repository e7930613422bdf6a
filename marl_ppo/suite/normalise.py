"""Each task's ``score`` normalised into the ``[runs, tasks]`` matrices rliable aggregates, one set per environment,
by one of three protocols (:data:`~marl_ppo.suite.scoring.PROTOCOLS`):

* ``marl-eval`` (the default): what InstaDeep's marl-eval 0.0.4 does with ``data_process_pipeline(data,
  ["score"])`` and ``create_matrices_for_rliable`` (Gorsane et al., 2022). Each task's bounds run over every
  value of every logged evaluation of every run (the per-step entries and ``absolute_metrics`` alike, episode
  by episode), kept as marl-eval keeps them: a running minimum and maximum in the JSON's order where a value
  that lowers the minimum is not also tried against the maximum (its ``elif``), and ``+1e-6`` in the
  denominator. A run's score is the mean of its normalised ``absolute_metrics``; the matrices are per
  environment, tasks and runs in the JSON's order (the runs named as in its first task's first algorithm).
* ``final``: min-max over the final scores (each run's ``absolute_metrics`` mean) of the task's runs only; with
  one variant this spreads its own seeds over [0, 1], so its aggregates are refused.
* ``reference``: ``(score - random) / (expert - random)`` with the task's reference scores from the suite file.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

import numpy as np

from marl_ppo.suite.scoring import SCORE

__all__ = ["Normalised", "normalise", "marl_eval_bounds", "EPSILON"]

EPSILON = 1e-6  # marl-eval's, added to every task's span
Normalised = dict[str, Any]  # {"tasks": [...], "scores": {variant: [runs, tasks]}, "bounds": {task: [low, high]}}


def marl_eval_bounds(task: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> tuple[float, float]:
    """A task's ``(low, high)`` as marl-eval's ``data_process_pipeline`` finds them (see the module's text).

    >>> run = {"step_1": {"score": [5.0]}, "step_2": {"score": [0.0, 9.0]}, "absolute_metrics": {"score": [7.0]}}
    >>> marl_eval_bounds({"mappo": {"seed_0": run}})  # step_2 lowers the minimum: its 9 is not seen
    (0.0, 7.0)
    """
    low = high = None
    for runs in task.values():
        for steps in runs.values():
            for entry in steps.values():
                lo, hi = float(np.min(entry[SCORE])), float(np.max(entry[SCORE]))
                if low is None:
                    low, high = lo, hi
                elif low > lo:
                    low = lo
                elif high < hi:
                    high = hi
    return low, high


def _final(steps: Mapping[str, Any]) -> float:
    return float(np.mean(steps["absolute_metrics"][SCORE]))


def _bounds(
    task: Mapping[str, Any], key: str, protocol: str, references: Mapping[str, tuple[float, float]]
) -> tuple[float, float, float]:
    """``(low, high, epsilon)``: a task's score maps to ``(score - low) / (high - low + epsilon)``."""
    if protocol == "marl-eval":
        return (*marl_eval_bounds(task), EPSILON)
    if protocol == "reference":
        if key not in references:
            raise ValueError(f"{key} has no reference scores (the task's reference: {{random, expert}})")
        return (*references[key], 0.0)
    finals = [_final(steps) for runs in task.values() for steps in runs.values()]
    return min(finals), max(finals), 0.0


def _environment(
    env: str, tasks: Mapping[str, Any], protocol: str, references: Mapping[str, tuple[float, float]]
) -> Normalised:
    """One environment's matrices; :class:`ValueError` naming what stops rliable's stratified bootstrap."""
    names = list(tasks)
    variants = list(tasks[names[0]])
    runs = list(tasks[names[0]][variants[0]])
    scores = {v: np.zeros((len(runs), len(names))) for v in variants}
    bounds = {}
    for j, task in enumerate(names):
        if sorted(tasks[task]) != sorted(variants):
            raise ValueError(f"{env}/{task} has variants {sorted(tasks[task])}, {env}/{names[0]} {sorted(variants)}")
        low, high, eps = _bounds(tasks[task], f"{env}/{task}", protocol, references)
        bounds[task] = [low, high]
        for v in variants:
            if sorted(tasks[task][v]) != sorted(runs):
                raise ValueError(
                    f"variant {v} has runs {sorted(tasks[task][v])} on {env}/{task} but {sorted(runs)} on "
                    f"{env}/{names[0]} (rliable's stratified bootstrap needs the same runs on every task)"
                )
            for i, run in enumerate(runs):
                final = _final(tasks[task][v][run])
                span = high - low + eps
                scores[v][i, j] = (final - low) / span if span != 0 else 1.0  # final protocol: all runs equal
    if protocol == "final" and len(variants) == 1:
        raise ValueError(
            "one variant: min-max over its own final scores only spreads its seeds over [0, 1]; use protocol "
            "marl-eval or give reference scores (protocol: reference)"
        )
    return {"tasks": [f"{env}/{t}" for t in names], "scores": scores, "bounds": bounds}


def normalise(
    data: Mapping[str, Any], protocol: str, references: Optional[Mapping[str, tuple[float, float]]] = None
) -> tuple[dict[str, Normalised], dict[str, str]]:
    """``({env: matrices}, {env: why not})``: each environment's scored tasks (those with a ``score``) normalised
    by ``protocol``, or the reason its aggregates cannot be computed."""
    out, refused = {}, {}
    for env, tasks in data.items():
        scored = {t: a for t, a in tasks.items() if _scored(a)}
        if not scored:
            refused[env] = "no task of it is scored"
            continue
        try:
            out[env] = _environment(env, scored, protocol, references or {})
        except ValueError as err:
            refused[env] = str(err)
    return out, refused


def _scored(task: Mapping[str, Any]) -> bool:
    return SCORE in next(iter(next(iter(task.values())).values()))["absolute_metrics"]
