"""The benchmark scripts run as written (with --quick) and print their ratios."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # whole runs, subprocesses and clusters

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    "script, pattern",
    [
        ("throughput.py", r"ratio ours/floor\s+[0-9.]+x"),
        ("group_count.py", r"[0-9.]+x"),
        ("ranks.py", r"\| navigation \| 2 \| .* \| [0-9]\.[0-9]+ \|"),  # 2 ranks' efficiency against 1 rank
    ],
)
def test_benchmark_script_quick(script, pattern):
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "benchmarks" / script), "--quick", "--threads", "1", "--repeats", "1"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert re.search(pattern, out.stdout), out.stdout


def test_throughput_quick_reports_collection_and_iteration_floors():
    """throughput.py on our 10-epoch config: the lean collector, and ratios for collection, update, iteration."""
    out = _run("throughput.py", "--quick", "--threads", "1", "--repeats", "1", "--config", "navigation", timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "navigation config" in out.stdout and "our collector: LeanVmasCollector" in out.stdout, out.stdout
    for what in ("collection", "update", "iteration"):
        m = re.search(rf"{what} ratio ours/floor\s+([0-9.]+)x", out.stdout)
        assert m and float(m.group(1)) > 0, out.stdout
    lp = re.search(r"floor log-prob check \(max \|lp - old lp\|\)\s+([0-9.e+-]+)", out.stdout)
    assert lp and float(lp.group(1)) < 1e-3, out.stdout  # the floor computes our policy


def test_update_costs_quick_reports_every_variant_against_full_and_floor():
    out = _run("update_costs.py", "--quick", "--threads", "1", timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    rows = dict(re.findall(r"^  (full|no entropy|no explained variance|neither|floor)\s+([0-9.]+)\s", out.stdout, re.M))
    assert set(rows) == {"full", "no entropy", "no explained variance", "neither", "floor"}, out.stdout
    assert all(float(v) > 0 for v in rows.values()), out.stdout
    assert re.search(r"^  full\s+[0-9.]+\s+1\.000x", out.stdout, re.M), out.stdout  # full against itself


def test_scaling_quick():
    out = _run("scaling.py", "--quick", "--threads", "1", timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    rows = re.findall(r"^\s+(\d+)\s+18\s+[0-9.]+\s+([0-9.]+)\s+[0-9.]+$", out.stdout, re.M)
    assert [int(n) for n, _ in rows] == [3, 6] and all(float(us) > 0 for _, us in rows), out.stdout
    envs = re.findall(r"^\s+(\d+)\s+(\d+)\s+(\d+)\s+[0-9.]+$", out.stdout, re.M)
    assert [int(n) for n, *_ in envs] == [10, 60], out.stdout


def test_first_batch_reports_time_to_the_first_batch():
    out = _run("first_batch.py", "--repeats", "1", "--threads", "1", timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    m = re.search(r"train: first batch collected \(6000 frames\)\s+([0-9.]+)", out.stdout)
    assert m and float(m.group(1)) > 0, out.stdout


def _run(script: str, *args: str, timeout: int = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "examples" / "benchmarks" / script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )


def _summary(stdout: str, side: str) -> dict[str, float]:
    """The machine-readable summary line ``<side>: key=value ...`` of vs_benchmarl.py."""
    lines = [ln for ln in stdout.splitlines() if ln.startswith(side + ": frames_per_s_steady=")]
    assert lines, stdout
    return {k: float(v) for k, v in (kv.split("=") for kv in lines[-1].split()[1:])}


def test_vs_benchmarl_ours_only_quick():
    out = _run("vs_benchmarl.py", "--quick", "--ours-only", "--threads", "1")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "clip_grad_val=5" in out.stdout and "WARNING" not in out.stdout, out.stdout
    ours = _summary(out.stdout, "ours")
    for key in (
        "frames_per_s_steady",
        "frames_per_s_run",
        "frames_per_s_proc",
        "iter_s",
        "collect_s",
        "update_s",
        "proc_wall_s",
        "peak_rss_mib",
    ):
        assert ours[key] > 0, (key, out.stdout)
    assert "ratio ours/benchmarl" not in out.stdout


FAKE_BENCHMARL = r"""#!/usr/bin/env bash
# stands in for benchmarl_baseline.sh: BenchMARL's CSV timers and last line
set -euo pipefail
while [ $# -gt 0 ]; do case "$1" in --out) out="$2"; shift 2;; --frames) frames="$2"; shift 2;; *) shift;; esac; done
d="$out/exp/exp/scalars"; mkdir -p "$d"
printf '0,5.0\n1,1.0\n' > "$d/timers_iteration_time.csv"
printf '0,4.0\n1,0.75\n' > "$d/timers_collection_time.csv"
printf '0,1.0\n1,0.25\n' > "$d/timers_training_time.csv"
echo "some BenchMARL chatter"
echo "benchmarl task=navigation frames=$frames wall_s=6.0 frames_per_s=200 final_mean_return=-0.5"
"""


def test_vs_benchmarl_parses_benchmarl_output(tmp_path):
    fake = tmp_path / "fake_benchmarl.sh"
    fake.write_text(FAKE_BENCHMARL)
    out = _run("vs_benchmarl.py", "--quick", "--threads", "1", "--benchmarl-script", str(fake))
    assert out.returncode == 0, out.stderr[-3000:]
    bm = _summary(out.stdout, "benchmarl")
    # steady state = the iterations after the first: 600 frames per iteration / 1.0 s
    assert bm["iter_s"] == 1.0 and bm["collect_s"] == 0.75 and bm["update_s"] == 0.25, out.stdout
    assert bm["frames_per_s_steady"] == 600 and bm["frames_per_s_run"] == 200, out.stdout
    assert bm["peak_rss_mib"] > 0
    m = re.search(r"ratio ours/benchmarl frames/s: steady=([0-9.]+)x run=([0-9.]+)x proc=([0-9.]+)x", out.stdout)
    assert m and float(m.group(1)) > 0 and float(m.group(2)) > 0, out.stdout  # (the fake's proc wall is ~0)


def test_large_batch_quick():
    out = _run("large_batch.py", "--quick", "--threads", "1")
    assert out.returncode == 0, out.stderr[-3000:]
    fps = re.search(r"^frames/s (\d+)\s+\(collect only (\d+)\)", out.stdout, re.M)
    split = re.search(r"^split collect/update (\d+)/(\d+)", out.stdout, re.M)
    rss = re.search(r"^peak RSS (\d+) MiB", out.stdout, re.M)
    assert fps and split and rss, out.stdout
    assert int(fps.group(1)) > 0 and int(fps.group(2)) > 0 and int(rss.group(1)) > 0
    assert 95 <= int(split.group(1)) + int(split.group(2)) <= 105
    assert "devices: batch, parameters and Adam state all on cpu" in out.stdout


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="checks the message without CUDA")
def test_cuda_vmas_fails_fast_without_cuda():
    out = _run("cuda_vmas.py", timeout=60)
    assert out.returncode == 2
    assert "CUDA is not available" in out.stderr


def test_scale_out_quick(ray_cluster):
    """scale_out.py on the session's Ray cluster: both launchers' overhead and three collection backends."""
    out = _run("scale_out.py", "--quick", "--threads", "1", "--ray-address", ray_cluster, timeout=400)
    assert out.returncode == 0, out.stderr[-3000:]
    for launcher in ("local", "ray"):
        m = re.search(
            rf"launcher {launcher}: jobs=2 wall_s=([0-9.]+) job_s_mean=([0-9.]+) overhead_per_job_s=(-?[0-9.]+)",
            out.stdout,
        )
        assert m and float(m.group(1)) > 0 and float(m.group(2)) > 0, out.stdout
    m = re.search(r"tune vs ray launcher: trials=2 ray_launcher_wall_s=([0-9.]+) tune_wall_s=([0-9.]+) ", out.stdout)
    assert m and float(m.group(1)) > 0 and float(m.group(2)) > 0, out.stdout
    for backend in ("direct", "process", "ray"):
        m = re.search(rf"collect {backend}: envs=64 workers=[12] frames_per_s=([0-9]+)", out.stdout)
        assert m and int(m.group(1)) > 0, out.stdout


def test_models_quick_one_task_one_variant_one_seed(tmp_path):
    """models.py --quick: one run of ours, "ours on BenchMARL's config" and a stand-in for BenchMARL's
    script; the table and the JSON have a row each, with the returns read from the runs."""
    import json

    fake = tmp_path / "fake_benchmarl.sh"
    fake.write_text(FAKE_BENCHMARL)
    out = _run(
        "models.py",
        "--quick",
        "--tasks",
        "navigation",
        "--variants",
        "none",
        "--variant",
        "lr 1e-3",
        "train.lr=1e-3",
        "--seeds",
        "1",
        "--threads",
        "1",
        "--benchmarl",
        "--benchmarl-script",
        str(fake),
        "--out",
        str(tmp_path / "out"),
    )
    assert out.returncode == 0, out.stderr[-3000:] + out.stdout[-2000:]
    assert re.search(r"models\.py: 2 runs of ours \+ 1 of BenchMARL = 3 runs", out.stdout), out.stdout
    assert "estimated time:" in out.stdout
    row = r"^\| navigation \| lr 1e-3 \| 1 \| 400 \| -?[0-9.]+ \| -?[0-9.]+ \|"
    assert re.search(row, out.stdout, re.M), out.stdout
    assert re.search(r"^\| navigation \| BenchMARL MAPPO \| 1 \| 2000 \| -0\.500 \| n/a \|", out.stdout, re.M), (
        out.stdout
    )
    results = json.loads((tmp_path / "out" / "models_results.json").read_text())
    rows = {r["variant"]: r for r in results["table"]}
    assert set(rows) == {"lr 1e-3", "ours on BenchMARL's config", "BenchMARL MAPPO"}
    assert rows["lr 1e-3"]["seeds"] == 1 and rows["lr 1e-3"]["train_sd"] is None  # one seed: no sd
    run = next(r for r in results["runs"] if r["variant"] == "lr 1e-3")
    assert "train.lr=1e-3" in run["command"] and "train.num_threads=1" in run["command"]
    summary = json.loads((Path(run["run_dir"]) / "summary.json").read_text())
    assert run["eval_return"] == summary["eval/agents/episode_reward"]


def test_tuned_compares_the_shipped_tuned_config_with_benchmarl_and_reuses_finished_runs(tmp_path):
    """tuned.py on 2 seeds of navigation at one batch, a stand-in for BenchMARL's script: each side's
    returns as read from the runs, their mean, and Welch's t-test as scipy computes it."""
    import json
    import statistics

    from scipy.stats import ttest_ind

    fake = tmp_path / "fake_benchmarl.sh"
    fake.write_text(FAKE_BENCHMARL)
    args = ["--tasks", "navigation", "--seeds", "2", "--frames", "6000", "--benchmarl-script", str(fake)]
    out = _run("tuned.py", *args, "--out", str(tmp_path / "out"), timeout=300)
    assert out.returncode == 0, out.stderr[-3000:] + out.stdout[-2000:]
    results = json.loads((tmp_path / "out" / "tuned_results.json").read_text())
    (row,) = results["table"]
    ours = [r for r in results["runs"] if r["variant"] == "ours, configs/tuned"]
    assert [r["seed"] for r in ours] == [100, 101] and all("tuned/navigation" in r["command"] for r in ours)
    for r in ours:  # the return is the run's last collected one
        from marl_ppo.run.logger import read_scalars

        assert r["train_return"] == read_scalars(Path(r["run_dir"]))["collect/agents/episode_reward"][-1][1]
    assert row["ours"] == [r["train_return"] for r in ours] and row["benchmarl"] == [-0.5, -0.5]
    assert row["ours_mean"] == pytest.approx(statistics.fmean(row["ours"]))
    assert row["p"] == pytest.approx(ttest_ind(row["ours"], row["benchmarl"], equal_var=False).pvalue, nan_ok=True)
    assert re.search(r"^\| navigation \| -?[0-9.]+ ± [0-9.]+ \| -0\.500 ± 0\.000 \|", out.stdout, re.M), out.stdout
    again = _run("tuned.py", *args, "--out", str(tmp_path / "out"), timeout=300)
    rerun = json.loads((tmp_path / "out" / "tuned_results.json").read_text())
    assert again.returncode == 0 and all(r["reused"] for r in rerun["runs"] if r["variant"] == "ours, configs/tuned")


def test_models_unknown_key_stops_before_any_run(tmp_path):
    out = _run(
        "models.py",
        "--quick",
        "--tasks",
        "navigation",
        "--variants",
        "none",
        "--variant",
        "typo",
        "train.lr_rate=1e-3",
        "--out",
        str(tmp_path / "out"),
        timeout=60,
    )
    assert out.returncode != 0
    assert "variant 'typo': unknown config key 'train.lr_rate'; did you mean 'train.lr'?" in out.stderr, out.stderr
    assert not (tmp_path / "out" / "runs").exists()


def test_opponents_quick_trains_and_plays_each_seat_against_random(tmp_path):
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "benchmarks" / "opponents.py"), "--quick", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    rows = [line for line in out.stdout.splitlines() if line.startswith("| tictactoe |")]
    assert [row.split("|")[2].strip() for row in rows] == ["player_1", "player_2"]
    for row in rows:
        win, draw, loss = (float(c) for c in row.split("|")[3:6])
        assert abs(win + draw + loss - 1.0) < 1e-6


