"""Tests for :mod:`marl_ppo.suite`: benchmark suites, marl-eval JSON, aggregate plot.

Covered:

* ``configs/suites/tiny.yaml`` (2 tasks x 2 seeds) plus a task with an unknown scenario, run with 2
  worker processes: the 4 good runs finish, the 2 broken ones are reported (status, error naming the
  scenario, ``error.txt``) and left out of the results;
* the written ``marl_eval.json`` passes :func:`validate_marl_eval` and has BenchMARL's nesting
  (env -> task -> algorithm -> ``seed_<N>`` -> ``step_<K>`` with ``step_count`` and return lists,
  and ``absolute_metrics``), with the values of the runs' logs;
* the aggregate plot is a real PNG; the t-interval band has its known width;
* a known-answer conversion of hand-made run directories (one from the suite, one plain
  ``marl-ppo train`` directory, one failed);
* :func:`validate_marl_eval` names the bad path; unknown suite keys name the key and the allowed
  ones; config errors fail before anything runs; a sequential in-process run, and a second call
  that keeps the finished run.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import math
from pathlib import Path

import pytest
import yaml

from marl_ppo.config import Config, EnvConfig, LossConfig, TrainConfig, to_yaml
from marl_ppo.run.logger import read_scalars
from marl_ppo.suite import (
    Suite,
    SuiteError,
    TaskSpec,
    confidence_band,
    main,
    plan,
    plot_suite,
    run_suite,
    to_marl_eval,
    validate_marl_eval,
)

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "configs" / "suites" / "tiny.yaml"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


# -- the tiny suite, run once with 2 workers -------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    suite = Suite.load(TINY)
    assert suite.workers == 2 and suite.threads == 1  # one torch thread per worker process
    broken = TaskSpec(
        config=str(ROOT / "configs" / "navigation.yaml"), overrides=("env.scenario=no_such_scenario",), name="broken"
    )
    suite = suite.replace(tasks=suite.tasks + (broken,))
    out = tmp_path_factory.mktemp("tiny-suite")
    lines: list[str] = []
    result = run_suite(suite, workers=2, out=out, echo=lines.append)
    return result, out, lines


@pytest.mark.slow
def test_tiny_suite_runs_and_reports_the_failing_task(tiny_run):
    result, out, lines = tiny_run
    status = {r.job.label: r.status for r in result.runs}
    assert status == {
        "vmas/navigation/mappo/seed_0": "ok",
        "vmas/navigation/mappo/seed_1": "ok",
        "vmas/balance/mappo/seed_0": "ok",
        "vmas/balance/mappo/seed_1": "ok",
        "vmas/broken/mappo/seed_0": "failed",
        "vmas/broken/mappo/seed_1": "failed",
    }
    for r in result.failed:
        assert "no_such_scenario" in r.error
        assert "no_such_scenario" in (Path(r.job.run_dir) / "error.txt").read_text()
    for r in result.runs:
        if r.ok:
            run_dir = Path(r.job.run_dir)
            assert run_dir.parent == out / "runs"
            assert json.loads((run_dir / "summary.json").read_text())["frames"] == 600
    assert any("failed" in line and "broken" in line for line in lines)
    summary = json.loads((out / "suite_summary.json").read_text())
    assert sum(r["status"] == "failed" for r in summary["runs"]) == 2
    assert "no_such_scenario" in result.table()


@pytest.mark.slow
def test_tiny_suite_reports_each_task_across_its_seeds(tiny_run):
    result, out, _ = tiny_run
    assert result.report_path == out / "report.md"
    data, report = json.loads(result.json_path.read_text()), json.loads((out / "report.json").read_text())
    for task in ("balance", "navigation"):
        runs = data["vmas"][task]["mappo"]
        finals = [
            sum(runs[s]["absolute_metrics"]["return"]) / len(runs[s]["absolute_metrics"]["return"])
            for s in ("seed_0", "seed_1")
        ]
        assert report["final_score"]["mappo"][f"vmas/{task}"]["values"] == pytest.approx(finals)
        assert report["final_score"]["mappo"][f"vmas/{task}"]["mean"] == pytest.approx(sum(finals) / 2)
    md = result.report_path.read_text()
    assert "| mappo | vmas/balance | 2 |" in md and "| mappo | vmas/navigation | 2 |" in md
    if importlib.util.find_spec("rliable") is not None:  # the results extra: rliable's aggregates
        stats = report["environments"]["vmas"]
        assert stats["tasks"] == ["vmas/navigation", "vmas/balance"] and stats["probability_of_improvement"] == {}
        assert "## Aggregate over the tasks of vmas (rliable)" in md and (out / "profiles.png").exists()
    assert json.loads((out / "suite_summary.json").read_text())["report"] == str(out / "report.md")


@pytest.mark.slow
def test_tiny_suite_marl_eval_json(tiny_run):
    result, out, _ = tiny_run
    assert result.json_path == out / "marl_eval.json"
    data = json.loads(result.json_path.read_text())
    validate_marl_eval(data)
    validate_marl_eval(data, same_shape=True)  # what marl-eval's aggregation needs
    # env -> task -> algorithm -> seed_N -> step_K / absolute_metrics, by hand
    assert list(data) == ["vmas"]
    assert sorted(data["vmas"]) == ["balance", "navigation"]  # the broken task is left out
    for task, algos in data["vmas"].items():
        assert list(algos) == ["mappo"]
        assert sorted(algos["mappo"]) == ["seed_0", "seed_1"]
        for seed, run in algos["mappo"].items():
            assert list(run) == ["step_1", "step_2", "absolute_metrics"]
            assert [run[k]["step_count"] for k in ("step_1", "step_2")] == [300, 600]
            run_dir = out / "runs" / f"{task}-mappo-seed{seed[5:]}"
            logged = dict(read_scalars(run_dir)["eval/agents/episode_reward"])
            for k, frames in (("step_1", 300), ("step_2", 600)):
                step = run[k]
                assert set(step) == {"step_count", "return", "agents_return", "score"}
                assert step["score"] == step["agents_return"]  # one group: scored on its return
                assert step["agents_return"] == [pytest.approx(logged[frames])]
                assert step["return"] == step["agents_return"]  # one group: the mean over groups is its return
            absolute = run["absolute_metrics"]
            assert set(absolute) == {"return", "agents_return", "score"}
            # 10 x log.eval_episodes (2) deterministic episodes of the final policy, one value each, exactly
            assert len(absolute["return"]) == len(absolute["agents_return"]) == 20
            assert all(isinstance(x, float) and math.isfinite(x) for x in absolute["return"])


@pytest.mark.slow
def test_tiny_suite_plot_is_a_png(tiny_run):
    result, out, _ = tiny_run
    assert result.plot_path == out / "returns.png"
    raw = result.plot_path.read_bytes()
    assert raw[:8] == PNG_MAGIC
    assert len(raw) > 10_000
    import matplotlib.pyplot as plt

    image = plt.imread(result.plot_path)
    assert image.shape[0] > 200 and image.shape[1] > 400  # two panels side by side


# -- known-answer conversion ---------------------------------------------------------------------


def _scalars(run_dir: Path, name: str, rows: list[tuple[int, float]]) -> None:
    path = run_dir / "logs" / "scalars" / f"{name}.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{f},{v}\n" for f, v in rows))


def _fake_runs(tmp_path: Path) -> list[Path]:
    # a suite run: two groups, three evaluations (the last frame count logged twice: the final one wins)
    a = tmp_path / "tag-mappo-seed0"
    _scalars(a, "eval/predator/episode_reward", [(100, 1.0), (200, 2.0), (300, 3.0), (300, 5.0)])
    _scalars(a, "eval/prey/episode_reward", [(100, -1.0), (200, 0.0), (300, 1.0)])
    _scalars(a, "collect/prey/episode_reward", [(100, 9.0)])  # not an evaluation: ignored
    (a / "suite_job.json").write_text(
        json.dumps({"environment": "vmas", "task": "tag", "algorithm": "mappo", "seed": 0})
    )
    (a / "suite_result.json").write_text(json.dumps({"status": "ok", "error": None, "seconds": 1.0}))
    (a / "summary.json").write_text("{}")
    (a / "absolute_metrics.json").write_text(
        json.dumps(
            {
                "frames": 300,
                "episodes": 2,
                "metrics": {"predator_return": [4.0, 6.0], "prey_return": [0.0, 2.0], "return": [2.0, 4.0]},
            }
        )
    )
    # a plain `marl-ppo train` directory: names from config.yaml, no final evaluation file
    b = tmp_path / "plain"
    cfg = Config(
        env=EnvConfig(kind="pettingzoo", scenario="simple_tag_v3", kwargs={}),
        loss=LossConfig(algorithm="ippo"),
        train=TrainConfig(seed=3),
    )
    b.mkdir()
    (b / "config.yaml").write_text(to_yaml(cfg))
    (b / "summary.json").write_text("{}")
    _scalars(b, "eval/adversary/episode_reward", [(50, 0.5), (100, 1.5)])
    _scalars(b, "eval/agent/episode_reward", [(50, -0.5), (100, 0.5)])
    # a failed run: left out
    c = tmp_path / "failed"
    _scalars(c, "eval/prey/episode_reward", [(100, 1.0)])
    (c / "error.txt").write_text("ValueError: boom\n")
    return [a, b, c]


def test_to_marl_eval_known_answer(tmp_path):
    runs = _fake_runs(tmp_path)
    with pytest.warns(UserWarning, match="left out of the marl-eval JSON.*failed.*boom"):
        data = to_marl_eval(runs)
    assert data == {
        "vmas": {
            "tag": {
                "mappo": {
                    "seed_0": {
                        "step_1": {"step_count": 100, "predator_return": [1.0], "prey_return": [-1.0], "return": [0.0]},
                        "step_2": {"step_count": 200, "predator_return": [2.0], "prey_return": [0.0], "return": [1.0]},
                        "step_3": {"step_count": 300, "predator_return": [5.0], "prey_return": [1.0], "return": [3.0]},
                        "absolute_metrics": {
                            "predator_return": [4.0, 6.0],
                            "prey_return": [0.0, 2.0],
                            "return": [2.0, 4.0],
                        },
                    }
                }
            }
        },
        "pettingzoo": {
            "simple_tag_v3": {
                "ippo": {
                    "seed_3": {
                        "step_1": {
                            "step_count": 50,
                            "adversary_return": [0.5],
                            "agent_return": [-0.5],
                            "return": [0.0],
                        },
                        "step_2": {
                            "step_count": 100,
                            "adversary_return": [1.5],
                            "agent_return": [0.5],
                            "return": [1.0],
                        },
                        "absolute_metrics": {"adversary_return": [1.5], "agent_return": [0.5], "return": [1.0]},
                    }
                }
            }
        },
    }
    validate_marl_eval(data)
    with pytest.raises(ValueError, match="run failed: ValueError: boom"):
        to_marl_eval(runs, skip_failed=False)
    with pytest.raises(ValueError, match="are both vmas/tag/mappo/seed_0"):
        to_marl_eval([runs[0], runs[0]])


def test_plot_suite_from_a_dict_with_bootstrap_band(tmp_path):
    data = {
        "vmas": {
            "nav": {
                "mappo": {
                    f"seed_{s}": {
                        "step_1": {"step_count": 10, "return": [0.0 + s]},
                        "step_2": {"step_count": 20, "return": [1.0 + s, 2.0 + s]},
                        "absolute_metrics": {"return": [2.0 + s]},
                    }
                    for s in range(4)
                }
            }
        }
    }
    path = plot_suite(data, tmp_path / "p.png", ci="bootstrap", title="known")
    assert path.read_bytes()[:8] == PNG_MAGIC
    with pytest.raises(ValueError, match="ci must be"):
        plot_suite(data, tmp_path / "q.png", ci="normal")


def test_t_band_known_answer():
    mean, low, high = confidence_band([1.0, 2.0, 3.0], "t")
    # mean 2, standard error 1/sqrt(3), t(0.975, 2 dof) = 4.3027
    assert mean == pytest.approx(2.0)
    assert high - mean == pytest.approx(4.302653 / math.sqrt(3), rel=1e-5)
    assert mean - low == pytest.approx(high - mean)
    assert confidence_band([5.0], "t") == (5.0, 5.0, 5.0)  # one seed: no band


# -- schema errors ---------------------------------------------------------------------------------


GOOD = {
    "vmas": {
        "nav": {
            "mappo": {
                "seed_0": {
                    "step_1": {"step_count": 10, "return": [1.0, 2.0]},
                    "step_2": {"step_count": 20, "return": [3.0]},
                    "absolute_metrics": {"return": [3.0]},
                }
            }
        }
    }
}
RUN = ("vmas", "nav", "mappo", "seed_0")


def _mutated(fn):
    data = copy.deepcopy(GOOD)
    fn(data["vmas"]["nav"]["mappo"]["seed_0"])
    return data


@pytest.mark.parametrize(
    "mutate, where, problem",
    [
        (lambda r: r["step_1"].pop("step_count"), "seed_0/step_1", "missing 'step_count'"),
        (lambda r: r["step_1"].update(step_count=1.5), "seed_0/step_1/step_count", "non-negative integer"),
        (lambda r: r["step_2"].update(step_count=5), "seed_0/step_2/step_count", "does not grow"),
        (lambda r: r["step_1"].update({"return": 1.0}), "seed_0/step_1/return", "non-empty list"),
        (lambda r: r["step_1"].update({"return": []}), "seed_0/step_1/return", "non-empty list"),
        (lambda r: r["step_1"]["return"].append(float("nan")), "seed_0/step_1/return/[2]", "finite number"),
        (lambda r: r["step_1"]["return"].append(True), "seed_0/step_1/return/[2]", "finite number"),
        (lambda r: r["step_2"].update(win_rate=[1.0]), "seed_0/step_2", "differ from the run's first step"),
        (lambda r: r.pop("absolute_metrics"), "seed_0", "missing 'absolute_metrics'"),
        (
            lambda r: r["absolute_metrics"].update(win=[1.0]),
            "seed_0/absolute_metrics",
            "differ from the steps' metrics",
        ),
        (lambda r: r.update(final={"return": [1.0]}), "seed_0/final", "only 'step_<K>' entries"),
        (lambda r: (r.pop("step_1"), r.pop("step_2")), "seed_0", "at least one 'step_<K>'"),
    ],
)
def test_validate_names_the_bad_path(mutate, where, problem):
    validate_marl_eval(GOOD)
    with pytest.raises(ValueError) as info:
        validate_marl_eval(_mutated(mutate))
    msg = str(info.value)
    assert f"vmas/nav/mappo/{where}" in msg and problem in msg, msg


def test_validate_top_levels_and_shape():
    with pytest.raises(ValueError, match="at <root>: expected a mapping of environment"):
        validate_marl_eval([])
    with pytest.raises(ValueError, match=r"at vmas: expected at least one task"):
        validate_marl_eval({"vmas": {}})
    bad = {"vmas": {"nav": {"a,b": GOOD["vmas"]["nav"]["mappo"]}}}
    with pytest.raises(ValueError, match=r"at vmas/nav/a,b: algorithm names must not contain ','"):
        validate_marl_eval(bad)
    uneven = copy.deepcopy(GOOD)
    uneven["vmas"]["bal"] = {
        "mappo": {"seed_0": {"step_1": {"step_count": 10, "return": [1.0]}, "absolute_metrics": {"return": [1.0]}}}
    }
    validate_marl_eval(uneven)  # a valid file...
    with pytest.raises(
        ValueError, match=r"at vmas/bal/mappo/seed_0: steps/metrics .* differ from vmas/nav/mappo/seed_0"
    ):
        validate_marl_eval(uneven, same_shape=True)  # ...that marl-eval could not aggregate


# -- suite files and arguments ---------------------------------------------------------------------


def _suite_file(tmp_path: Path, raw) -> Path:
    path = tmp_path / "suite.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_unknown_suite_key_names_it_and_the_allowed_keys(tmp_path, capsys):
    path = _suite_file(tmp_path, {"tasks": [str(ROOT / "configs" / "navigation.yaml")], "seed": [0, 1]})
    with pytest.raises(SuiteError) as info:
        Suite.load(path)
    msg = str(info.value)
    assert "unknown key 'seed'" in msg and "did you mean 'seeds'?" in msg
    for key in ("name", "tasks", "seeds", "overrides", "workers", "out", "threads", "absolute_eval_factor"):
        assert key in msg
    assert main([str(path)]) == 2
    assert "unknown key 'seed'" in capsys.readouterr().err


def test_unknown_task_key_names_it(tmp_path):
    path = _suite_file(tmp_path, {"tasks": [{"config": "../navigation.yaml", "overides": ["a=1"]}]})
    with pytest.raises(
        SuiteError,
        match=r"unknown key 'overides' in .*tasks\[0\]; did you mean 'overrides'\? "
        r"allowed keys: config, name, overrides",
    ):
        Suite.load(path)


def test_suite_file_errors(tmp_path):
    with pytest.raises(SuiteError, match="does not exist"):
        Suite.load(tmp_path / "none.yaml")
    with pytest.raises(SuiteError, match=r"tasks\[0\]: config file 'nope.yaml' not found"):
        Suite.load(_suite_file(tmp_path, {"tasks": ["nope.yaml"]}))
    with pytest.raises(SuiteError, match="seeds must be distinct"):
        Suite.load(_suite_file(tmp_path, {"tasks": [str(TINY.parent.parent / "navigation.yaml")], "seeds": [1, 1]}))
    with pytest.raises(SuiteError, match="workers must be an integer >= 1"):
        Suite.load(_suite_file(tmp_path, {"tasks": [str(TINY.parent.parent / "navigation.yaml")], "workers": 0}))


def test_config_errors_fail_before_any_run(tmp_path):
    nav = str(ROOT / "configs" / "navigation.yaml")
    suite = Suite(tasks=(TaskSpec(nav),), overrides=("train.lr_rate=1e-3",))
    with pytest.raises(SuiteError, match=r"tasks\[0\].*unknown config key 'train.lr_rate'; did you mean 'train.lr'"):
        run_suite(suite, out=tmp_path, echo=lambda _: None)
    assert not (tmp_path / "runs").exists()
    twice = Suite(tasks=(TaskSpec(nav), TaskSpec(nav)))
    with pytest.raises(SuiteError, match="give one of them a different 'name'"):
        plan(twice, out=tmp_path)


def test_plan_resolves_names_paths_and_override_order(tmp_path):
    suite = Suite.load(TINY).replace(
        tasks=(TaskSpec(str(ROOT / "configs" / "navigation.yaml"), ("train.total_frames=900",), "nav2"),), seeds=(4,)
    )
    (job,) = plan(suite, out=tmp_path, overrides=["train.num_epochs=2"])
    assert job.label == "vmas/nav2/mappo/seed_4"
    assert job.run_dir == str(tmp_path.resolve() / "runs" / "nav2-mappo-seed4")
    cfg = yaml.safe_load(job.config_yaml)
    assert cfg["train"]["seed"] == 4
    assert cfg["train"]["total_frames"] == 900  # the task's override beats the suite's (600)
    assert cfg["train"]["num_epochs"] == 2  # the command line's beats both
    assert cfg["log"]["progress"] is False  # worker processes draw no progress bar
    assert job.absolute_episodes == 20 and job.threads == 1


def test_sequential_run_in_process_and_kept_on_rerun(tmp_path):
    suite = Suite.load(TINY).replace(tasks=Suite.load(TINY).tasks[:1], seeds=(0,), workers=1, threads=None)
    first = run_suite(suite, out=tmp_path, plot=False, echo=lambda _: None)
    assert [r.status for r in first.runs] == ["ok"]
    assert first.plot_path is None
    data = json.loads(first.json_path.read_text())
    assert list(data["vmas"]["navigation"]["mappo"]["seed_0"]) == ["step_1", "step_2", "absolute_metrics"]
    # the same job (worker count and threads aside) finished before: kept, not run again
    again = run_suite(suite.replace(workers=2, threads=1), out=tmp_path, plot=False, echo=lambda _: None)
    assert [r.status for r in again.runs] == ["skipped"]
    assert json.loads(again.json_path.read_text()) == data


def test_main_dry_run_lists_the_runs(capsys, tmp_path):
    assert main([str(TINY), "--dry-run", "--out", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 4 and lines[0].startswith("vmas/navigation/mappo/seed_0")


@pytest.mark.slow
def test_final_evaluation_counts_exactly_the_requested_episodes(tmp_path):
    """PettingZoo copies step one by one, so the evaluation shares the episodes out between at most
    env.num_envs copies: 5 episodes on 2 copies is 3 + 2, not 2 rounds of 2 copies (6, the count a
    fixed-length rollout gave), and the figure is the run's own evaluation of those episodes."""
    from marl_ppo.config import load_config
    from marl_ppo.run.evaluation import Evaluator
    from marl_ppo.run.trainer import Trainer
    from marl_ppo.suite import final_evaluation

    cfg = load_config(
        ROOT / "configs" / "simple_spread.yaml",
        [
            "env.num_envs=2",
            "env.max_steps=5",
            "env.kwargs.N=2",
            "train.frames_per_batch=10",
            "train.total_frames=10",
            "train.minibatch_size=10",
            "train.num_epochs=1",
            "model.hidden=[8]",
            "log.progress=false",
            "log.plot=false",
            "log.eval_every=0",
            "log.eval_episodes=2",
            "log.checkpoint_every=0",
        ],
    )
    trainer = Trainer(cfg, run_dir=tmp_path / "run")
    trainer.fit()
    metrics = final_evaluation(trainer, 5)
    assert len(metrics["return"]) == len(metrics["agent_return"]) == 5
    evaluator = Evaluator(cfg, trainer.parts.router.policy, ["agent"], episodes=5)
    try:
        result = evaluator()
    finally:
        evaluator.close()
    assert result.episodes == 5
    assert metrics["agent_return"] == result.per_episode["agent"]
    assert sum(metrics["return"]) / 5 == pytest.approx(result.returns["agent"])


