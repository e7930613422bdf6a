"""A suite's report (marl_ppo/suite/report.py, normalise.py): per-variant summaries across seeds and rliable's
aggregates under each protocol, on hand-made marl-eval JSON whose answers are known, and against InstaDeep's
marl-eval (id-marl-eval 0.0.4, installed by `make test`) on the same JSON."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest

from marl_ppo.suite.normalise import marl_eval_bounds, normalise
from marl_ppo.suite.report import final_scores, summary, write_report


def _run(final: float) -> dict:
    entry = {"step_1": {"step_count": 100}, "absolute_metrics": {}}
    for metric in ("return", "score"):
        entry["step_1"][metric] = [final]
        entry["absolute_metrics"][metric] = [final - 1, final + 1]
    return entry


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


def test_final_protocol_normalises_the_final_scores_over_every_run_of_the_task():
    assert final_scores(DATA)["good"]["vmas/nav"] == {"seed_0": 10.0, "seed_1": 12.0, "seed_2": 11.0}
    (norm,), refused = normalise(DATA, "final")[0].values(), normalise(DATA, "final")[1]
    assert refused == {} and norm["tasks"] == ["vmas/nav", "vmas/bal"]  # the JSON's order, as marl-eval's
    # nav spans [2, 12], bal [50, 100]
    np.testing.assert_allclose(norm["scores"]["good"], [[0.8, 1.0], [1.0, 0.8], [0.9, 0.9]])
    np.testing.assert_allclose(norm["scores"]["poor"], [[0.0, 0.0], [0.2, 0.2], [0.1, 0.1]])


def test_marl_eval_protocol_bounds_run_over_every_episode_of_every_evaluation():
    # nav's values: steps 2..12 and the final episodes (final - 1, final + 1): 1 .. 13. bal's run from 49 to 101,
    # but marl-eval's bounds miss the 101: good seed_0's final episodes (99, 101) come first after its step (100)
    # and lower the minimum, so its `elif` never tries them against the maximum
    norm = normalise(DATA, "marl-eval")[0]["vmas"]
    assert norm["bounds"]["nav"] == [1.0, 13.0] and norm["bounds"]["bal"] == [49.0, 100.0]
    np.testing.assert_allclose(norm["scores"]["good"][0], [(10 - 1) / (12 + 1e-6), (100 - 49) / (51 + 1e-6)])


def test_reference_protocol_uses_the_suites_reference_scores():
    refs = {"vmas/nav": (0.0, 20.0), "vmas/bal": (100.0, 0.0)}
    norm = normalise(DATA, "reference", refs)[0]["vmas"]
    np.testing.assert_allclose(norm["scores"]["good"][:, 0], [0.5, 0.6, 0.55])
    np.testing.assert_allclose(norm["scores"]["poor"][:, 1], [0.5, 0.4, 0.45])
    assert "vmas/nav has no reference scores" in normalise(DATA, "reference", {})[1]["vmas"]


def _quirky() -> dict:
    """A JSON where marl-eval's running bounds miss a maximum: a step that lowers the minimum and holds the
    highest value (seed_1's step_1: -5 and 40); its `elif` never tries that 40 against the maximum."""
    data = copy.deepcopy(DATA)
    data["vmas"]["nav"]["poor"]["seed_1"]["step_1"]["score"] = [-5.0, 40.0]
    data["vmas"]["nav"]["poor"]["seed_1"]["step_1"]["return"] = [-5.0, 40.0]
    return data


def _marl_eval(data: dict, env: str = "vmas") -> dict[str, np.ndarray]:
    """marl-eval's own matrices: data_process_pipeline, then create_matrices_for_rliable, on ``score``."""
    from marl_eval.utils.data_processing_utils import create_matrices_for_rliable, data_process_pipeline

    processed = data_process_pipeline(copy.deepcopy(data), ["score"])
    assert "extra" in processed, "marl-eval refused the JSON (it prints why and returns it unprocessed)"
    matrices, _ = create_matrices_for_rliable(processed, env, ["score"])
    return matrices["mean_norm_score"]


def test_marl_eval_protocol_is_marl_evals_own_matrices_quirks_included():
    data = _quirky()
    assert marl_eval_bounds(data["vmas"]["nav"]) == (-5.0, 13.0)  # the 40 is not seen, as marl-eval does not see it
    ours = normalise(data, "marl-eval")[0]["vmas"]["scores"]
    theirs = _marl_eval(data)
    assert sorted(ours) == sorted(theirs)
    for variant in ours:
        np.testing.assert_allclose(ours[variant], theirs[variant], rtol=0, atol=1e-9)


def test_the_report_states_its_protocol_each_variants_seeds_and_rliables_aggregates(tmp_path):
    from rliable import metrics

    md = write_report(DATA, tmp_path, title="demo", protocol="final").read_text()
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["protocol"] == "final" and "Protocol: final:" in md
    assert report["final_score"]["good"]["vmas/nav"] == summary([10.0, 12.0, 11.0], "t")
    assert "| good | vmas/nav | 3 | 11 | 1 | [8.516, 13.48] | t |" in md  # 3 seeds: not their range [10, 12]
    assert "Student's t below 10 seeds" in md
    stats = report["environments"]["vmas"]
    iqm = stats["aggregate"]["good"]["IQM"]
    # the 6 normalised scores .8 1 1 .8 .9 .9 sorted: .8 .8 .9 .9 1 1; the middle half (scipy trims 1 each end)
    assert iqm["value"] == pytest.approx((0.8 + 0.9 + 0.9 + 1.0) / 4)
    assert iqm["ci95"][0] <= iqm["value"] <= iqm["ci95"][1]
    assert stats["aggregate"]["poor"]["optimality gap"]["value"] == pytest.approx(0.9)
    assert stats["probability_of_improvement"]["good,poor"]["value"] == 1.0
    assert stats["probability_of_improvement"]["poor,good"]["value"] == 0.0
    assert metrics.aggregate_iqm(np.array([[0.8, 1.0], [1.0, 0.8], [0.9, 0.9]])) == pytest.approx(iqm["value"])
    profiles = stats["profiles"]
    assert profiles["good"][profiles["tau"].index(0.5)] == 1.0 and profiles["poor"][profiles["tau"].index(0.5)] == 0.0
    for name in ("aggregate.png", "profiles.png", "improvement.png"):
        assert (tmp_path / name).stat().st_size > 1000
    # the same JSON gives the same report, and numpy's global generator (rliable's) is given back as it was
    np.random.seed(123)
    expected_next = np.random.rand()
    np.random.seed(123)
    write_report(DATA, tmp_path / "again", protocol="final")
    assert np.random.rand() == expected_next
    assert _rounded(json.loads((tmp_path / "again" / "report.json").read_text())) == _rounded(report)


def _rounded(obj):
    if isinstance(obj, float):
        return round(obj, 12)
    if isinstance(obj, dict):
        return {k: _rounded(v) for k, v in obj.items()}
    return [_rounded(v) for v in obj] if isinstance(obj, list) else obj


def test_a_report_says_what_it_could_not_compute_and_why(tmp_path):
    uneven = copy.deepcopy(DATA)
    del uneven["vmas"]["bal"]["good"]["seed_2"]  # good: 3 runs on nav, 2 on bal
    md = write_report(uneven, tmp_path, not_scored={"vmas/tag": "vmas/tag: zero-sum"}).read_text()
    assert "| good | vmas/bal | 2 | 95 |" in md and "| poor | vmas/nav | 3 | 3 |" in md
    assert "## Not computed" in md
    assert "- aggregates of vmas: variant good has runs ['seed_0', 'seed_1'] on vmas/bal" in md
    assert "- score of vmas/tag: vmas/tag: zero-sum" in md
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["environments"] == {} and not (tmp_path / "aggregate.png").exists()
    # one variant under the final protocol: its own seeds spread over [0, 1] say nothing; refused with why
    one = {"vmas": {t: {"good": v["good"]} for t, v in DATA["vmas"].items()}}
    md = write_report(one, tmp_path / "one", protocol="final").read_text()
    assert "- aggregates of vmas: one variant: min-max over its own final scores only spreads its seeds" in md
    md = write_report(one, tmp_path / "one-me").read_text()  # marl-eval's bounds include the early evaluations
    assert "## Aggregate over the tasks of vmas" in md and "Not computed" not in md
