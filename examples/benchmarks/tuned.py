"""Tuned configs against BenchMARL (issue 24): ``configs/tuned/<task>.yaml`` and BenchMARL 1.5.2's
base MAPPO config on fresh seeds, at the same frames.

Per task (VMAS navigation, balance; both sides on BenchMARL's task settings) and seed: ``marl-ppo
train tuned/<task> train.seed=S`` and ``shared/tools/benchmarl_baseline.sh --task <task> --frames F
--seed S`` (BenchMARL's base config: 10 envs, 6 000 frames a batch, 45 epochs of 400-sample
minibatches, lr 5e-5). The figure is the final training return, the one BenchMARL reports: the mean
return of the episodes that ended in the last collected batch, mean over agents (ours: the last logged
``collect/<group>/episode_reward``, mean over groups). Prints mean ± sd per side and Welch's t-test
(``scipy.stats.ttest_ind(equal_var=False)``), and writes every run to ``--json``.

    .venv/bin/python examples/benchmarks/tuned.py                          # 5 seeds x 2 tasks x 2 sides
    .venv/bin/python examples/benchmarks/tuned.py --tasks navigation --seeds 2 --frames 12000   # a smoke check

Children run ``--jobs`` at a time with ``--threads`` torch threads each (returns, not timings, are
measured here). A run directory holding a finished run of the same command is reused.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from models import BENCHMARL, BENCHMARL_SH, Run, _mean_sd, run_benchmarl, run_train  # noqa: E402

TUNED = "ours, configs/tuned"
TASKS = ("navigation", "balance")


def run_tuned(args, run: Run) -> Run:
    command = [sys.executable, "-m", "marl_ppo.cli", "train", f"tuned/{run.task}", *run.overrides]
    return run_train(args, run, command, "tuned_run.json")


def plan(args) -> list[Run]:
    out, runs = Path(args.out), []
    for task in args.tasks:
        for seed in args.seed_list:
            name = f"{task}-seed{seed}"
            overrides = [
                f"train.seed={seed}",
                f"train.total_frames={args.frames}",
                f"train.num_threads={args.threads}",
                "log.progress=false",
                "log.plot=false",
                "log.loggers=[csv]",
                f"log.root={out / 'tuned'}",
                f"log.name={name}",
            ]
            runs.append(Run(task, TUNED, seed, overrides, str(out / "tuned" / name)))
            runs.append(Run(task, BENCHMARL, seed, [], str(out / "benchmarl" / name)))
    return runs


def compare(runs: list[Run]) -> list[dict]:
    from scipy.stats import ttest_ind

    rows = []
    for task in dict.fromkeys(r.task for r in runs):
        side = {
            v: [r.train_return for r in runs if r.task == task and r.variant == v and r.rc == 0]
            for v in (TUNED, BENCHMARL)
        }
        (om, osd), (bm, bsd) = _mean_sd(side[TUNED]), _mean_sd(side[BENCHMARL])
        test = ttest_ind(side[TUNED], side[BENCHMARL], equal_var=False) if min(map(len, side.values())) > 1 else None
        rows.append(
            {
                "task": task,
                "ours": side[TUNED],
                "benchmarl": side[BENCHMARL],
                "ours_mean": om,
                "ours_sd": osd,
                "benchmarl_mean": bm,
                "benchmarl_sd": bsd,
                "t": float(test.statistic) if test else float("nan"),
                "p": float(test.pvalue) if test else float("nan"),
                "ours_s_per_run": statistics.fmean([r.wall_s for r in runs if r.task == task and r.variant == TUNED]),
                "benchmarl_s_per_run": statistics.fmean(
                    [r.wall_s for r in runs if r.task == task and r.variant == BENCHMARL]
                ),
            }
        )
    return rows


def markdown(rows: list[dict], seeds: int, frames: int) -> str:
    lines = [
        f"| task | ours, configs/tuned ({seeds} seeds) | BenchMARL MAPPO ({seeds} seeds) | Welch t | p "
        "| s/run (ours, BenchMARL) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['task']} | {r['ours_mean']:.3f} ± {r['ours_sd']:.3f} "
            f"| {r['benchmarl_mean']:.3f} ± {r['benchmarl_sd']:.3f} "
            f"| {r['t']:.2f} | {r['p']:.2g} | {r['ours_s_per_run']:.0f}, {r['benchmarl_s_per_run']:.0f} |"
        )
    return f"final training return at {frames} frames, mean ± sd over seeds\n\n" + "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tasks", default=",".join(TASKS), help=f"comma-separated, of {list(TASKS)}")
    p.add_argument("--seeds", type=int, default=5, help="seeds --seed .. --seed + N - 1 (fresh: tuning used seed 0)")
    p.add_argument("--seed", type=int, default=100, help="the first seed")
    p.add_argument("--frames", type=int, default=120_000, help="frames per run, both sides")
    p.add_argument("--threads", type=int, default=1, help="torch threads per child")
    p.add_argument("--jobs", type=int, default=2, help="children at a time")
    p.add_argument("--benchmarl-script", default=str(BENCHMARL_SH), help="path of benchmarl_baseline.sh")
    p.add_argument("--out", help="run directories (default: a new temporary folder, kept)")
    p.add_argument("--json", help="results file (default: <out>/tuned_results.json)")
    args = p.parse_args(argv)
    args.tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    if unknown := [t for t in args.tasks if t not in TASKS]:
        p.error(f"unknown task(s) {unknown}; tasks are {list(TASKS)}")
    if args.seeds < 2:
        p.error("--seeds must be >= 2 (a t-test needs two per side)")
    args.seed_list = list(range(args.seed, args.seed + args.seeds))
    args.quick, args.rerun = False, False  # run_benchmarl's sizes: BenchMARL's base config; reuse finished runs
    args.out = args.out or tempfile.mkdtemp(prefix="tuned-bench-")
    args.json = args.json or str(Path(args.out) / "tuned_results.json")
    runs = plan(args)
    print(f"{len(runs)} runs into {args.out}, {args.jobs} at a time", flush=True)

    def one(run: Run) -> Run:
        done = run_tuned(args, run) if run.variant == TUNED else run_benchmarl(args, run, args.frames)
        status = "ok" if done.rc == 0 else f"failed: {done.error}"
        print(
            f"{done.task} {done.variant} seed {done.seed}: "
            f"return {done.train_return:.3f} ({done.wall_s:.0f} s) {status}",
            flush=True,
        )
        return done

    with ThreadPoolExecutor(args.jobs) as pool:
        runs = list(pool.map(one, runs))
    rows = compare(runs)
    print(markdown(rows, args.seeds, args.frames))
    Path(args.json).write_text(json.dumps({"runs": [asdict(r) for r in runs], "table": rows}, indent=1, default=str))
    print(f"written: {args.json}")
    return 0 if all(r.rc == 0 for r in runs) else 1


if __name__ == "__main__":
    raise SystemExit(main())
