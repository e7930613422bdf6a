"""Ours against BenchMARL, side by side: MAPPO on VMAS navigation with BenchMARL's base config.

Each repeat runs two child processes, one after the other, alternating which goes first:

* BenchMARL 1.5.2 in its own venv, through ``shared/tools/benchmarl_baseline.sh`` (BenchMARL pins
  a torchrl that cannot live beside ours); its last line is
  ``benchmarl task=.. frames=.. wall_s=.. frames_per_s=.. final_mean_return=..``;
* ours: a ``python -c`` launcher that builds a :class:`~marl_ppo.run.trainer.Trainer` with the same
  settings and times ``fit()`` the way ``benchmarl_baseline.py`` times ``exp.run()``; it prints
  the same kind of last line, ``ours task=.. frames=.. wall_s=.. ..``.

Both pay their start-up the same way (a fresh interpreter, imports, env and network set-up). For
each child we report:

* ``proc wall``: the child process timed from here, start-up included;
* ``run wall``: the child's own timing of the training loop (BenchMARL's ``exp.run()``, our
  ``Trainer.fit()``; set-up excluded, first iteration included);
* steady state: the median time of the iterations after the first, from the run's logs
  (BenchMARL's CSV ``timers_collection_time`` / ``timers_training_time`` /
  ``timers_iteration_time``; ours ``time/collect_s`` + ``time/update_s`` via
  ``marl_ppo.run.logger.read_scalars``); with a single iteration, that one;
* the peak RSS of the child (GNU ``/usr/bin/time -v``, else polling ``VmHWM`` in
  ``/proc/<pid>/status``).

Then medians over ``--repeats`` and the ratios ours/BenchMARL of frames/s.

``--concurrent`` runs the two children of a repeat at the same time instead (one thread each with
``--threads 1``): on a machine that other jobs load unevenly, a slow spell then falls on both
sides of the ratio, at the price of each side's absolute speed (they share the cores and memory
bandwidth).

The settings are BenchMARL's defaults (read from the BenchMARL venv at run time and printed; a
mismatch with what we mirror is flagged): 3 agents, 10 envs, max_steps 100, 6 000 frames per
iteration, 45 epochs, minibatch 400, lr 5e-5, MLP 256x2 tanh, clip 0.2, gamma 0.99, lambda 0.9,
entropy 0, critic l2 x1, grad-norm clip 5, shared parameters, centralised shared critic, no
advantage normalisation, evaluation off.

Run (minutes; use a quiet machine):

    .venv/bin/python examples/benchmarks/vs_benchmarl.py                     # 30 000 frames, 3 repeats
    .venv/bin/python examples/benchmarks/vs_benchmarl.py --threads 1 --frames 60000 --repeats 5
    .venv/bin/python examples/benchmarks/vs_benchmarl.py --quick --ours-only # smoke check, seconds
    .venv/bin/python examples/benchmarks/vs_benchmarl.py --compile            # ours with train.compile=true
    .venv/bin/python examples/benchmarks/vs_benchmarl.py --threads 1 --repeats 2 --concurrent   # a shared machine

``--threads N`` sets ``OMP_NUM_THREADS`` / ``MKL_NUM_THREADS`` for both children (torch reads
``OMP_NUM_THREADS`` at import for its intra-op pool; BenchMARL's script takes no thread flag) and
also calls ``torch.set_num_threads(N)`` in ours.
"""

from __future__ import annotations

import argparse
import functools
import glob
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCHMARL_SH = ROOT.parent / "shared" / "tools" / "benchmarl_baseline.sh"

FULL = dict(frames=30_000, repeats=3, frames_per_batch=6000, epochs=45, minibatch=400, n_envs=10)
QUICK = dict(frames=1200, repeats=1, frames_per_batch=600, epochs=2, minibatch=200, n_envs=10)

