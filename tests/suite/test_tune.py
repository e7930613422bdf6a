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
import dataclasses
import json
import math
from collections.abc import Callable
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


@pytest.mark.parametrize("name", ["tiny", "navigation", "navigation_grid", "balance"])
def test_the_shipped_tune_files_pass_the_checks(name):
    from marl_ppo.suite.tune_runner import check_tune

    spec = TuneSpec.load(name)
    base = check_tune(spec)
    assert base.train.total_frames == (FRAMES if name == "tiny" else 120_000)


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
    assert all("stopped or paused by Ray Tune's scheduler" in (t.run_dir / "run.log").read_text() for t in stopped)
    finished = [t for t in trials if t.status == "finished"]
    assert not any("stopped or paused" in (t.run_dir / "run.log").read_text() for t in finished)
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
    # trials.md: the best trial first, the metric falling row by row, values to 4 significant digits
    table = (asha.out / "trials.md").read_text().splitlines()[2:]
    last = [float(line.split(" | ")[3]) for line in table]
    assert table[0].startswith(f"| {best.name} |") and last == sorted(last, reverse=True)
    cells = [float(cell) for line in table for cell in line.split(" | ")[1:4]]
    assert all(c == float(f"{c:.4g}") for c in cells)


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


@pytest.mark.parametrize("searcher", ["random", "optuna"])
def test_max_concurrent_runs_at_most_that_many_trials_at_once_with_every_searcher(ray_cluster, tmp_path, searcher):
    """Each trial's span, from its run directory's creation to its summary, recorded by the trial itself: with
    max_concurrent 1 no two spans overlap (Tune ignored the limit for the random searcher before: 2 at once)."""
    raw = yaml.safe_load(TINY.read_text())
    raw.update(
        task=str(ROOT / "marl_ppo" / "configs" / "navigation.yaml"),
        searcher=searcher,
        scheduler="fifo",
        num_samples=3 if searcher == "optuna" else 1,
        out=str(tmp_path / "out"),
        space={"train.lr": {"grid": [1e-2, 3e-3, 1e-3]} if searcher == "random" else {"loguniform": [1e-4, 1e-2]}},
    )
    spec = dataclasses.replace(TuneSpec.from_dict(raw, source="limit.yaml"), max_concurrent=1)  # --max-concurrent 1
    result = run_tune(spec, echo=lambda _: None)
    assert len(result.trials) == 3 and all(t.status == "finished" for t in result.trials)
    spans = sorted(
        ((t.run_dir / "config.yaml").stat().st_mtime_ns, (t.run_dir / "summary.json").stat().st_mtime_ns)
        for t in result.trials
    )
    assert all(end <= start for (_, end), (start, _) in zip(spans, spans[1:])), spans


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
        ["model.hidden: PBT continues a trial", "only keys a resumed run may change"],
    ),
    ({"scheduler": {"kind": "pbt"}}, ["pbt needs mutations"]),
    (
        {"scheduler": {"kind": "pbt", "synch": "yes", "mutations": {"train.lr": {"loguniform": [1e-5, 1e-3]}}}},
        ["scheduler.synch must be true or false", "'yes'"],
    ),
    ({"scheduler": {"kind": "asha", "grace": 2}}, ["unknown key 'grace'", "allowed keys: kind, grace_period"]),
    ({"searcher": "hyperopt"}, ["searcher must be 'random' or 'optuna'", "'hyperopt'"]),
    ({"spaces": {}}, ["unknown key 'spaces'", "did you mean 'space'"]),
    ({"space": {}}, ["space: is empty; give at least one config key to search"]),
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


def _tiny_raw(tmp_path: Path, **changes) -> dict:
    raw = yaml.safe_load(TINY.read_text())
    raw.update(task=str(ROOT / "marl_ppo" / "configs" / "navigation.yaml"), out=str(tmp_path / "out"), **changes)
    return raw


