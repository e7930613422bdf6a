"""A suite's report (marl_ppo/suite/report.py): per-variant summaries across seeds and rliable's aggregate
statistics, on a hand-made marl-eval JSON whose answers are known."""

from __future__ import annotations

import json

import numpy as np
import pytest

from marl_ppo.stats import describe
from marl_ppo.suite.report import final_returns, normalised_scores, write_report


def _run(final: float) -> dict:
    return {"step_1": {"step_count": 100, "return": [final]}, "absolute_metrics": {"return": [final - 1, final + 1]}}


# two tasks, two variants, three seeds: variant "good" beats "poor" on every run of both tasks
FINALS = {
    "nav": {"good": [10.0, 12.0, 11.0], "poor": [2.0, 4.0, 3.0]},
    "bal": {"good": [100.0, 90.0, 95.0], "poor": [50.0, 60.0, 55.0]},
}
DATA = {
    "vmas": {
        task: {variant: {f"seed_{s}": _run(v) for s, v in enumerate(values)} for variant, values in variants.items()}
        for task, variants in FINALS.items()
    }
}


def test_final_returns_and_scores_normalised_per_task_over_the_whole_suite():
    finals = final_returns(DATA)
    assert finals["good"]["vmas/nav"] == {"seed_0": 10.0, "seed_1": 12.0, "seed_2": 11.0}  # the episodes' mean
    tasks, scores = normalised_scores(finals)
    assert tasks == ["vmas/bal", "vmas/nav"]
    # bal spans [50, 100], nav [2, 12]
    np.testing.assert_allclose(scores["good"], [[1.0, 0.8], [0.8, 1.0], [0.9, 0.9]])
    np.testing.assert_allclose(scores["poor"], [[0.0, 0.0], [0.2, 0.2], [0.1, 0.1]])
    uneven = {"a": {"t1": {"s0": 1.0, "s1": 2.0}, "t2": {"s0": 1.0}}}
    with pytest.raises(ValueError, match="variant a has different numbers of runs per task"):
        normalised_scores(uneven)


def test_the_report_states_each_variants_seeds_and_rliables_aggregates(tmp_path):
    pytest.importorskip("rliable")
    md = write_report(DATA, tmp_path, title="demo").read_text()
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["final_return"]["good"]["vmas/nav"] == describe([10.0, 12.0, 11.0])
    assert "| good | vmas/nav | 3 | 11 | 1 | [" in md
    iqm = report["aggregate"]["good"]["IQM"]
    # the 6 normalised scores 1, .8, .8, 1, .9, .9 sorted: .8 .8 .9 .9 1 1; the middle half (25% off each end
    # of 6 scores: 1.5 each, trimmed as scipy trims, 1 each): .8 .9 .9 1
    assert iqm["value"] == pytest.approx((0.8 + 0.9 + 0.9 + 1.0) / 4)
    assert iqm["ci95"][0] <= iqm["value"] <= iqm["ci95"][1]
    assert report["aggregate"]["poor"]["optimality gap"]["value"] == pytest.approx(0.9)
    # good beats poor on every run of every task: P(good > poor) = 1 exactly, and the reverse 0
    assert report["probability_of_improvement"]["good,poor"]["value"] == 1.0
    assert report["probability_of_improvement"]["poor,good"]["value"] == 0.0
    profiles = report["profiles"]
    assert profiles["tau"][0] == 0.0 and profiles["tau"][-1] == 1.0
    assert profiles["good"][profiles["tau"].index(0.5)] == 1.0 and profiles["poor"][profiles["tau"].index(0.5)] == 0.0
    for name in ("aggregate.png", "profiles.png", "improvement.png"):
        assert (tmp_path / name).stat().st_size > 1000
    # the same JSON gives the same report (every bootstrap seeded; numpy's sums may differ in the last bit), and
    # numpy's global generator, which rliable draws from, is given back as it was
    np.random.seed(123)
    expected_next = np.random.rand()
    np.random.seed(123)
    write_report(DATA, tmp_path / "again")
    assert np.random.rand() == expected_next
    assert _rounded(json.loads((tmp_path / "again" / "report.json").read_text())) == _rounded(report)


def _rounded(obj):
    if isinstance(obj, float):
        return round(obj, 12)
    if isinstance(obj, dict):
        return {k: _rounded(v) for k, v in obj.items()}
    return [_rounded(v) for v in obj] if isinstance(obj, list) else obj


def test_a_report_over_uneven_seeds_keeps_the_table_and_says_why_it_has_no_aggregates(tmp_path):
    pytest.importorskip("rliable")
    uneven = json.loads(json.dumps(DATA))
    del uneven["vmas"]["bal"]["good"]["seed_2"]  # good: 3 runs on nav, 2 on bal
    md = write_report(uneven, tmp_path).read_text()
    assert "| good | vmas/bal | 2 | 95 |" in md and "| poor | vmas/nav | 3 | 3 |" in md
    assert "No aggregate statistics: variant good has different numbers of runs per task" in md
    report = json.loads((tmp_path / "report.json").read_text())
    assert "aggregate" not in report and "good" in report["aggregate_refused"]
    assert not (tmp_path / "aggregate.png").exists()
