"""Known answers of the statistics across seeds (marl_ppo/stats.py) and the seed groups of a plot."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from marl_ppo.stats import bootstrap_interval, describe, iqm

RETURNS = [1.2, 3.4, 2.2, 0.7, 2.9]


def test_the_interval_is_scipys_percentile_bootstrap_with_the_same_seed():
    want = stats.bootstrap(
        (np.array(RETURNS),), np.mean, n_resamples=10_000, method="percentile", random_state=np.random.default_rng(7)
    ).confidence_interval
    low, high = bootstrap_interval(RETURNS, seed=7)
    assert (float(low), float(high)) == (want.low, want.high)
    # by hand: the 2.5% and 97.5% quantiles of 10000 means of resamples drawn as scipy draws them
    rng = np.random.default_rng(7)
    means = np.array(RETURNS)[rng.integers(0, len(RETURNS), (10_000, len(RETURNS)))].mean(axis=1)
    assert float(low) == pytest.approx(np.percentile(means, 2.5)) and float(high) == pytest.approx(
        np.percentile(means, 97.5)
    )
    assert bootstrap_interval(RETURNS, seed=8) != (low, high)  # the seed is used


def test_a_curves_points_are_bootstrapped_at_once_and_agreeing_seeds_give_their_value():
    curve = np.array([RETURNS, [2.0] * 5, [v * 2 for v in RETURNS]])  # [points, seeds]
    low, high = bootstrap_interval(curve, seed=3)
    single_low, single_high = bootstrap_interval(RETURNS, seed=3)
    assert (low[0], high[0]) == pytest.approx((single_low, single_high))
    assert (low[1], high[1]) == (2.0, 2.0)  # no NaN where the seeds agree
    assert (low[2], high[2]) == pytest.approx((2 * single_low, 2 * single_high))
    assert bootstrap_interval([4.0], seed=0) == (4.0, 4.0)


def test_describe_a_set_of_returns():
    d = describe(RETURNS)
    mean = sum(RETURNS) / 5
    sd = (sum((v - mean) ** 2 for v in RETURNS) / 4) ** 0.5
    assert d["n"] == 5 and d["mean"] == pytest.approx(mean) and d["sd"] == pytest.approx(sd)
    # 5 seeds: Student's t, mean +- t(0.975, 4) * sd / sqrt(5)
    assert d["method"] == "t" and d["ci95"] == pytest.approx(
        [mean - 2.7764451 * sd / 5**0.5, mean + 2.7764451 * sd / 5**0.5]
    )
    ten = [float(v) for v in range(10)]
    assert describe(ten)["method"] == "bootstrap" and describe(ten)["ci95"] == list(map(float, bootstrap_interval(ten)))
    assert describe(RETURNS, method="bootstrap")["ci95"] == list(map(float, bootstrap_interval(RETURNS, seed=0)))
    assert describe([2.0])["sd"] is None and describe([2.0])["ci95"] == [2.0, 2.0]
    with pytest.raises(ValueError, match="one per seed"):
        describe([])


def test_the_interquartile_mean_of_a_known_score_matrix():
    scores = np.array([[0.1, 0.9], [0.4, 0.2], [1.0, 0.5], [0.3, 0.7]])  # 4 runs x 2 tasks
    # sorted: 0.1 0.2 0.3 0.4 0.5 0.7 0.9 1.0; the middle half: 0.3 0.4 0.5 0.7
    assert iqm(scores) == pytest.approx((0.3 + 0.4 + 0.5 + 0.7) / 4)
    rliable = pytest.importorskip("rliable.metrics")
    assert iqm(scores) == pytest.approx(rliable.aggregate_iqm(scores))


def test_at_three_seeds_the_percentile_bootstrap_is_the_range_and_the_default_interval_is_not():
    """Each extreme resample of 3 values has probability 1/27 > 2.5 %: the percentile bootstrap's "95 %" is
    [min, max]. The default (auto) is Student's t there: mean +- 4.3027 * sd / sqrt(3)."""
    values = [0.8, 0.9, 1.0]
    assert bootstrap_interval(values) == pytest.approx((0.8, 1.0))
    d = describe(values)
    half = 4.302653 * 0.1 / 3**0.5
    assert d["method"] == "t" and d["ci95"] == pytest.approx([0.9 - half, 0.9 + half])