@pytest.mark.slow
def test_pbt_continues_a_trial_from_the_donors_exact_checkpoint_with_its_perturbed_rate(ray_cluster, tmp_path):
    import re

    raw = _tiny_raw(
        tmp_path,
        # one trial that cannot learn, one that can (two trials of one rate would be the same run)
        space={"train.lr": {"grid": [1e-9, 1e-2]}},
        scheduler={
            "kind": "pbt",
            "perturbation_interval": 1,
            "quantile": 0.5,  # of 2 trials: the worse continues from the better at every interval
            # a continuous domain: every perturbation (x0.8 or x1.2, or a resample) changes the rate
            "mutations": {"train.lr": {"loguniform": [1e-9, 1e-1]}},
            # every interval waits for both trials: asynchronous PBT exploits only when the other trial
            # has reported and not yet finished, so one trial that starts late (a loaded machine) can
            # see the other end before its first report, and nothing is exploited
            "synch": True,
        },
        num_samples=1,
        max_failures=0,
    )
    raw["overrides"] = [o.replace("train.total_frames=160", "train.total_frames=200") for o in raw["overrides"]]
    result = run_tune(TuneSpec.from_dict(raw, source="pbt.yaml"), echo=lambda _: None)
    exploits, firsts = [], []  # each receiver's last exploit (an earlier one's checkpoint may be replaced), and first
    for t in result.trials:
        found = re.findall(
            r"PBT: continues from trial (\S+)'s (iter_\d+\.pt) \(frame (\d+)\)", (t.run_dir / "run.log").read_text()
        )
        if found:
            exploits.append((t, found[-1][0], found[-1][1], int(found[-1][2])))
            firsts.append((t, int(found[0][2])))
    assert exploits, "PBT exploited no trial"
    # each result names its own trial (after an exploit a trial's last metrics may be its donor's), and
    # no trial that spent its budget was handed another's final state (its last report is marked done)
    assert sorted(t.name for t in result.trials) == sorted(p.name for p in (result.out / "trials").iterdir())
    assert all(frame < 200 for _, _, _, frame in exploits)
    receiver, donor, file, frame = exploits[0]
    # the receiver continued from the donor's checkpoint, byte for byte: the copy Tune kept of it (the
    # donor's own run directory may since have replaced that file, exploiting another trial in turn)
    kept = [
        folder / file
        for folder in (result.out / "ray").glob("*/*/checkpoint_*")
        if json.loads((folder / "trial.json").read_text()) == {"trial_id": donor, "file": file, "frames": frame}
    ]
    assert kept, f"Tune kept no checkpoint {file} of {donor}"
    assert (receiver.run_dir / "checkpoints" / file).read_bytes() in {k.read_bytes() for k in kept}
    # a receiver's first exploit changes its rate (from a choice value to a perturbed one), and says so;
    # a later one may hand it the rate it already has (the same donor's x0.8 again): no change to log
    for t, at in firsts:
        found = re.findall(
            rf"changed train\.lr: \S+ -> (\S+), in force from frame {at} ", (t.run_dir / "resume.log").read_text()
        )
        assert found, f"{t.name}: its first exploit at frame {at} logged no changed rate"
    # the rate in force after the last exploit is the one its config records, logged, within the domain
    for t, _, _, at in exploits:
        lr = load_config(t.run_dir / "config.yaml").train.lr
        assert 1e-9 <= lr <= 1e-1 and lr not in (1e-9, 1e-2)
        assert dict(read_scalars(t.run_dir)["train/lr"])[at + 40] == pytest.approx(lr)
    assert all(t.status == "finished" and t.frames == 200 for t in result.trials)


