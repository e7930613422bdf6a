"""The statistics of results across seeds: a seeded bootstrap interval of the mean (scipy), a
description of a set of returns, and the interquartile mean.

Every interval is a 95 % percentile bootstrap of the mean over seeds (``scipy.stats.bootstrap``,
``method="percentile"``, as rliable's intervals are), drawn from a generator seeded with ``seed``:
the same returns give the same interval on any machine.

>>> summary = describe([1.0, 2.0, 3.0, 4.0])
>>> summary["mean"], round(summary["sd"], 4), summary["n"]
(2.5, 1.291, 4)
>>> iqm([[1.0, 2.0], [3.0, 4.0], [5.0, 100.0], [-50.0, 6.0]])
3.5
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["bootstrap_interval", "describe", "iqm", "LEVEL", "RESAMPLES"]

LEVEL, RESAMPLES = 0.95, 10_000


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


def describe(values: Sequence[float], *, seed: int = 0) -> dict[str, Any]:
    """``{"n", "mean", "sd", "ci95", "values"}`` of a set of returns, one per seed: the sample standard
    deviation (``None`` for one seed) and the 95 % bootstrap interval of the mean (:func:`bootstrap_interval`)."""
    x = np.asarray(values, dtype=float)
    if x.ndim != 1 or not len(x):
        raise ValueError(f"describe takes a non-empty list of returns (one per seed), got shape {x.shape}")
    low, high = bootstrap_interval(x, seed=seed)
    return {
        "n": len(x),
        "mean": float(x.mean()),
        "sd": float(x.std(ddof=1)) if len(x) > 1 else None,
        "ci95": [float(low), float(high)],
        "values": [float(v) for v in x],
    }


def iqm(scores: Sequence[Sequence[float]] | np.ndarray) -> float:
    """The interquartile mean of a ``[runs, tasks]`` score matrix: the mean of the middle 50 % of all its
    scores (25 % trimmed from each end), rliable's ``aggregate_iqm``."""
    from scipy import stats

    return float(stats.trim_mean(np.asarray(scores, dtype=float).reshape(-1), proportiontocut=0.25))
