"""``marl-ppo tune``: searches on a real local Ray cluster over tiny real VMAS runs.

* ASHA over 6 trials, a third of which cannot learn (``train.lr=1e-9``): it stops some of them
  before their budget, every trial keeps a complete run directory (a stopped one says so in its
  notes), the experiment finishes, ``best.yaml`` holds a rate that learns and trains with
  ``marl-ppo train best.yaml``; the trials table, plot and marl-eval JSON are written;
* the Optuna searcher: the trials' values are the proposals of Optuna's own TPE sampler with the
  same seed, within the space;
* bad input (an unknown key, an empty range, a value the config refuses, a metric no run logs, an
  evaluation metric without per-iteration evaluations, a PBT mutation of a key a resumed run may
  not change) is one line before Ray starts, and nothing is written.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest
import yaml

from marl_ppo.cli import main
from marl_ppo.config import load_config
from marl_ppo.run.logger import read_scalars
from marl_ppo.suite.marl_eval import validate_marl_eval
from marl_ppo.suite.tune_runner import run_tune
from marl_ppo.suite.tune_spec import TuneSpec

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "marl_ppo" / "configs" / "tune" / "tiny.yaml"
FRAMES = 160  # the tiny file's train.total_frames


@pytest.fixture(scope="module")
def asha(ray_cluster, tmp_path_factory):
    out = tmp_path_factory.mktemp("tune") / "tiny"
    spec = TuneSpec.load("tiny")
    return run_tune(TuneSpec(**{**spec.__dict__, "out": str(out)}), echo=lambda _: None)


@pytest.mark.slow
def test_asha_stops_trials_that_cannot_learn_and_the_best_config_trains(asha, tmp_path):
    trials = asha.trials
    assert len(trials) == 6
    stopped = [t for t in trials if t.status == "stopped"]
    assert stopped and all(t.frames < FRAMES for t in stopped)
    assert all(t.status in ("finished", "stopped") for t in trials)
    for t in trials:  # every trial a complete run directory, its logs holding each step once
        summary = json.loads((t.run_dir / "summary.json").read_text())
        assert summary["frames"] == t.frames
        frames = [f for f, _ in read_scalars(t.run_dir)["train/loss"]]
        assert frames == sorted(set(frames))
    assert all("stopped by Ray Tune's scheduler" in (t.run_dir / "run.log").read_text() for t in stopped)
    best = asha.best
    assert best.status == "finished" and best.params["train.lr"] > 1e-6
    assert best.last == max(t.last for t in trials if t.status == "finished")
    best_cfg = load_config(asha.out / "best.yaml")
    assert best_cfg.train.lr == best.params["train.lr"]
    assert best_cfg.loss.clip_epsilon == pytest.approx(best.params["loss.clip_epsilon"])
    assert main(["train", str(asha.out / "best.yaml"), f"log.root={tmp_path}", "log.name=best"]) == 0
    assert json.loads((tmp_path / "best" / "summary.json").read_text())["frames"] == FRAMES
    rows = list(csv.DictReader(open(asha.out / "trials.csv")))
    assert sorted(r["trial"] for r in rows) == sorted(t.name for t in trials)
    assert {r["status"] for r in rows} == {"finished", "stopped"}
    data = json.loads((asha.out / "marl_eval.json").read_text())
    validate_marl_eval(data)
    assert len(data["vmas"]["navigation"]) == sum(t.status == "finished" for t in trials)
    assert (asha.out / "tune.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_the_optuna_searcher_proposes_the_trials_within_the_space(ray_cluster, tmp_path):
    import optuna

    raw = yaml.safe_load(TINY.read_text())
    raw.update(
        task=str(ROOT / "marl_ppo" / "configs" / "navigation.yaml"),
        searcher="optuna",
        scheduler="fifo",
        num_samples=3,
        seed=7,
        out=str(tmp_path / "out"),
        space={"train.lr": {"loguniform": [1e-4, 1e-2]}, "loss.clip_epsilon": {"uniform": [0.1, 0.3]}},
    )
    raw["overrides"] = [o for o in raw["overrides"] if not o.startswith("train.total_frames")] + [
        "train.total_frames=40"
    ]
    result = run_tune(TuneSpec.from_dict(raw, source="optuna.yaml"), echo=lambda _: None)
    # Optuna's own sampler with the same seed, asked for the same space in the same order
    study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=7), direction="maximize")
    space = {
        "train.lr": optuna.distributions.FloatDistribution(1e-4, 1e-2, log=True),
        "loss.clip_epsilon": optuna.distributions.FloatDistribution(0.1, 0.3),
    }
    expected = sorted((p["train.lr"], p["loss.clip_epsilon"]) for p in (study.ask(space).params for _ in range(3)))
    got = [t.params for t in result.trials]
    # the same three proposals (Tune may hand them to trials in another order than it numbers them)
    assert sorted((p["train.lr"], p["loss.clip_epsilon"]) for p in got) == expected
    for params in got:
        assert 1e-4 <= params["train.lr"] <= 1e-2 and 0.1 <= params["loss.clip_epsilon"] <= 0.3
    assert all(t.status == "finished" and not math.isnan(t.last) for t in result.trials)


BAD = [
    ({"space": {"train.lrr": {"choice": [1e-3]}}}, ["space.train.lrr", "unknown config key 'train.lrr'", "train.lr"]),
    (
        {"space": {"train.lr": {"uniform": [1e-3, 1e-3]}}},
        ["space.train.lr.uniform", "empty range", "low must be < high"],
    ),
    ({"space": {"train.lr": {"loguniform": [0, 1e-3]}}}, ["space.train.lr.loguniform", "bounds must be > 0"]),
    ({"space": {"train.lr": {"choice": []}}}, ["space.train.lr.choice", "non-empty list"]),
    ({"space": {"train.lr": {"normal": [0, 1]}}}, ["unknown key 'normal'", "choice, grid, uniform"]),
    ({"space": {"loss.clip_epsilon": {"uniform": [0.5, 1.5]}}}, ["space.loss.clip_epsilon", "must be < 1", "1.5"]),
    ({"metric": "eval/agent/episode_reward"}, ["'eval/agent/episode_reward' is never logged", "['agents']"]),
    ({"metric": "train/loss"}, ["'train/loss' is not one that runs log per iteration"]),
    (
        {"overrides": ["log.eval_every=5"]},
        ["log.eval_every=5", "set log.eval_every=1", "collect/ metric"],
    ),
    (
        {"scheduler": {"kind": "pbt", "mutations": {"model.hidden": {"choice": [[8], [32]]}}}},
        ["scheduler.mutations.model.hidden", "only keys a resumed run may change"],
    ),
    ({"scheduler": {"kind": "pbt"}}, ["pbt needs mutations"]),
    ({"scheduler": {"kind": "asha", "grace": 2}}, ["unknown key 'grace'", "allowed keys: kind, grace_period"]),
    ({"searcher": "hyperopt"}, ["searcher must be 'random' or 'optuna'", "'hyperopt'"]),
    ({"spaces": {}}, ["unknown key 'spaces'", "did you mean 'space'"]),
]


@pytest.mark.parametrize("change, words", BAD, ids=[next(iter(c)) + str(i) for i, (c, _) in enumerate(BAD)])
def test_bad_tune_input_is_one_line_before_anything_starts(tmp_path, capsys, change, words):
    raw = yaml.safe_load(TINY.read_text())
    raw["task"] = str(ROOT / "marl_ppo" / "configs" / "navigation.yaml")
    if "overrides" in change:
        change = {"overrides": raw["overrides"] + change["overrides"]}
    raw.update(change)
    raw["out"] = str(tmp_path / "out")
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(raw))
    assert main(["tune", str(path)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    for word in words:
        assert word in err, (word, err)
    assert not (tmp_path / "out").exists()
