"""One run on 1 and 2 ranks (``train.ranks``): frames/s, weak scaling, the all-reduce's cost, and learning.

**Speed** (weak scaling: each rank steps its own ``env.num_envs`` copies and collects its own
``train.frames_per_batch``, one thread each): for each setting, ``marl-ppo train ... train.ranks=N``
for N in ``--ranks``; from the logged per-iteration times (``logs/scalars/time/collect_s.csv`` and
``update_s.csv``, every iteration after the first), the run's frames/s (N x frames_per_batch / the
median iteration's seconds) and the weak-scaling efficiency, fps(N) / (N x fps(1)).

* ``navigation``: the shipped default config (60 envs, 6 000 frames a batch, 10 epochs of minibatch 400);
* ``update-heavy``: the same with 30 epochs of minibatch 200 (the update is most of an iteration).

The control: as many one-rank runs as ranks, at once (the same cores busy, nothing shared between
them); the ranks' frames/s over theirs is what the ranks' agreement costs, apart from the cores
slowing each other.

**All-reduce**: under torch's launcher, 2 ranks run a step's one collective ``--calls`` times (the default
router's gradients with the seed's alive flag and the stop-signal flags in one flat buffer,
:meth:`~marl_ppo.core.ranks.Ranks.mean_grads_`); the per-iteration cost is that times the minibatches of
an iteration (epochs x frames_per_batch / minibatch_size). Between iterations the ranks agree on a
stop signal in a small all-reduce of their own (:meth:`~marl_ppo.core.ranks.Ranks.max`), timed apart.

**Learning** (``--learning``): seeds 0..S-1 (``train.seeds``) of navigation at the same total frames,
one rank with E envs, minibatch M against two ranks with E/2 envs and minibatch M/2 each (the same
global batch and minibatch); each seed's final evaluation return, mean and sd of each, and whether
the two-rank mean lies within the one-rank seeds' spread (min..max).

    .venv/bin/python examples/benchmarks/ranks.py                      # speed and all-reduce
    .venv/bin/python examples/benchmarks/ranks.py --learning --seeds 3 --frames 120000
    .venv/bin/python examples/benchmarks/ranks.py --quick              # smoke: a minute
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = {
    "navigation": [],
    "update-heavy": ["train.num_epochs=30", "train.minibatch_size=200"],
}


def _command(overrides: list[str], root: Path, name: str) -> list[str]:
    return [sys.executable, "-m", "marl_ppo", "train", *overrides, f"log.root={root}", f"log.name={name}",
            "log.progress=false", "log.plot=false", "log.eval_every=0"]  # fmt: skip


def _train(overrides: list[str], root: Path, name: str, copies: int = 1) -> list[Path]:
    """``copies`` runs of ``overrides`` at once (their directories ``name``, ``name-2``, ...)."""
    names = [name] + [f"{name}-{i}" for i in range(2, copies + 1)]
    procs = [subprocess.Popen(_command(overrides, root, n), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, cwd=ROOT) for n in names]  # fmt: skip
    for proc in procs:
        _, err = proc.communicate()
        if proc.returncode:
            raise SystemExit(f"{' '.join(proc.args)} failed:\n{err[-3000:]}")
    return [root / n for n in names]


def _seconds(run_dir: Path) -> tuple[float, float, float]:
    """The median iteration's collection, update and total seconds (the first iteration not counted)."""
    collect, update = _column(run_dir, "collect_s")[1:], _column(run_dir, "update_s")[1:]
    return (
        statistics.median(collect),
        statistics.median(update),
        statistics.median(c + u for c, u in zip(collect, update)),
    )


def _column(run_dir: Path, name: str) -> list[float]:
    with open(run_dir / "logs" / "scalars" / "time" / f"{name}.csv") as f:
        return [float(row[1]) for row in csv.reader(f)]


def speed(args, root: Path) -> list[dict]:
    rows = []
    for setting, extra in SETTINGS.items():
        base = [*args.set, *extra, f"train.num_threads={args.threads}", f"train.total_frames={args.iterations * 6000}"]
        if args.quick:
            base += ["env.num_envs=10", "train.frames_per_batch=1000", "train.minibatch_size=200",
                     f"train.total_frames={args.iterations * 1000}"]  # fmt: skip
        one = None
        for n in args.ranks:
            overrides = [*base, f"train.ranks={n}", f"train.total_frames={args.iterations * n * _fpb(base)}"]
            collect, update, seconds = _seconds(_train(overrides, root, f"{setting}-{n}")[0])
            fps = n * _fpb(base) / seconds
            one = fps if n == 1 else one
            apart = None
            if n > 1:  # the control: n one-rank runs at once, the same cores busy, nothing shared
                runs = _train(
                    [*base, f"train.total_frames={args.iterations * _fpb(base)}"], root, f"{setting}-apart{n}", n
                )
                apart = sum(_fpb(base) / _seconds(d)[2] for d in runs)
            rows.append({"setting": setting, "ranks": n, "collect_s": collect, "update_s": update, "fps": fps,
                         "efficiency": fps / (n * one) if one else None, "apart_fps": apart})  # fmt: skip
    return rows


def _fpb(overrides: list[str]) -> int:
    given = [o for o in overrides if o.startswith("train.frames_per_batch=")]
    return int(given[-1].split("=")[1]) if given else 6000