# BenchMARL 1.5.2's defaults, as we mirror them; checked against the venv's YAML files at run time.
# (file, key) -> value
BENCHMARL_DEFAULTS = {
    ("experiment/base_experiment.yaml", "gamma"): 0.99,
    ("experiment/base_experiment.yaml", "lr"): 5e-5,
    ("experiment/base_experiment.yaml", "adam_eps"): 1e-6,
    ("experiment/base_experiment.yaml", "clip_grad_norm"): True,
    ("experiment/base_experiment.yaml", "clip_grad_val"): 5,
    ("experiment/base_experiment.yaml", "share_policy_params"): True,
    ("experiment/base_experiment.yaml", "prefer_continuous_actions"): True,
    ("experiment/base_experiment.yaml", "on_policy_collected_frames_per_batch"): 6000,
    ("experiment/base_experiment.yaml", "on_policy_n_envs_per_worker"): 10,
    ("experiment/base_experiment.yaml", "on_policy_n_minibatch_iters"): 45,
    ("experiment/base_experiment.yaml", "on_policy_minibatch_size"): 400,
    ("algorithm/mappo.yaml", "share_param_critic"): True,
    ("algorithm/mappo.yaml", "clip_epsilon"): 0.2,
    ("algorithm/mappo.yaml", "entropy_coef"): 0.0,
    ("algorithm/mappo.yaml", "critic_coef"): 1.0,
    ("algorithm/mappo.yaml", "loss_critic_type"): "l2",
    ("algorithm/mappo.yaml", "lmbda"): 0.9,
    ("algorithm/mappo.yaml", "scale_mapping"): "biased_softplus_1.0",
    ("algorithm/mappo.yaml", "use_tanh_normal"): True,
    ("algorithm/mappo.yaml", "minibatch_advantage"): False,
    ("model/layers/mlp.yaml", "num_cells"): [256, 256],
    ("model/layers/mlp.yaml", "activation_class"): "torch.nn.Tanh",
    ("task/vmas/navigation.yaml", "max_steps"): 100,
    ("task/vmas/navigation.yaml", "n_agents"): 3,
    ("task/vmas/navigation.yaml", "collisions"): True,
    ("task/vmas/navigation.yaml", "agents_with_same_goal"): 1,
    ("task/vmas/navigation.yaml", "split_goals"): False,
    ("task/vmas/navigation.yaml", "observe_all_goals"): False,
    ("task/vmas/navigation.yaml", "shared_rew"): False,
    ("task/vmas/navigation.yaml", "lidar_range"): 0.35,
    ("task/vmas/navigation.yaml", "agent_radius"): 0.1,
}
# BenchMARL's VMAS navigation task kwargs (task/vmas/navigation.yaml); vmas's own default for
# shared_rew is True, so these are passed explicitly.
NAVIGATION_KWARGS = {
    k: v for (f, k), v in BENCHMARL_DEFAULTS.items() if f == "task/vmas/navigation.yaml" and k != "max_steps"
}

# What is not the same, and cannot be made so through our config (printed with the settings).
DIFFERENCES = [
    "optimizer: BenchMARL one Adam per loss term (actor, critic), eps 1e-6, each clipping its own grad "
    "norm at 5; ours one fused Adam over all parameters, eps 1e-8, one global grad-norm clip at 5",
    "minibatches: BenchMARL ceil(frames_per_batch / minibatch) per epoch (sampled without replacement, "
    "last one smaller); ours floor(...) of full size (equal when the minibatch divides the batch: 6000/400)",
    "end of run: ours writes a final checkpoint and runs one deterministic evaluation episode "
    "(log.eval_episodes=1; Trainer.fit always does); BenchMARL: evaluation=False, checkpoint_at_end=False",
]


