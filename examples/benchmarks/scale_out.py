"""What scaling out costs: the Ray launcher against local worker processes, and collection backends.

1. Per-job overhead of the suite launchers on an 8-run tiny suite (``configs/suites/tiny.yaml``,
   2 tasks x 4 seeds): wall time of the whole suite with ``--launcher local`` (2 worker processes)
   and ``--launcher ray`` (on a Ray cluster of ``--ray-cpus`` CPUs, started here unless
   ``--ray-address`` is given; its start-up is timed apart). Per-job overhead = (wall x slots -
   the jobs' own seconds) / jobs: the time a slot spent not training (process start and imports,
   scheduling, result files).
2. Per-trial overhead of Ray Tune against the plain Ray launcher on the same cluster: the tiny suite's
   navigation runs over ``--tune-seeds`` seeds, once as a suite with ``--launcher ray`` and once as
   ``marl-ppo tune`` trials (``train.seed`` as a grid, ``fifo``: every trial its budget). Both run
   2 at a time with the same overrides; overhead per trial = (Tune's wall - the launcher's wall) x
   slots / trials (Tune's trial actors, its reports, checkpoints and results files, its experiment state).
3. Collection frames/s of ``train.collector.backend`` direct, process and ray (2 workers each) at
   ``--num-envs`` VMAS navigation envs, 100 steps per batch, the policy's weights pushed after every
   batch as the trainer does; the first batch (start-up) is left out.

::

    python examples/benchmarks/scale_out.py --threads 1
    python examples/benchmarks/scale_out.py --quick --threads 1          # smoke: 2 runs a launcher, 2 batches
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "configs" / "suites" / "tiny.yaml"


def launcher_overhead(launcher: str, seeds: tuple[int, ...], slots: int, out: Path, **kw) -> dict[str, float]:
    from marl_ppo.suite import Suite, run_suite

    suite = Suite.load(TINY).replace(seeds=seeds, workers=slots)
    t0 = time.perf_counter()
    result = run_suite(suite, out=out, launcher=launcher, plot=False, rerun=True, echo=lambda _: None, **kw)
    wall = time.perf_counter() - t0
    if result.failed:
        raise RuntimeError(result.table())
    job_s = sum(r.seconds for r in result.runs)
    n = len(result.runs)
    return {"jobs": n, "wall_s": wall, "job_s_mean": job_s / n, "overhead_per_job_s": (wall * slots - job_s) / n}


def tune_overhead(seeds: tuple[int, ...], slots: int, out: Path) -> dict[str, float]:
    from marl_ppo.suite import Suite, run_suite
    from marl_ppo.suite.tune_runner import run_tune
    from marl_ppo.suite.tune_spec import TuneSpec

    tiny = Suite.load(TINY)
    suite = tiny.replace(tasks=tiny.tasks[:1], seeds=seeds, workers=slots)  # navigation
    t0 = time.perf_counter()
    result = run_suite(suite, out=out / "suite", launcher="ray", plot=False, rerun=True, echo=lambda _: None)
    ray_wall = time.perf_counter() - t0
    if result.failed:
        raise RuntimeError(result.table())
    spec = TuneSpec.from_dict(
        {
            "name": "overhead",
            "task": str(ROOT / "configs" / "navigation.yaml"),
            "overrides": list(tiny.overrides),
            "space": {"train.seed": {"grid": list(seeds)}},
            "scheduler": "fifo",
            "metric": "collect/agents/episode_reward",
            "num_samples": 1,
            "resources": {"cpus": 1},
            "out": str(out / "tune"),
        },
        source="overhead",
    )
    t0 = time.perf_counter()
    tuned = run_tune(spec, echo=lambda _: None)
    tune_wall = time.perf_counter() - t0
    if any(t.status != "finished" for t in tuned.trials):
        raise RuntimeError([(t.name, t.status, t.error) for t in tuned.trials])
    n = len(seeds)
    return {
        "trials": n,
        "ray_launcher_wall_s": ray_wall,
        "tune_wall_s": tune_wall,
        "tune_overhead_per_trial_s": (tune_wall - ray_wall) * slots / n,
    }


def collection_fps(backend: str, num_envs: int, batches: int, threads: int) -> float:
    from marl_ppo.config import load_config
    from marl_ppo.run.build import build, build_collector

    n = 1 if backend == "direct" else 2
    cfg = load_config(
        overrides=[
            f"env.num_envs={num_envs}",
            f"train.frames_per_batch={num_envs * 100}",
            f"train.num_threads={threads}",
            f"train.collector.backend={backend}",
            f"train.collector.num_collectors={n}",
        ]
    )
    parts = build(cfg)
    frames = cfg.train.frames_per_batch
    collector = build_collector(cfg, parts.env, parts.router.policy, total_frames=(batches + 1) * frames)
    times = []
    try:
        t0 = time.perf_counter()
        for batch in collector:
            times.append(time.perf_counter() - t0)
            collector.update_policy_weights_()
            t0 = time.perf_counter()
    finally:
        collector.shutdown()
    steady = times[1:]
    return frames * len(steady) / sum(steady)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="2 runs a launcher and 2 batches: a smoke check")
    p.add_argument("--threads", type=int, default=1, help="torch threads per job / per collector process")
    p.add_argument("--num-envs", type=int, default=64)
    p.add_argument("--batches", type=int, default=5, help="timed collection batches per backend")
    p.add_argument("--ray-address", help="an existing Ray cluster (default: start a local one)")
    p.add_argument("--ray-cpus", type=int, default=2, help="CPUs of the local Ray cluster")
    p.add_argument("--tune-seeds", type=int, default=8, help="trials of the Tune comparison")
    p.add_argument("--skip", nargs="*", default=[], choices=("launchers", "tune", "collection"))
    args = p.parse_args()
    import ray
    import torch

    torch.set_num_threads(args.threads)
    seeds = (0,) if args.quick else (0, 1, 2, 3)
    batches = 2 if args.quick else args.batches
    t0 = time.perf_counter()
    if args.ray_address:
        ray.init(address=args.ray_address, log_to_driver=False)
    else:
        ray.init(
            num_cpus=args.ray_cpus, object_store_memory=200 * 1024**2, include_dashboard=False, log_to_driver=False
        )
    print(f"ray cluster up in {time.perf_counter() - t0:.1f}s ({ray.cluster_resources().get('CPU', 0):g} CPUs)")
    try:
        if "launchers" not in args.skip:
            with tempfile.TemporaryDirectory() as tmp:
                for launcher in ("local", "ray"):
                    r = launcher_overhead(launcher, seeds, 2, Path(tmp) / launcher)
                    print(
                        f"launcher {launcher}: "
                        + " ".join(f"{k}={v:.2f}" if isinstance(v, float) else f"{k}={v}" for k, v in r.items())
                    )
        if "tune" not in args.skip:
            with tempfile.TemporaryDirectory() as tmp:
                r = tune_overhead(tuple(range(2 if args.quick else args.tune_seeds)), 2, Path(tmp))
                print(
                    "tune vs ray launcher: "
                    + " ".join(f"{k}={v:.2f}" if isinstance(v, float) else f"{k}={v}" for k, v in r.items())
                )
        if "collection" not in args.skip:
            for backend in ("direct", "process", "ray"):
                fps = collection_fps(backend, args.num_envs, batches, args.threads)
                print(
                    f"collect {backend}: envs={args.num_envs} workers={1 if backend == 'direct' else 2} "
                    f"frames_per_s={fps:.0f}"
                )
    finally:
        ray.shutdown()


if __name__ == "__main__":  # collector worker processes (spawn) must not re-run it
    main()
