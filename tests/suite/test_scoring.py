"""What a suite's tasks are scored on and how the report normalises them, through `marl-ppo suite FILE` and
`marl-ppo suite merge` as a user runs them (tiny runs: a few hundred frames):

* the report's aggregates are marl-eval's own (id-marl-eval 0.0.4 on the suite's marl_eval.json: IQM, mean,
  median, optimality gap, probability of improvement to 1e-6), with the protocol named; the plot's final
  points are the report's per-task figures;
* a competitive task is refused before any run until it names its score; named (battle's
  vs_random/red/win_rate), it is scored on it; a zero-sum task (VMAS simple_tag) is left unscored with why,
  and `suite merge --score` scores it from the JSON;
* a report that cannot be written loses no run: the suite says so, and `suite merge` rebuilds it.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from marl_ppo.cli import main
from marl_ppo.suite import suite_curves
from marl_ppo.suite.scoring import add_scores

ROOT = Path(__file__).resolve().parents[2]
TINY = [
    "train.total_frames=400",
    "train.frames_per_batch=200",
    "train.minibatch_size=100",
    "train.num_epochs=1",
    "env.num_envs=4",
    "env.max_steps=25",
    "model.hidden=[16]",
    "log.eval_every=1",
    "log.eval_episodes=2",
    "log.checkpoint_every=0",
    "log.plot=false",
    "log.progress=false",
    "train.num_threads=1",
]


def _suite(tmp_path: Path, tasks: list, seeds=(0,), **extra) -> Path:
    raw = {"name": "t", "tasks": tasks, "seeds": list(seeds), "overrides": TINY, "absolute_eval_factor": 2, **extra}
    path = tmp_path / "suite.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def _config(name: str) -> str:
    return str(ROOT / "configs" / f"{name}.yaml")


# -- scores on hand-made JSON ----------------------------------------------------------------------------------


def _run(**metrics) -> dict:
    return {"step_1": {"step_count": 10, **{k: [v] for k, v in metrics.items()}}, "absolute_metrics": {}}


def test_default_scores_and_refusals():
    def one(**metrics):
        run = _run(**metrics)
        run["absolute_metrics"] = {k: list(v) for k, v in run["step_1"].items() if k != "step_count"}
        return {"vmas": {"t": {"mappo": {"seed_0": run}}}}

    data = one(agents_return=2.0, **{"return": 2.0})
    assert add_scores(data, {}) == ({"vmas/t": ["agents_return"]}, {})
    assert data["vmas"]["t"]["mappo"]["seed_0"]["step_1"]["score"] == [2.0]
    coop = one(a_return=1.0, b_return=3.0, **{"return": 2.0})  # several cooperative groups: their sum
    assert add_scores(coop, {})[0] == {"vmas/t": ["a_return", "b_return"]}
    assert coop["vmas"]["t"]["mappo"]["seed_0"]["absolute_metrics"]["score"] == [4.0]
    zero = one(adversary_return=30.0, agent_return=-30.0, **{"return": 0.0})
    _, problems = add_scores(zero, {})
    assert problems["vmas/t"] == (
        "vmas/t: its groups' returns (adversary, agent) sum to 0 at every evaluation: name what it is scored on in "
        "the suite file (the task's score: e.g. adversary)"
    )
    assert "score" not in zero["vmas"]["t"]["mappo"]["seed_0"]["step_1"]
    assert add_scores(copy.deepcopy(zero), {"vmas/t": ("adversary",)})[0] == {"vmas/t": ["adversary_return"]}
    _, problems = add_scores(zero, {"vmas/t": ("predator",)})
    assert "names ['predator_return'], which its results lack; it has ['adversary', 'agent']" in problems["vmas/t"]


# -- the marl-eval protocol, against marl-eval -----------------------------------------------------------------


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """navigation and balance x two learning rates x two seeds, through `marl-ppo suite`."""
    tmp = tmp_path_factory.mktemp("protocol")
    tasks = [_config("navigation"), _config("balance")]
    path = _suite(tmp, tasks, seeds=(0, 1), sweep={"train.lr": [1.0e-3, 3.0e-4]})
    assert main(["suite", str(path), "--out", str(tmp / "out")]) == 0
    return tmp / "out"


@pytest.mark.slow
def test_the_report_is_marl_evals_on_the_suites_json(sweep):
    from marl_eval.utils.data_processing_utils import create_matrices_for_rliable, data_process_pipeline
    from rliable import metrics

    data = json.loads((sweep / "marl_eval.json").read_text())
    processed = data_process_pipeline(copy.deepcopy(data), ["score"])
    matrices = create_matrices_for_rliable(processed, "vmas", ["score"])[0]["mean_norm_score"]
    report = json.loads((sweep / "report.json").read_text())
    ours = report["environments"]["vmas"]
    assert report["protocol"] == "marl-eval" and "Protocol: marl-eval (Gorsane" in (sweep / "report.md").read_text()
    expected = {
        "IQM": metrics.aggregate_iqm,
        "mean": metrics.aggregate_mean,
        "median": metrics.aggregate_median,
        "optimality gap": metrics.aggregate_optimality_gap,
    }
    assert sorted(matrices) == sorted(ours["aggregate"]) == ["mappo[lr=0.0003]", "mappo[lr=0.001]"]
    for variant, scores in matrices.items():
        for name, fn in expected.items():
            assert ours["aggregate"][variant][name]["value"] == pytest.approx(fn(scores), abs=1e-6), (variant, name)
    for pair, p in ours["probability_of_improvement"].items():
        x, y = pair.split(",")
        assert p["value"] == pytest.approx(metrics.probability_of_improvement(matrices[x], matrices[y]), abs=1e-6)
    assert len(ours["probability_of_improvement"]) == 2


@pytest.mark.slow
def test_the_plots_final_points_are_the_reports_table_and_merge_names_another_protocol(sweep, tmp_path):
    data = json.loads((sweep / "marl_eval.json").read_text())
    report = json.loads((sweep / "report.json").read_text())
    for panel, lines in suite_curves(data).items():
        for variant, curve in lines.items():
            table = report["final_score"][variant][panel]
            assert curve.metric == "score" and curve.final[1:] == (table["mean"], *table["ci95"])
    assert main(["suite", "merge", str(sweep), "--out", str(tmp_path), "--protocol", "final"]) == 0
    assert (
        "Protocol: final: each task's score min-max normalised over the final evaluations"
        in (tmp_path / "report.md").read_text()
    )
    assert json.loads((tmp_path / "report.json").read_text())["protocol"] == "final"


# -- competitive and zero-sum tasks ----------------------------------------------------------------------------

BATTLE = ["env.num_envs=2", "env.max_steps=10", "train.total_frames=80", "train.frames_per_batch=40"]
BATTLE += ["train.minibatch_size=40"]


def test_a_competitive_task_is_refused_before_any_run_until_it_names_its_score(tmp_path, capsys):
    path = _suite(tmp_path, [{"config": _config("battle_vs_random"), "overrides": BATTLE}])
    assert main(["suite", str(path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "competitive (groups played by opponents: blue: random; log.eval_opponents ['random'])" in err
    assert "name what it is scored on, e.g. score: GROUP or score: vs_<source>/<seat>/win_rate" in err
    assert not (tmp_path / "out" / "runs").exists()


@pytest.mark.slow
def test_battle_against_random_is_scored_on_its_win_rate(tmp_path):
    task = {"config": _config("battle_vs_random"), "overrides": BATTLE, "name": "battle"}
    path = _suite(tmp_path, [{**task, "score": "vs_random/red/win_rate"}])
    assert main(["suite", str(path), "--out", str(tmp_path / "out")]) == 0
    run = json.loads((tmp_path / "out" / "marl_eval.json").read_text())["pettingzoo"]["battle"]["mappo"]["seed_0"]
    for entry in run.values():
        assert entry["score"] == entry["vs_random/red/win_rate"]
    final = run["absolute_metrics"]
    assert len(final["vs_random/red/win_rate"]) == 4 and set(final["vs_random/red/win_rate"]) <= {0.0, 1.0}
    assert len(final["vs_random/red/return"]) == len(final["red_return"]) == 4  # the final evaluation's episodes
    assert "- `pettingzoo/battle` scored on `vs_random/red/win_rate`" in (tmp_path / "out" / "report.md").read_text()


@pytest.mark.slow
def test_a_zero_sum_task_is_left_unscored_with_why_and_merge_scores_it(tmp_path, capsys):
    path = _suite(tmp_path, [{"config": _config("simple_tag"), "name": "tag"}])
    out = tmp_path / "out"
    assert main(["suite", str(path), "--out", str(out)]) == 0
    md = (out / "report.md").read_text()
    assert "- score of vmas/tag: vmas/tag: its groups' returns (adversary, agent) sum to 0 at every evaluation" in md
    assert "score" not in json.loads((out / "marl_eval.json").read_text())["vmas"]["tag"]["mappo"]["seed_0"]["step_1"]
    merged = tmp_path / "merged"
    assert main(["suite", "merge", str(out), "--out", str(merged), "--score", "vmas/tag=adversary"]) == 0
    run = json.loads((merged / "marl_eval.json").read_text())["vmas"]["tag"]["mappo"]["seed_0"]
    assert all(entry["score"] == entry["adversary_return"] for entry in run.values())
    md = (merged / "report.md").read_text()
    assert "- `vmas/tag` scored on `adversary_return`" in md and "score of vmas/tag" not in md
    assert main(["suite", "merge", str(out), "--out", str(merged), "--score", "vmas/nav=agents"]) == 2
    err = capsys.readouterr().err
    assert "--score names ['vmas/nav'], which the results do not have; they have ['vmas/tag']" in err


@pytest.mark.slow
def test_a_report_that_cannot_be_written_loses_no_run_and_merge_rebuilds_it(tmp_path, capsys):
    out = tmp_path / "out"
    (out / "report.md").mkdir(parents=True)  # the report cannot be written there
    path = _suite(tmp_path, [_config("navigation")])
    assert main(["suite", str(path), "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert "not written: report.md: IsADirectoryError" in err and f"marl-ppo suite merge {out} --out DIR" in err
    summary = json.loads((out / "suite_summary.json").read_text())
    assert [r["status"] for r in summary["runs"]] == ["ok"] and "report.md" in summary["not_written"]
    assert (out / "marl_eval.json").exists() and (out / "returns.png").exists()
    assert main(["suite", "merge", str(out), "--out", str(tmp_path / "rebuilt")]) == 0
    report = json.loads((tmp_path / "rebuilt" / "report.json").read_text())
    assert report["protocol"] == "marl-eval" and report["scored_on"] == {"vmas/navigation": ["agents_return"]}
    assert np.isfinite(report["final_score"]["mappo"]["vmas/navigation"]["mean"])
