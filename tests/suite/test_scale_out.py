"""Sweeps, launchers and merging of :mod:`marl_ppo.suite`, on real Ray and real submitit.

Covered:

* ``marl-ppo suite configs/suites/tiny.yaml --launcher ray`` as a command (on the session's cluster
  through ``RAY_ADDRESS``) gives the same runs and the same marl-eval JSON as the local launcher;
  running it again skips the finished jobs;
* the Ray launcher without shared storage (the tasks send their files back) gives the same JSON;
* a job that fails on Ray is reported with its error while the others finish;
* a sweep of 2 learning rates x 2 tasks x 2 seeds: 8 runs, the variants in the JSON's algorithm
  field, both variants on each task's panel of the plot; ``marl-ppo train -m`` runs a grid too;
* submitit's local executor runs the tiny suite as a job array, with the local launcher's JSON;
* merging two half-suites gives the whole suite's JSON; mismatched or overlapping inputs are refused.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from marl_ppo.cli import main as marl_ppo_main
from marl_ppo.suite import SlurmSpec, Suite, SuiteError, TaskSpec, main, merge_suites, plan, run_suite, suite_curves
from marl_ppo.suite.slurm_launcher import executor_parameters

pytestmark = pytest.mark.slow  # whole runs, subprocesses and clusters

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "configs" / "suites" / "tiny.yaml"
QUIET = dict(echo=lambda _: None, plot=False)


def _json(out: Path) -> dict:
    return json.loads((out / "marl_eval.json").read_text())


def _statuses(result) -> dict[str, str]:
    return {r.job.label: r.status for r in result.runs}


@pytest.fixture(scope="module")
def local_tiny(tmp_path_factory) -> Path:
    """The tiny suite on the local launcher (2 worker processes): the reference."""
    out = tmp_path_factory.mktemp("local")
    result = run_suite(TINY, out=out, **QUIET)
    assert set(_statuses(result).values()) == {"ok"} and len(result.runs) == 4
    return out


def _marl_ppo_command() -> list[str]:
    script = Path(sys.executable).with_name("marl-ppo")
    return [str(script)] if script.exists() else [sys.executable, "-m", "marl_ppo.cli"]


def test_ray_launcher_command_matches_local(local_tiny, ray_cluster, tmp_path):
    out = tmp_path / "ray"
    env = {**os.environ, "RAY_ADDRESS": ray_cluster}
    proc = subprocess.run(
        [*_marl_ppo_command(), "suite", str(TINY), "--launcher", "ray", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=400,
        cwd=ROOT,
        env=env,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "launcher ray" in proc.stdout
    assert sum(line.startswith("ok ") for line in proc.stdout.splitlines()) == 4, proc.stdout
    assert _json(out) == _json(local_tiny)  # same runs, same evaluations (marl-eval JSON has no times)
    assert sorted(p.name for p in (out / "runs").iterdir()) == sorted(p.name for p in (local_tiny / "runs").iterdir())
    assert (out / "returns.png").exists()
    # rerunning skips the finished jobs (here in-process, on the same cluster)
    again = run_suite(TINY, out=out, launcher="ray", **QUIET)
    assert set(_statuses(again).values()) == {"skipped"}
    assert _json(out) == _json(local_tiny)


def test_ray_without_shared_storage_sends_the_files_back(local_tiny, ray_cluster, tmp_path):
    result = run_suite(TINY, out=tmp_path, launcher="ray", ray_shared=False, **QUIET)
    assert set(_statuses(result).values()) == {"ok"}
    assert _json(tmp_path) == _json(local_tiny)
    run_dir = tmp_path / "runs" / "navigation-mappo-seed0"
    for name in ("summary.json", "suite_result.json", "absolute_metrics.json", "config.yaml", "logs"):
        assert (run_dir / name).exists(), name
    assert not (run_dir / "checkpoints").exists()  # checkpoints stay on the worker's node
    assert json.loads((run_dir / "summary.json").read_text())["run_dir"] == str(run_dir)


def test_a_failing_job_on_ray_is_reported_and_the_others_finish(ray_cluster, tmp_path):
    suite = Suite.load(TINY)
    broken = TaskSpec(
        config=str(ROOT / "configs" / "navigation.yaml"), overrides=("env.scenario=no_such_scenario",), name="broken"
    )
    suite = suite.replace(tasks=(suite.tasks[0], broken), seeds=(0,))
    lines: list[str] = []
    result = run_suite(suite, out=tmp_path, launcher="ray", plot=False, echo=lines.append)
    assert _statuses(result) == {"vmas/navigation/mappo/seed_0": "ok", "vmas/broken/mappo/seed_0": "failed"}
    (failed,) = result.failed
    assert "no_such_scenario" in failed.error
    assert "no_such_scenario" in (tmp_path / "runs" / "broken-mappo-seed0" / "error.txt").read_text()
    assert any(line.startswith("failed") and "broken" in line and "no_such_scenario" in line for line in lines)
    assert list(_json(tmp_path)["vmas"]) == ["navigation"]


def _tiny_raw() -> dict:
    """tiny.yaml's mapping, with its task paths made absolute (for a copy written elsewhere)."""
    raw = yaml.safe_load(TINY.read_text())
    raw["tasks"] = [str((TINY.parent / t).resolve()) for t in raw["tasks"]]
    return raw


