"""The statistics of results across seeds: a 95 % interval of the mean whose coverage holds at the seed
counts papers run, a description of a set of returns, and the interquartile mean.

:func:`mean_interval` picks the method by the number of seeds (``auto``): below :data:`T_BELOW` seeds,
Student's t; from it, a percentile bootstrap (``scipy.stats.bootstrap``, ``method="percentile"``, as
rliable's intervals are, drawn from a generator seeded with ``seed``: the same returns give the same
interval on any machine). A percentile bootstrap of 3 seeds is their range (each extreme resample has
probability 1/27 > 2.5 %), not a 95 % interval; Student's t holds its coverage there for returns near
normal.

>>> summary = describe([1.0, 2.0, 3.0, 4.0])
>>> summary["mean"], round(summary["sd"], 4), summary["n"], summary["method"]
(2.5, 1.291, 4, 't')
>>> [round(v, 3) for v in describe([1.0, 2.0, 3.0])["ci95"]]  # not [1, 3], the range
[-0.484, 4.484]
>>> iqm([[1.0, 2.0], [3.0, 4.0], [5.0, 100.0], [-50.0, 6.0]])
3.5
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["bootstrap_interval", "mean_interval", "describe", "iqm", "LEVEL", "RESAMPLES", "T_BELOW", "METHODS"]

LEVEL, RESAMPLES = 0.95, 10_000
T_BELOW = 10  # auto: Student's t below this many seeds, the percentile bootstrap from it
METHODS = ("auto", "bootstrap", "t")
METHOD_TEXT = {
    "auto": f"95 % interval of the mean: Student's t below {T_BELOW} seeds (a percentile bootstrap of 3 seeds is "
    f"their range), a percentile bootstrap ({RESAMPLES} resamples, seed 0) from {T_BELOW}",
    "bootstrap": f"95 % percentile bootstrap interval ({RESAMPLES} resamples, seed 0; at 3 seeds: their range)",
    "t": "95 % t-interval",
}


def mean_interval(values, method: str = "auto", *, level: float = LEVEL, seed: int = 0) -> tuple[Any, Any, str]:
    """``(low, high, method used)``: the ``level`` interval of the mean of ``values`` along its last axis (seeds),
    by ``method``: ``t``, ``bootstrap`` (:func:`bootstrap_interval`) or ``auto`` (t below :data:`T_BELOW` seeds).
    One seed, or seeds that all agree: the mean itself."""
    from scipy import stats

    if method not in METHODS:
        raise ValueError(f"interval method must be one of {list(METHODS)}, got {method!r}")
    x = np.asarray(values, dtype=float)
    n = x.shape[-1]
    used = ("t" if n < T_BELOW else "bootstrap") if method == "auto" else method
    if used == "bootstrap":
        return (*bootstrap_interval(x, level=level, seed=seed), used)
    mean = x.mean(axis=-1)
    same = np.all(x == x[..., :1], axis=-1)
    if n < 2:
        low = high = mean
    else:
        with np.errstate(invalid="ignore", divide="ignore"):
            half = stats.t.ppf(0.5 + level / 2, n - 1) * x.std(axis=-1, ddof=1) / np.sqrt(n)
        low, high = np.where(same, mean, mean - half), np.where(same, mean, mean + half)
    return (float(low), float(high), used) if x.ndim == 1 else (low, high, used)


def bootstrap_interval(
    values: Sequence[float] | np.ndarray, *, level: float = LEVEL, resamples: int = RESAMPLES, seed: int = 0
) -> tuple[Any, Any]:
    """The ``level`` percentile bootstrap interval of the mean of ``values`` along its last axis (seeds): two
    floats for a list of returns; other axes (evaluation points of a curve) are bootstrapped at once, with
    the same resamples, into two arrays. One seed, or seeds that all agree: the interval is the mean itself."""
    from scipy import stats

    x = np.asarray(values, dtype=float)
    mean = x.mean(axis=-1)
    if x.shape[-1] < 2 or np.all(x == x[..., :1]):
        return (float(mean), float(mean)) if x.ndim == 1 else (mean, mean)
    res = stats.bootstrap(
        (x,),
        np.mean,
        axis=-1,
        confidence_level=level,
        n_resamples=resamples,
        method="percentile",
        random_state=np.random.default_rng(seed),
    )
    low, high = res.confidence_interval
    # where the seeds of one point agree, the interval is that value (scipy gives NaN for a constant sample)
    same = np.all(x == x[..., :1], axis=-1)
    low, high = np.where(same, mean, low), np.where(same, mean, high)
    return (float(low), float(high)) if x.ndim == 1 else (low, high)


def describe(values: Sequence[float], *, seed: int = 0, method: str = "auto") -> dict[str, Any]:
    """``{"n", "mean", "sd", "ci95", "method", "values"}`` of a set of returns, one per seed: the sample standard
    deviation (``None`` for one seed) and the 95 % interval of the mean (:func:`mean_interval`, its method)."""
    x = np.asarray(values, dtype=float)
    if x.ndim != 1 or not len(x):
        raise ValueError(f"describe takes a non-empty list of returns (one per seed), got shape {x.shape}")
    low, high, used = mean_interval(x, method, seed=seed)
    return {
        "n": len(x),
        "mean": float(x.mean()),
        "sd": float(x.std(ddof=1)) if len(x) > 1 else None,
        "ci95": [float(low), float(high)],
        "method": used,
        "values": [float(v) for v in x],
    }


def iqm(scores: Sequence[Sequence[float]] | np.ndarray) -> float:
    """The interquartile mean of a ``[runs, tasks]`` score matrix: the mean of the middle 50 % of all its
    scores (25 % trimmed from each end), rliable's ``aggregate_iqm``."""
    from scipy import stats

    return float(stats.trim_mean(np.asarray(scores, dtype=float).reshape(-1), proportiontocut=0.25))