def test_pbt_explores_a_choice_within_its_values_and_a_range_within_its_bounds():
    """Ray multiplies a search-space object's value by 0.8 or 1.2 (a choice's too) and never clips: a
    choice is handed to PBT as a list (shifted to a neighbour or resampled) and every perturbed value
    is brought back into its domain."""
    from ray.tune.schedulers import PopulationBasedTraining

    from marl_ppo.suite.tune_runner import clip_to_domains
    from marl_ppo.suite.tune_spec import Domain

    domains = {
        "model.activation": Domain.parse("model.activation", {"choice": ["tanh", "relu"]}, "m"),
        "train.gamma": Domain.parse("train.gamma", {"uniform": [0.9, 0.999]}, "m"),
        "train.epochs": Domain.parse("train.epochs", {"randint": [2, 8]}, "m"),
        "train.lr": Domain.parse("train.lr", {"loguniform": [1e-5, 1e-3]}, "m"),
    }
    assert domains["model.activation"].to_pbt() == ["tanh", "relu"]
    perturbed = {"model.activation": "relu", "train.gamma": 0.999 * 1.2, "train.epochs": 9, "train.lr": 8e-6}
    assert clip_to_domains(domains, {**perturbed, "other": 1}) == {
        "model.activation": "relu",
        "train.gamma": 0.999,
        "train.epochs": 7,
        "train.lr": 1e-5,
        "other": 1,
    }
    # Ray takes both as they are given
    PopulationBasedTraining(
        time_attr="frames",
        hyperparam_mutations={k: d.to_pbt() for k, d in domains.items()},
        custom_explore_fn=lambda c: clip_to_domains(domains, c),
    )


@pytest.mark.slow
def test_a_trial_whose_worker_is_killed_restarts_from_its_checkpoint(ray_cluster, tmp_path):
    """SIGKILL to a running trial's worker process (its pid as Tune records it): the trial restarts
    from its last checkpoint and finishes; its CSVs hold each logged step once."""
    import os
    import signal
    import threading
    import time

    raw = _tiny_raw(tmp_path, space={"train.lr": {"choice": [1e-2]}}, scheduler="fifo", num_samples=1, max_failures=1)
    raw["overrides"] = [o.replace("train.total_frames=160", "train.total_frames=400") for o in raw["overrides"]]
    killed: list[int] = []

    def kill_when_checkpointed() -> None:  # the worker's pid as Tune records it with every result
        deadline = time.time() + 120
        while time.time() < deadline:
            for path in (tmp_path / "out" / "ray").glob("*/*/result.json"):
                lines = path.read_text().splitlines()
                last = json.loads(lines[-1]) if lines else {}
                if last.get("frames", 0) >= 80 and (path.parent.parent.parent.parent / "trials").exists():
                    os.kill(last["pid"], signal.SIGKILL)
                    killed.append(last["pid"])
                    return
            time.sleep(0.05)

    watcher = threading.Thread(target=kill_when_checkpointed, daemon=True)
    watcher.start()
    result = run_tune(TuneSpec.from_dict(raw, source="kill.yaml"), echo=lambda _: None)
    watcher.join()
    assert killed, "no trial worker was found to kill"
    (trial,) = result.trials
    assert trial.status == "finished" and trial.frames == 400
    assert "resumed from" in (trial.run_dir / "resume.log").read_text()
    for name, points in read_scalars(trial.run_dir).items():
        frames = [f for f, _ in points]
        assert frames == sorted(set(frames)), name


def _wait_for(event: Callable[[], bool], what: str, driver, err_file: Path, hang_s: float = 1800) -> None:
    """Polls ``event`` (files the search writes) until it holds; fails at once, with the driver's stderr, where the
    driver ended first. ``hang_s`` only turns a hang into an error: on a loaded machine the event comes late,
    never wrong, so no shorter clock decides what the test checks."""
    import time

    deadline = time.monotonic() + hang_s
    while not event():
        if driver.poll() is not None:
            pytest.fail(f"the search ended ({driver.returncode}) before {what}: {err_file.read_text()[-3000:]}")
        if time.monotonic() > deadline:
            pytest.fail(f"no {what} after {hang_s:.0f} s: {err_file.read_text()[-3000:]}")
        time.sleep(0.1)