def _sweep_suite(tmp_path: Path) -> Path:
    raw = _tiny_raw()
    raw["sweep"] = {"train.lr": [1.0e-3, 3.0e-4]}
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def test_sweep_two_lrs_two_tasks_two_seeds(ray_cluster, tmp_path):
    out = tmp_path / "out"
    result = run_suite(_sweep_suite(tmp_path), out=out, launcher="ray", echo=lambda _: None)
    assert len(result.runs) == 8 and set(_statuses(result).values()) == {"ok"}
    data = _json(out)
    variants = ["mappo[lr=0.0003]", "mappo[lr=0.001]"]
    for task in ("navigation", "balance"):
        assert sorted(data["vmas"][task]) == variants
        for v in variants:
            assert sorted(data["vmas"][task][v]) == ["seed_0", "seed_1"]
    run_dir = out / "runs" / "balance-mappo-lr=0.001-seed1"
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["train"]["lr"] == 0.001
    curves = suite_curves(data)
    assert {panel: sorted(lines) for panel, lines in curves.items()} == {
        "vmas/navigation": variants,
        "vmas/balance": variants,
    }
    from PIL import Image

    description = Image.open(result.plot_path).text["Description"]
    assert "vmas/navigation: mappo[lr=0.0003], mappo[lr=0.001]" in description
    assert "vmas/balance: mappo[lr=0.0003], mappo[lr=0.001]" in description


def test_train_multirun_grid(tmp_path, capsys):
    tiny = [o for o in yaml.safe_load(TINY.read_text())["overrides"] if not o.startswith("train.total_frames")]
    code = marl_ppo_main(
        [
            "train",
            "-m",
            str(ROOT / "configs" / "navigation.yaml"),
            "train.lr=1e-3,3e-4",
            "loss.algorithm=mappo,ippo",
            "train.total_frames=300",
            *tiny,
            "log.progress=false",
            "--out",
            str(tmp_path),
        ]
    )
    assert code == 0, capsys.readouterr().err
    algos = _json(tmp_path)["vmas"]["navigation"]
    assert sorted(algos) == ["ippo[lr=0.0003]", "ippo[lr=0.001]", "mappo[lr=0.0003]", "mappo[lr=0.001]"]
    assert all(list(runs) == ["seed_0"] for runs in algos.values())


def test_submitit_local_job_array(local_tiny, tmp_path):
    suite = Suite.load(TINY).replace(slurm=SlurmSpec(cluster="local", time=10))
    lines: list[str] = []
    result = run_suite(suite, out=tmp_path, launcher="slurm", plot=False, echo=lines.append)
    assert set(_statuses(result).values()) == {"ok"} and len(result.runs) == 4
    assert any("submitted a job array of 4" in line for line in lines)
    assert _json(tmp_path) == _json(local_tiny)
    assert len(list((tmp_path / "slurm").glob("*_result.pkl"))) == 4  # submitit's own records of the 4 jobs


def test_slurm_section_becomes_executor_parameters(tmp_path):
    raw = _tiny_raw()
    raw["slurm"] = {"partition": "gpu", "time": 30, "gpus": 1, "mem_gb": 8, "setup": "module load cuda"}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(raw))
    spec = Suite.load(path).slurm
    assert executor_parameters(spec, threads=1) == {
        "name": "marl-ppo-suite",
        "timeout_min": 30,
        "cpus_per_task": 1,
        "gpus_per_node": 1,
        "slurm_array_parallelism": 256,
        "slurm_partition": "gpu",
        "mem_gb": 8,
        "slurm_setup": ["module load cuda"],
    }
    raw["slurm"] = {"partiton": "gpu"}
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(SuiteError, match=r"unknown key 'partiton' in .*slurm; did you mean 'partition'\?"):
        Suite.load(path)