def test_seeds_quick_times_one_process_against_separate_runs(tmp_path):
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "benchmarks" / "seeds.py"), "--quick", "--returns"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    rows = [line.split("|")[1:-1] for line in out.stdout.splitlines() if line.startswith("| ") and "S |" not in line]
    assert [int(r[0]) for r in rows] == [2]
    for row in rows:
        assert all(float(c) > 0 for c in row[1:])  # times, frames/s, ratios, RSS: all measured
    assert "S=2: one process" in out.stdout and "Welch t" in out.stdout


def _tactics_module():
    import importlib.util

    path = ROOT / "examples" / "benchmarks" / "tictactoe_tactics.py"
    spec = importlib.util.spec_from_file_location("tictactoe_tactics", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _board(mine: str, theirs: str):
    """A flat [3, 3, 2] board (own marks in channel 0) and its action mask, from two strings of 9."""
    import torch

    board = torch.tensor([[int(a), int(b)] for a, b in zip(mine, theirs)], dtype=torch.float32)
    return board.reshape(-1), (board.sum(-1) == 0)


def test_tactics_classifies_a_win_in_one_a_threat_and_a_quiet_position():
    classify = _tactics_module().classify
    obs, legal = _board("110000000", "000110000")  # own 0, 1: square 2 wins (before blocking 5)
    assert classify(obs, legal, 2) == ("win", True) and classify(obs, legal, 5) == ("win", False)
    obs, legal = _board("100000010", "000110000")  # their 3, 4: square 5 blocks; own 0 and 7 share no line
    assert classify(obs, legal, 5) == ("block", True) and classify(obs, legal, 2) == ("block", False)
    obs, legal = _board("100000000", "000010000")
    assert classify(obs, legal, 8) is None
    obs, legal = _board("000001000", "000110000")  # their line 3-4-5 is full: no threat
    assert classify(obs, legal, 0) is None


def test_tactics_reads_a_trained_tictactoe_run(tmp_path, monkeypatch, capsys):
    from marl_ppo.config import load_config
    from marl_ppo.run.trainer import Trainer

    overrides = ["train.total_frames=992", "log.eval_every=0", "log.eval_episodes=2", "log.eval_opponents=[]"]
    Trainer(load_config("tictactoe", [*overrides, "log.progress=false", "log.plot=false"]), run_dir=tmp_path).fit()
    monkeypatch.setattr(sys, "argv", ["tictactoe_tactics.py", str(tmp_path), "--steps", "60"])
    _tactics_module().main()
    rows = [line.split("|")[1:-1] for line in capsys.readouterr().out.splitlines() if line.startswith("| player_")]
    assert [r[0].strip() for r in rows] == ["player_1", "player_2"]
    for _, wins, took, blocks, blocked in rows:
        assert int(wins) + int(blocks) > 0 and 0 <= float(took) <= 1 and 0 <= float(blocked) <= 1


def test_export_latency_quick_times_every_format_for_an_agent_a_group_and_64():
    out = _run("export_latency.py", "--quick", "--threads", "1", timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert re.search(r"^model rows\s+torch policy\s+onnx\s+torchscript\s+exported$", out.stdout, re.M), out.stdout
    for rows in ("one agent", "one group", "64 groups"):
        m = re.search(rf"^mlp\s+{rows}\s+(\S+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)$", out.stdout, re.M)
        assert m and all(float(v) > 0 for v in m.groups()[1:]), out.stdout


def test_ablation_quick_trains_each_variant_and_reports_training_greedy_and_sampled(tmp_path):
    out = _run("ablation.py", "--quick", "--out", str(tmp_path), "--csv", str(tmp_path / "a.csv"), timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    for variant in ("base", "team"):
        assert re.search(rf"^\| {variant} \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \|$", out.stdout, re.M), out.stdout
    rows = (tmp_path / "a.csv").read_text().splitlines()
    assert rows[0].startswith("variant,seed,frames") and len(rows) == 1 + 2 * 3  # 2 variants x 3 seeds