def test_a_suites_tasks_may_name_shipped_configs(tmp_path):
    path = tmp_path / "by_name.yaml"
    path.write_text("name: by_name\ntasks: [navigation, balance.yaml]\nseeds: [0]\n")
    jobs = plan(Suite.load(path), out=tmp_path / "out")
    assert [Path(j.run_dir).name for j in jobs] == ["navigation-mappo-seed0", "balance-mappo-seed0"]
    path.write_text("name: by_name\ntasks: [navigatio]\nseeds: [0]\n")
    with pytest.raises(SuiteError, match=r"'navigatio' not found .*nor is it a shipped config: \[.*'balance'"):
        Suite.load(path)


def test_vectorise_seeds_trains_each_tasks_seeds_in_one_process(tmp_path):
    """The tiny suite's 2 tasks x 2 seeds as 2 groups (train.seeds): every run directory a single run's, the
    marl-eval JSON complete, a rerun keeps them; the launchers that run elsewhere are refused."""
    suite = Suite.load(TINY).replace(vectorise_seeds=True, workers=1)
    lines: list[str] = []
    result = run_suite(suite, out=tmp_path, plot=False, echo=lines.append)
    assert [r.status for r in result.runs] == ["ok"] * 4
    assert sum("seeds [0, 1] in one process" in line for line in lines) == 2
    data = json.loads(result.json_path.read_text())
    for task in ("navigation", "balance"):
        runs = data["vmas"][task]["mappo"]
        assert sorted(runs) == ["seed_0", "seed_1"]
        assert all("absolute_metrics" in runs[s] for s in runs)
        assert runs["seed_0"]["absolute_metrics"] != runs["seed_1"]["absolute_metrics"]
    for r in result.runs:
        assert "2 seeds in one process" in (Path(r.job.run_dir) / "run.log").read_text()
    again = run_suite(suite, out=tmp_path, plot=False, echo=lambda _: None)
    assert [r.status for r in again.runs] == ["skipped"] * 4
    with pytest.raises(SuiteError, match="vectorise_seeds runs each task's seeds in one local process"):
        run_suite(suite, out=tmp_path / "ray", launcher="ray", echo=lambda _: None)
    with pytest.raises(SuiteError, match="vectorise_seeds must be true or false"):
        Suite.load(TINY).replace(vectorise_seeds="yes")