@pytest.mark.slow
def test_an_interrupted_experiment_continues_with_resume_without_redoing_finished_trials(ray_cluster, tmp_path):
    """Ctrl-C in the middle of a search, then ``--resume``: the finished trials are kept, the rest run. The signal
    goes when an event says the search is in the middle: a first trial has its summary and Tune has moved on to
    the next (one trial at a time: the second starts only once Tune has ended the first), not after a time."""
    import os
    import signal
    import subprocess
    import sys

    raw = _tiny_raw(tmp_path, space={"train.lr": {"grid": [1e-2, 3e-3, 1e-3, 5e-3]}}, scheduler="fifo", num_samples=1)
    raw["resources"] = {"cpus": 2}  # one trial at a time
    path = tmp_path / "resume.yaml"
    path.write_text(yaml.safe_dump(raw))
    env = {**os.environ, "RAY_ADDRESS": ray_cluster}
    cmd = [sys.executable, "-m", "marl_ppo", "tune", str(path)]
    err_file = tmp_path / "driver.err"  # a file, not a pipe: a driver whose warnings fill a pipe no one reads stalls
    with open(err_file, "w") as err_out:
        driver = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=err_out, text=True)
    trials = tmp_path / "out" / "trials"
    try:

        def second_trial_started() -> bool:
            return len(list(trials.glob("*/summary.json"))) >= 1 and len(list(trials.glob("*/config.yaml"))) >= 2

        _wait_for(second_trial_started, "a finished trial and a second one started", driver, err_file)
        # the trials Tune has ended: every one started before the newest (one trial at a time). The newest may
        # write its summary while Tune stops, unrecorded by Tune: that one runs again at --resume
        started = sorted(trials.glob("*/config.yaml"), key=lambda f: f.stat().st_mtime_ns)
        ended = {f.parent.name for f in started[:-1]}
        done_before = {p.parent.name: p.stat().st_mtime_ns for p in trials.glob("*/summary.json")}
        done_before = {name: mtime for name, mtime in done_before.items() if name in ended}
        driver.send_signal(signal.SIGINT)  # Tune saves the experiment's state and stops
        driver.wait(timeout=900)
    finally:
        driver.kill()
    err = err_file.read_text()
    assert driver.returncode == 130, err[-3000:]  # not a finished search
    assert f"continue the search with: marl-ppo tune {path} --out {tmp_path / 'out'} --resume" in err
    assert not (tmp_path / "out" / "best.yaml").exists()  # no best of an unfinished search
    statuses = [r["status"] for r in csv.DictReader(open(tmp_path / "out" / "trials.csv"))]
    assert "failed" not in statuses and {"interrupted", "not started"} & set(statuses), statuses
    assert 1 <= len(done_before) < 4, done_before
    resumed = subprocess.run([*cmd, "--resume"], env=env, capture_output=True, text=True, timeout=1800)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    summaries = {p.parent.name: p.stat().st_mtime_ns for p in trials.glob("*/summary.json")}
    assert len(summaries) == 4
    assert all(summaries[name] == mtime for name, mtime in done_before.items())  # not redone
    rows = list(csv.DictReader(open(tmp_path / "out" / "trials.csv")))
    assert sorted(r["status"] for r in rows) == ["finished"] * 4
    assert (tmp_path / "out" / "best.yaml").is_file()


def test_resume_of_a_search_that_is_not_there_writes_nothing(tmp_path, capsys):
    raw = _tiny_raw(tmp_path)
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump(raw))
    assert main(["tune", str(path), "--resume"]) == 2
    assert f"cannot resume: {tmp_path / 'out' / 'ray' / 'tiny'} holds no Tune experiment" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("package", ["ray.tune", "optuna"])
def test_a_missing_tuning_package_names_the_extra(tmp_path, package):
    import subprocess
    import sys

    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump(_tiny_raw(tmp_path, searcher="optuna", space={"train.lr": {"choice": [1e-3]}})))
    code = f"import sys; sys.modules[{package!r}] = None; from marl_ppo.cli import main; "
    code += f"sys.exit(main(['tune', {str(path)!r}]))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "pip install 'marl-ppo[cluster]'" in proc.stderr
    assert not (tmp_path / "out").exists()