def test_merge_two_half_suites_equals_the_whole(local_tiny, ray_cluster, tmp_path, capsys):
    halves = []
    for seed, shared in ((0, True), (1, False)):
        out = tmp_path / f"half{seed}"
        result = run_suite(Suite.load(TINY).replace(seeds=(seed,)), out=out, launcher="ray", ray_shared=shared, **QUIET)
        assert set(_statuses(result).values()) == {"ok"}
        halves.append(out)
    merged = tmp_path / "merged"
    assert main(["merge", *map(str, halves), "--out", str(merged)]) == 0
    assert _json(merged) == _json(local_tiny)
    assert (merged / "returns.png").read_bytes()[:4] == b"\x89PNG"
    # the merged report is the whole suite's (local_tiny's out holds the report the suite wrote)
    assert f"report: {merged / 'report.md'}" in capsys.readouterr().out
    assert (merged / "report.md").read_text().splitlines()[1:] == (local_tiny / "report.md").read_text().splitlines()[
        1:
    ]
    # the same run twice, and tasks whose seeds differ, are refused with the names
    with pytest.raises(SuiteError, match=r"vmas/navigation/mappo/seed_0 is in both .*half0 and .*half0"):
        merge_suites([halves[0], halves[0]], tmp_path / "twice")
    lopsided = tmp_path / "lopsided"
    shutil.copytree(halves[1], lopsided)
    data = _json(lopsided)
    del data["vmas"]["balance"]
    (lopsided / "marl_eval.json").write_text(json.dumps(data))
    assert main(["merge", str(halves[0]), str(lopsided), "--out", str(tmp_path / "bad")]) == 2
    err = capsys.readouterr().err
    assert "cannot merge: vmas/" in err and "has runs ['seed_0']" in err and "['seed_0', 'seed_1']" in err
    assert not (tmp_path / "bad" / "marl_eval.json").exists()
    # into another suite's output folder: refused, nothing replaced, unless asked; the same merge again is fine
    before = (halves[1] / "marl_eval.json").read_bytes()
    assert main(["merge", str(halves[0]), "--out", str(halves[1])]) == 2
    err = capsys.readouterr().err
    assert f"--out {halves[1]} already holds a suite's results" in err and "--force" in err
    assert (halves[1] / "marl_eval.json").read_bytes() == before
    assert main(["merge", *map(str, halves), "--out", str(merged)]) == 0  # the same sources: a rebuild
    assert main(["merge", str(halves[0]), "--out", str(merged)]) == 2  # other sources
    assert main(["merge", str(halves[0]), "--out", str(merged), "--force"]) == 0


@pytest.mark.parametrize("path", sorted((ROOT / "configs" / "suites").glob("*.yaml")), ids=lambda p: p.name)
def test_every_suite_file_plans(path, tmp_path):
    jobs = plan(Suite.load(path), out=tmp_path)
    assert jobs and len({j.run_dir for j in jobs}) == len(jobs)
    if path.name == "vmas_lr_sweep.yaml":
        assert len(jobs) == 12
        assert sorted({j.result_algorithm for j in jobs}) == ["mappo[lr=0.0003]", "mappo[lr=5e-05]"]


def test_sweep_names_and_errors(tmp_path):
    nav = str(ROOT / "configs" / "navigation.yaml")

    def suite(sweep) -> Suite:
        return Suite.from_dict({"tasks": [nav], "sweep": sweep})

    jobs = plan(
        suite({"model.hidden": [[64, 64], [32]], "train.lr": [1.0e-3], "loss.algorithm": ["ippo"]}), out=tmp_path
    )
    assert [j.label for j in jobs] == [
        "vmas/navigation/ippo[hidden=64x64;lr=0.001]/seed_0",
        "vmas/navigation/ippo[hidden=32;lr=0.001]/seed_0",
    ]
    assert Path(jobs[0].run_dir).name == "navigation-ippo-hidden=64x64-lr=0.001-seed0"
    with pytest.raises(SuiteError, match="'train.seed' cannot be swept .*use 'seeds'"):
        suite({"train.seed": [0, 1]})
    with pytest.raises(
        SuiteError,
        match=r"with sweep \['train.lr_rate=0.1'\].*unknown config key 'train.lr_rate'; "
        r"did you mean 'train.lr'",
    ):
        plan(suite({"train.lr_rate": [0.1]}), out=tmp_path)
    with pytest.raises(SuiteError, match=r"both vmas/navigation/mappo\[lr=0.001\]/seed_0"):
        plan(suite({"train.lr": ["1e-3", 0.001]}), out=tmp_path)  # the same value, once resolved