def navigation_overrides(
    *,
    n_envs: int,
    frames_per_batch: int,
    epochs: int,
    minibatch: int,
    total_frames: int,
    seed: int = 0,
    gamma: float = 0.99,
    device: str = "cpu",
) -> list[str]:
    """Our config overrides for BenchMARL's MAPPO on VMAS navigation (base config by default)."""
    kwargs = ", ".join(f"{k}: {str(v).lower() if isinstance(v, bool) else v}" for k, v in NAVIGATION_KWARGS.items())
    return [
        "env.kind=vmas",
        "env.scenario=navigation",
        f"env.kwargs={{{kwargs}}}",
        f"env.num_envs={n_envs}",
        "env.max_steps=100",
        "env.continuous_actions=true",
        f"env.device={device}",
        "loss.algorithm=mappo",
        "model.share_params=true",
        "model.hidden=[256,256]",
        "model.activation=tanh",
        "loss.clip_epsilon=0.2",
        f"loss.gamma={gamma}",
        "loss.lmbda=0.9",
        "loss.entropy_coeff=0.0",
        "loss.critic_coeff=1.0",
        "loss.loss_critic_type=l2",
        "loss.normalize_advantage=false",
        f"train.frames_per_batch={frames_per_batch}",
        f"train.num_epochs={epochs}",
        f"train.minibatch_size={minibatch}",
        "train.lr=5e-5",
        "train.lr_schedule=constant",
        "train.max_grad_norm=5.0",
        f"train.total_frames={total_frames}",
        f"train.seed={seed}",
        f"train.device={device}",
    ]


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--frames", type=int, help="frames per run (both); default 30 000")
    p.add_argument("--repeats", type=int, help="runs of each; default 3")
    p.add_argument("--frames-per-batch", type=int)
    p.add_argument("--epochs", type=int)
    p.add_argument("--minibatch", type=int)
    p.add_argument("--n-envs", type=int)
    p.add_argument("--seed", type=int, default=0, help="repeat i uses seed + i (the same for both)")
    p.add_argument(
        "--threads",
        type=int,
        default=0,
        help="OMP/MKL threads for both children, and torch.set_num_threads in ours (0: defaults)",
    )
    p.add_argument(
        "--compile",
        action="store_true",
        help="ours with train.compile=true (its first iteration then includes compiling)",
    )
    p.add_argument("--quick", action="store_true", help="tiny sizes for a smoke check")
    p.add_argument(
        "--concurrent",
        action="store_true",
        help="run the two children of a repeat at the same time (a shared machine's slow spells hit both)",
    )
    p.add_argument("--ours-only", action="store_true", help="skip BenchMARL (no BenchMARL venv needed)")
    p.add_argument("--benchmarl-script", default=str(BENCHMARL_SH), help="path of benchmarl_baseline.sh")
    p.add_argument("--out", help="where the runs write (default: a temporary folder, removed at the end)")
    args = p.parse_args(argv)
    for k, v in (QUICK if args.quick else FULL).items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    if args.frames < args.frames_per_batch:
        p.error(f"--frames ({args.frames}) must be at least --frames-per-batch ({args.frames_per_batch})")
    return args


