"""Many seeds in one process (``train.seeds``) against the same seeds run one after another and side by side.

For each S, three ways to train seeds 0..S-1 of a config, every process with the same threads
(``train.num_threads``, default 1), each a ``marl-ppo train`` child process timed with
``/usr/bin/time`` (wall time, peak RSS):

* **one process**: ``train.seeds=[0,...,S-1]`` (one VMAS env of S x num_envs copies, stacked update);
* **one after another**: S runs ``train.seed=s``, in turn (time: the sum; RSS: the largest);
* **side by side**: S runs at once (time: until the last ends; RSS: the sum of the S peaks).

It prints a markdown table (wall seconds, frames per second per seed, peak RSS in MiB, and one
process against the other two) and, with ``--returns``, each way's final evaluation returns (mean,
sd, Welch's t-test between one process and separate runs).

    .venv/bin/python examples/benchmarks/seeds.py --seeds 1,2,4,8 --frames 30000 --small
    .venv/bin/python examples/benchmarks/seeds.py --seeds 8 --frames 120000 --returns --no-side-by-side
    .venv/bin/python examples/benchmarks/seeds.py --seeds 4 --small --set model.kind=gru model.seq_len=10
    .venv/bin/python examples/benchmarks/seeds.py --quick                     # smoke: a minute

``--small``: the small-net setting (``model.hidden=[64,64]``, 10 envs); ``--device cuda`` runs every
process on the GPU (the issue's 16 seeds x 1 024 envs figure needs one).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _train(overrides: list[str], out: Path, name: str) -> subprocess.Popen:
    """A ``marl-ppo train`` child under ``/usr/bin/time`` (its peak RSS in ``out/name.rss``)."""
    cmd = [
        "/usr/bin/time",
        "-f",
        "%M",
        "-o",
        str(out / f"{name}.rss"),
        sys.executable,
        "-m",
        "marl_ppo.cli",
        "train",
        *overrides,
        f"log.root={out}",
    ]
    return subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _wait(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        _, err = proc.communicate()
        if proc.returncode != 0:
            raise SystemExit(f"a training run failed:\n{err[-3000:]}")


def _rss(out: Path, name: str) -> float:
    return int((out / f"{name}.rss").read_text().split()[-1]) / 1024  # KiB -> MiB


def _returns(out: Path) -> list[float]:
    values = []
    for summary in sorted(out.glob("*/summary.json")):
        data = json.loads(summary.read_text())
        values += [v for k, v in data.items() if k.startswith("eval/") and k.endswith("/episode_reward")][:1]
    return values


def measure(seeds: int, base: list[str], out: Path, side_by_side: bool) -> dict:
    """Wall time and peak RSS of S seeds: in one process, one after another, side by side."""
    row = {"S": seeds}
    listed = ",".join(str(s) for s in range(seeds))
    where = out / "one"
    where.mkdir(parents=True)
    t0 = time.perf_counter()
    _wait([_train([*base, f"train.seeds=[{listed}]"], where, "one")])
    row["one_s"], row["one_rss"], row["one_returns"] = time.perf_counter() - t0, _rss(where, "one"), _returns(where)
    where = out / "sequential"
    where.mkdir()
    t0 = time.perf_counter()
    for s in range(seeds):
        _wait([_train([*base, f"train.seed={s}"], where, f"seed{s}")])
    row["seq_s"] = time.perf_counter() - t0
    row["seq_rss"] = max(_rss(where, f"seed{s}") for s in range(seeds))
    row["seq_returns"] = _returns(where)
    if side_by_side:
        where = out / "parallel"
        where.mkdir()
        t0 = time.perf_counter()
        _wait([_train([*base, f"train.seed={s}"], where, f"seed{s}") for s in range(seeds)])
        row["par_s"] = time.perf_counter() - t0
        row["par_rss"] = sum(_rss(where, f"seed{s}") for s in range(seeds))
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default="navigation")
    p.add_argument("--seeds", default="1,2,4,8", help="the S to measure, comma-separated")
    p.add_argument("--frames", type=int, default=30_000, help="train.total_frames of every run")
    p.add_argument("--small", action="store_true", help="model.hidden=[64,64], env.num_envs=10")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--device", default="cpu")
    p.add_argument("--returns", action="store_true", help="print the final returns and a t-test")
    p.add_argument("--no-side-by-side", dest="side_by_side", action="store_false")
    p.add_argument("--quick", action="store_true", help="S = 2 on a tiny run")
    p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="more config overrides (model.kind=gru)")
    args = p.parse_args()
    base = [
        args.config,
        f"train.total_frames={args.frames}",
        f"train.num_threads={args.threads}",
        f"train.device={args.device}",
        f"env.device={args.device}",
        "log.plot=false",
        "log.progress=false",
    ]
    if args.small:
        base += ["model.hidden=[64,64]", "env.num_envs=10"]
    if args.quick:
        args.seeds = "2"
        base += ["train.total_frames=1200", "train.frames_per_batch=600", "env.num_envs=10", "model.hidden=[16]"]
        base += ["train.num_epochs=1", "log.eval_episodes=2"]
    base += args.set
    setting = "small net (64x64, 10 envs)" if args.small else f"configs/{args.config}.yaml"
    setting += f" {' '.join(args.set)}" if args.set else ""
    print(
        f"{setting}, {args.frames if not args.quick else 1200} frames per seed, {args.threads} thread(s), {args.device}"
    )
    print(
        "\n| S | one process s | one after another s | side by side s | frames/s per seed (one process) "
        "| one / after another | one / side by side | peak RSS one MiB | RSS S processes MiB | RSS ratio |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for seeds in [int(s) for s in args.seeds.split(",")]:
            row = measure(seeds, base, Path(tmp) / f"S{seeds}", args.side_by_side)
            rows.append(row)
            frames = args.frames if not args.quick else 1200
            one, seq, par, par_rss = row["one_s"], row["seq_s"], row.get("par_s"), row.get("par_rss")
            cells = [
                str(seeds),
                f"{one:.1f}",
                f"{seq:.1f}",
                f"{par:.1f}" if par else "-",
                f"{frames / one:.0f}",
                f"{one / seq:.2f}",
                f"{one / par:.2f}" if par else "-",
                f"{row['one_rss']:.0f}",
                f"{par_rss:.0f}" if par_rss else "-",
                f"{row['one_rss'] / par_rss:.2f}" if par_rss else "-",
            ]
            print("| " + " | ".join(cells) + " |", flush=True)
    if args.returns:
        for row in rows:
            one, seq = row["one_returns"], row["seq_returns"]
            line = f"S={row['S']}: one process {statistics.mean(one):.3f}"
            if len(one) > 1:
                line += f" (sd {statistics.stdev(one):.3f})"
            line += f"; separate runs {statistics.mean(seq):.3f}"
            if len(seq) > 1:
                line += f" (sd {statistics.stdev(seq):.3f})"
            if len(one) > 1 and len(seq) > 1:
                from scipy.stats import ttest_ind

                test = ttest_ind(one, seq, equal_var=False)
                line += f"; Welch t = {test.statistic:.2f}, p = {test.pvalue:.2f}"
            print(line)
            print(f"  one process: {[round(v, 3) for v in one]}\n  separate:    {[round(v, 3) for v in seq]}")


if __name__ == "__main__":
    main()