def allreduce(args) -> dict:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", __file__,
           "--allreduce-worker", "--calls", str(args.calls), "--set", *args.set]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1"})
    if done.returncode:
        raise SystemExit(f"the all-reduce workers failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def allreduce_worker(args) -> None:
    import torch
    import torch.distributed as dist

    from marl_ppo.config import load_config
    from marl_ppo.core.aggregate import unique_parameters
    from marl_ppo.core.ranks import Ranks
    from marl_ppo.run.build import build

    cfg = load_config(None, [*args.set, "train.num_threads=1"])
    parts = build(cfg)
    params = unique_parameters(parts.router)
    dist.init_process_group("gloo")
    ranks = Ranks(dist.get_rank(), dist.get_world_size())
    for p in params:
        p.grad = torch.randn_like(p)
    alive = torch.ones(1, dtype=torch.bool)
    ranks.mean_grads_(params, alive, [0.0, 0.0])  # warm-up
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(args.calls):  # as a step calls it: gradients, the seed's alive flag, the stop-signal flags
        ranks.mean_grads_(params, alive, [0.0, 0.0])
    per_call = (time.perf_counter() - t0) / args.calls
    t0 = time.perf_counter()
    for _ in range(args.calls):  # between iterations: whether any rank got a stop signal
        ranks.max(0)
    flags = (time.perf_counter() - t0) / args.calls
    steps = cfg.train.num_epochs * (cfg.train.frames_per_batch // cfg.train.minibatch_size)
    if ranks.main:
        print(json.dumps({"parameters": sum(p.numel() for p in params), "ms_per_call": 1e3 * per_call,
                          "ms_flags_per_step": 1e3 * flags, "steps_per_iteration": steps,
                          "s_per_iteration": steps * per_call}))  # fmt: skip
    dist.destroy_process_group()


def learning(args, root: Path) -> list[dict]:
    seeds = list(range(args.seeds))
    common = [*args.set, f"train.seeds=[{','.join(map(str, seeds))}]", f"train.total_frames={args.frames}",
              f"train.num_threads={args.threads}", "log.eval_episodes=20"]  # fmt: skip
    ways = {
        "1 rank x 60 envs, minibatch 400": ["env.num_envs=60", "train.frames_per_batch=6000",
                                            "train.minibatch_size=400"],
        "2 ranks x 30 envs, minibatch 200": ["env.num_envs=30", "train.frames_per_batch=3000",
                                             "train.minibatch_size=200", "train.ranks=2"],
    }  # fmt: skip
    rows = []
    for way, extra in ways.items():
        name = "learn-1" if "1 rank" in way else "learn-2"
        t0 = time.perf_counter()
        _train([*common, *extra], root, name)
        wall = time.perf_counter() - t0
        returns = [json.loads((root / f"{name}-seed{s}" / "summary.json").read_text())["eval/agents/episode_reward"]
                   for s in seeds]  # fmt: skip
        rows.append({"way": way, "returns": returns, "wall_s": wall})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--iterations", type=int, default=4, help="iterations a speed run (the first is not timed)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--calls", type=int, default=200, help="all-reduce calls timed")
    parser.add_argument("--learning", action="store_true")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--frames", type=int, default=120_000)
    parser.add_argument("--quick", action="store_true", help="smoke: small batches, 2 timed iterations")
    parser.add_argument("--set", nargs="*", default=[], help="config overrides for every run")
    parser.add_argument("--repeats", type=int, default=1, help="(accepted for the benchmark smoke test)")
    parser.add_argument("--allreduce-worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.allreduce_worker:
        return allreduce_worker(args)
    if args.quick:
        args.iterations, args.calls = 3, 20
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        print(
            "| setting | ranks | collect s | update s | frames/s (run) | weak-scaling efficiency | "
            "as many one-rank runs at once, frames/s (all) | ranks / those |"
        )
        print("|---|---|---|---|---|---|---|---|")
        for r in speed(args, root):
            eff = "" if r["efficiency"] is None else f"{r['efficiency']:.2f}"
            apart = r["apart_fps"]
            cells = [
                r["setting"],
                r["ranks"],
                f"{r['collect_s']:.2f}",
                f"{r['update_s']:.2f}",
                f"{r['fps']:.0f}",
                eff,
                "" if apart is None else f"{apart:.0f}",
                "" if apart is None else f"{r['fps'] / apart:.2f}",
            ]
            print("| " + " | ".join(map(str, cells)) + " |")
        a = allreduce(args)
        print(f"\na step's all-reduce ({a['parameters']} gradient elements and the flags): {a['ms_per_call']:.3f} "
              f"ms; x {a['steps_per_iteration']} steps = {a['s_per_iteration']:.3f} s an iteration; the stop signal "
              f"between iterations: {a['ms_flags_per_step']:.3f} ms")  # fmt: skip
        if args.learning:
            rows = learning(args, root)
            print("\n| way | final eval return per seed | mean | sd | wall s |")
            print("|---|---|---|---|---|")
            for r in rows:
                values = r["returns"]
                sd = statistics.stdev(values) if len(values) > 1 else 0.0
                print(f"| {r['way']} | {', '.join(f'{v:.3f}' for v in values)} | {statistics.mean(values):.3f} | "
                      f"{sd:.3f} | {r['wall_s']:.0f} |")  # fmt: skip
            one, two = rows[0]["returns"], rows[1]["returns"]
            inside = min(one) <= statistics.mean(two) <= max(one)
            mean = statistics.mean(two)
            print(f"\n2 ranks' mean {mean:.3f} within 1 rank's spread [{min(one):.3f}, {max(one):.3f}]: {inside}")


if __name__ == "__main__":
    main()