# -- child processes ------------------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def _gnu_time() -> str | None:
    """GNU time's path if it has ``-v`` (BusyBox's and shells' ``time`` do not), else None."""
    path = shutil.which("time") or ("/usr/bin/time" if os.path.exists("/usr/bin/time") else None)
    if path is None:
        return None
    try:
        out = subprocess.run([path, "-v", "true"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return path if "Maximum resident set size" in out.stderr else None


def run_child(cmd: list[str], env: dict[str, str], cwd: Path, workdir: Path) -> dict:
    """Runs ``cmd``; returns rc, stdout, stderr, wall seconds (start-up included) and peak RSS in MiB."""
    gnu_time = _gnu_time()
    time_file = workdir / f"time-{time.monotonic_ns()}.txt"
    full = [gnu_time, "-v", "-o", str(time_file), *cmd] if gnu_time else cmd
    peak_kib = [0]
    t0 = time.perf_counter()
    proc = subprocess.Popen(full, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stop = threading.Event()

    def poll() -> None:  # fallback without GNU time: VmHWM of the child (and of its children)
        while not stop.wait(0.2):
            for pid in _tree(proc.pid):
                try:
                    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                        if line.startswith("VmHWM:"):
                            peak_kib[0] = max(peak_kib[0], int(line.split()[1]))
                except (OSError, ValueError):
                    pass

    poller = None if gnu_time else threading.Thread(target=poll, daemon=True)
    if poller:
        poller.start()
    stdout, stderr = proc.communicate()
    wall = time.perf_counter() - t0
    stop.set()
    if gnu_time and time_file.exists():
        m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", time_file.read_text())
        peak_kib[0] = int(m.group(1)) if m else 0
        time_file.unlink()
    return {
        "rc": proc.returncode,
        "stdout": stdout,
        "stderr": stderr,
        "proc_wall": wall,
        "rss_mib": peak_kib[0] / 1024 if peak_kib[0] else float("nan"),
    }


def _tree(pid: int) -> list[int]:
    """``pid`` and its descendants (from /proc)."""
    children: dict[int, list[int]] = {}
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            fields = Path(stat).read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(stat.split("/")[2]))
        except (OSError, IndexError, ValueError):
            pass
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def child_env(threads: int) -> dict[str, str]:
    env = dict(os.environ)
    if threads:
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(threads)
    return env


def _last_line(stdout: str, prefix: str) -> dict[str, str]:
    lines = [ln for ln in stdout.splitlines() if ln.startswith(prefix + " ")]
    if not lines:
        return {}
    return dict(kv.split("=", 1) for kv in lines[-1].split()[1:] if "=" in kv)


def _median_steady(values: list[float]) -> float:
    """Median over the iterations after the first (the first pays the warm-up); the one value if alone."""
    values = values[1:] if len(values) > 1 else values
    return statistics.median(values) if values else float("nan")


OURS_LAUNCHER = r"""
import sys, time, json
threads = int(sys.argv[1]); run_dir = sys.argv[2]; overrides = sys.argv[3:]
import torch
if threads:
    torch.set_num_threads(threads)
from marl_ppo.config import load_config
from marl_ppo.run.trainer import Trainer
from marl_ppo.run.logger import read_scalars
cfg = load_config(overrides=overrides)
trainer = Trainer(cfg, run_dir=run_dir)
t = time.perf_counter()
summary = trainer.fit()
wall = time.perf_counter() - t
ret = read_scalars(run_dir).get("collect/agents/episode_reward", [(0, float("nan"))])[-1][1]
print(f"ours task=navigation frames={summary['frames']} wall_s={wall:.1f} "
      f"frames_per_s={summary['frames'] / wall:.0f} final_mean_return={ret:.3f} threads={torch.get_num_threads()}")
"""


def run_ours(args, seed: int, workdir: Path) -> dict:
    run_dir = workdir / f"ours-seed{seed}-{time.monotonic_ns()}"
    overrides = navigation_overrides(
        n_envs=args.n_envs,
        frames_per_batch=args.frames_per_batch,
        epochs=args.epochs,
        minibatch=args.minibatch,
        total_frames=args.frames,
        seed=seed,
    ) + [
        "log.eval_every=0",
        "log.eval_episodes=1",
        "log.checkpoint_every=0",
        "log.progress=false",
        "log.plot=false",
        "log.loggers=[csv]",
        f"train.compile={str(args.compile).lower()}",
    ]
    res = run_child(
        [sys.executable, "-c", OURS_LAUNCHER, str(args.threads), str(run_dir), *overrides],
        child_env(args.threads),
        ROOT,
        workdir,
    )
    line = _last_line(res["stdout"], "ours")
    if res["rc"] != 0 or not line:
        raise RuntimeError(f"our run failed (rc {res['rc']}):\n{res['stderr'][-3000:]}\n{res['stdout'][-1000:]}")
    from marl_ppo.run.logger import read_scalars

    scalars = read_scalars(run_dir)
    collect = [v for _, v in scalars["time/collect_s"]]
    update = [v for _, v in scalars["time/update_s"]]
    iters = [c + u for c, u in zip(collect, update)]
    return {
        **res,
        "run_wall": float(line["wall_s"]),
        "return": float(line["final_mean_return"]),
        "frames": int(line["frames"]),
        "collect": _median_steady(collect),
        "update": _median_steady(update),
        "iter": _median_steady(iters),
        "n_iters": len(iters),
    }


def run_benchmarl(args, seed: int, workdir: Path) -> dict:
    out = workdir / f"benchmarl-seed{seed}-{time.monotonic_ns()}"
    cmd = [
        "bash",
        args.benchmarl_script,
        "--task",
        "navigation",
        "--frames",
        str(args.frames),
        "--seed",
        str(seed),
        "--frames-per-batch",
        str(args.frames_per_batch),
        "--epochs",
        str(args.epochs),
        "--minibatch",
        str(args.minibatch),
        "--n-envs",
        str(args.n_envs),
        "--out",
        str(out),
    ]
    res = run_child(cmd, child_env(args.threads), ROOT, workdir)
    line = _last_line(res["stdout"], "benchmarl")
    if res["rc"] != 0 or not line:
        raise RuntimeError(f"BenchMARL run failed (rc {res['rc']}):\n{res['stderr'][-3000:]}\n{res['stdout'][-1000:]}")

    def timer(name: str) -> list[float]:
        files = sorted(out.rglob(f"timers_{name}.csv"))
        if not files:
            return []
        rows = [ln.split(",") for ln in files[-1].read_text().splitlines() if ln.strip()]
        return [float(v) for _, v in sorted((int(float(s)), v) for s, v in rows)]

    collect, train, iters = timer("collection_time"), timer("training_time"), timer("iteration_time")
    frames = int(line["frames"])
    if not iters:  # no CSV timers: frames / wall
        iters = [float(line["wall_s"]) * args.frames_per_batch / frames]
    return {
        **res,
        "run_wall": float(line["wall_s"]),
        "return": float(line["final_mean_return"]),
        "frames": frames,
        "collect": _median_steady(collect),
        "update": _median_steady(train),
        "iter": _median_steady(iters),
        "n_iters": len(iters),
    }


# -- settings ---------------------------------------------------------------------------------


def benchmarl_conf_dir() -> Path | None:
    """BenchMARL's ``conf`` folder in the venv benchmarl_baseline.sh uses (``$BENCHMARL_VENV`` or
    ``${TMPDIR:-/tmp}/benchmarl-venv``), or None."""
    venv = os.environ.get("BENCHMARL_VENV") or os.path.join(os.environ.get("TMPDIR", "/tmp"), "benchmarl-venv")
    found = sorted(glob.glob(os.path.join(venv, "lib", "python*", "site-packages", "benchmarl", "conf")))
    return Path(found[-1]) if found else None


def print_settings(args) -> None:
    print("settings (BenchMARL 1.5.2 defaults, mirrored in our config):")
    conf = benchmarl_conf_dir()
    read: dict = {}
    if conf is not None:
        from omegaconf import OmegaConf

        for f in {f for f, _ in BENCHMARL_DEFAULTS}:
            if (conf / f).exists():
                read[f] = OmegaConf.to_container(OmegaConf.load(conf / f))
        print(f"  read from {conf}")
    else:
        print("  (BenchMARL venv not found: values as of BenchMARL 1.5.2, not checked)")
    mismatches = []
    for f in sorted({f for f, _ in BENCHMARL_DEFAULTS}):
        items = []
        for (ff, k), v in BENCHMARL_DEFAULTS.items():
            if ff != f:
                continue
            actual = read.get(f, {}).get(k, v)
            if f in read and actual != v:
                mismatches.append(f"{f}:{k} is {actual!r} in the venv, we mirror {v!r}")
            items.append(f"{k}={actual}")
        print(f"  {f}: " + ", ".join(items))
    print("  benchmarl/algorithms/mappo.py: ClipPPOLoss(normalize_advantage=False)")
    print(
        f"  run: frames={args.frames} frames_per_batch={args.frames_per_batch} epochs={args.epochs} "
        f"minibatch={args.minibatch} n_envs={args.n_envs} evaluation=False (benchmarl_baseline.py)"
    )
    print(
        "  ours: "
        + " ".join(
            navigation_overrides(
                n_envs=args.n_envs,
                frames_per_batch=args.frames_per_batch,
                epochs=args.epochs,
                minibatch=args.minibatch,
                total_frames=args.frames,
            )
        )
        + f" train.compile={str(args.compile).lower()}"
    )
    for d in DIFFERENCES:
        print(f"  differs: {d}")
    for m in mismatches:
        print(f"  WARNING: {m}")


# -- main -------------------------------------------------------------------------------------


def main(argv=None) -> None:
    args = parse_args(argv)
    if not args.ours_only and not Path(args.benchmarl_script).exists():
        sys.exit(
            f"vs_benchmarl: no BenchMARL script at {args.benchmarl_script} (pass --benchmarl-script, or --ours-only)"
        )
    threads = (
        f"{args.threads} (OMP_NUM_THREADS/MKL_NUM_THREADS for both, torch.set_num_threads in ours)"
        if args.threads
        else "torch defaults"
    )
    print(
        f"vs_benchmarl: MAPPO on VMAS navigation, {args.frames} frames per run, {args.repeats} repeat(s), "
        f"{'both children at once' if args.concurrent else 'one child at a time'}, "
        f"threads: {threads}; peak RSS by {'GNU time -v' if _gnu_time() else 'polling /proc/<pid>/status VmHWM'}"
    )
    if not args.ours_only and benchmarl_conf_dir() is None:
        # benchmarl_baseline.sh makes its venv on first use: do that now, untimed
        print("BenchMARL venv not found: creating it through benchmarl_baseline.sh (untimed, minutes)", flush=True)
        subprocess.run(["bash", args.benchmarl_script, "--help"], cwd=ROOT, capture_output=True, text=True)
    print_settings(args)
    workdir = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="vs_benchmarl-"))
    workdir.mkdir(parents=True, exist_ok=True)
    sides = ["ours"] if args.ours_only else ["benchmarl", "ours"]
    rows: dict[str, list[dict]] = {s: [] for s in sides}
    try:
        for rep in range(args.repeats):
            seed = args.seed + rep
            order = sides if rep % 2 == 0 else sides[::-1]
            runs = {"ours": run_ours, "benchmarl": run_benchmarl}
            if args.concurrent:
                from concurrent.futures import ThreadPoolExecutor

                with ThreadPoolExecutor(len(order)) as pool:
                    futures = {side: pool.submit(runs[side], args, seed, workdir) for side in order}
                    results = {side: f.result() for side, f in futures.items()}
            for side in order:
                r = results[side] if args.concurrent else runs[side](args, seed, workdir)
                rows[side].append(r)
                print(
                    f"  repeat {rep + 1} {side:<9}: proc wall {r['proc_wall']:6.1f}s  "
                    f"run wall {r['run_wall']:6.1f}s  "
                    f"steady iter {r['iter']:6.2f}s (collect {r['collect']:.2f}s, update {r['update']:.2f}s; "
                    f"{r['n_iters']} iters)  peak RSS {r['rss_mib']:.0f} MiB  return {r['return']:.3f}",
                    flush=True,
                )
    finally:
        if not args.out:
            shutil.rmtree(workdir, ignore_errors=True)

    fpb = args.frames_per_batch
    med = {}
    for side, rs in rows.items():
        m = {
            k: statistics.median(r[k] for r in rs)
            for k in ("proc_wall", "run_wall", "iter", "collect", "update", "rss_mib")
        }
        frames = rs[0]["frames"]
        m.update(fps_steady=fpb / m["iter"], fps_run=frames / m["run_wall"], fps_proc=frames / m["proc_wall"])
        med[side] = m
    print(f"\nmedians over {args.repeats} repeat(s); steady state = iterations after the first")
    print(f"  {'':<26}" + "".join(f"{s:>12}" for s in sides) + ("  ours/benchmarl" if len(sides) == 2 else ""))
    for label, key, fmt in (
        ("proc wall s (start-up in)", "proc_wall", ".1f"),
        ("run wall s", "run_wall", ".1f"),
        ("steady iteration s", "iter", ".2f"),
        ("  collect s", "collect", ".2f"),
        ("  update s", "update", ".2f"),
        ("frames/s steady", "fps_steady", ".0f"),
        ("frames/s run wall", "fps_run", ".0f"),
        ("frames/s proc wall", "fps_proc", ".0f"),
        ("peak RSS MiB", "rss_mib", ".0f"),
    ):
        ratio = f"{med['ours'][key] / med['benchmarl'][key]:15.2f}" if len(sides) == 2 else ""
        print(f"  {label:<26}" + "".join(f"{med[s][key]:12{fmt}}" for s in sides) + ratio)
    for side in sides:
        m = med[side]
        print(
            f"{side}: frames_per_s_steady={m['fps_steady']:.0f} frames_per_s_run={m['fps_run']:.0f} "
            f"frames_per_s_proc={m['fps_proc']:.0f} iter_s={m['iter']:.3f} collect_s={m['collect']:.3f} "
            f"update_s={m['update']:.3f} proc_wall_s={m['proc_wall']:.1f} peak_rss_mib={m['rss_mib']:.0f}"
        )
    if len(sides) == 2:
        o, b = med["ours"], med["benchmarl"]
        print(
            f"ratio ours/benchmarl frames/s: steady={o['fps_steady'] / b['fps_steady']:.2f}x "
            f"run={o['fps_run'] / b['fps_run']:.2f}x proc={o['fps_proc'] / b['fps_proc']:.2f}x"
        )


if __name__ == "__main__":
    main()
