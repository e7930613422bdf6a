"""Models and estimators (issue 13): tasks x variants x seeds, final returns as mean +- sd.

Each run is one child process, ``python -m marl_ppo.cli train configs/<task>.yaml <overrides>``
(the task's own config, then the variant's overrides, then this script's: seed, frames, threads,
``log.progress=false log.plot=false``, the run directory under ``--out``). Every task gets the same
frames for all its variants (``--frames``, default the task config's ``train.total_frames``). Per
run it reads the final training return (the last logged ``collect/<group>/episode_reward``: the
mean episode return of the episodes that ended in the last batch, mean over agents, then groups)
and the final evaluation return (``eval/<group>/episode_reward`` of the run's ``summary.json``:
deterministic, ``--eval-episodes`` episodes). It prints a markdown table of mean +- sd over the
seeds per (task, variant) and writes every run and the table to ``--json``.

    .venv/bin/python examples/benchmarks/models.py --threads 1                        # everything: hours
    .venv/bin/python examples/benchmarks/models.py --dry-run                          # the runs and the estimate
    .venv/bin/python examples/benchmarks/models.py --tasks navigation --variants defaults,gru --seeds 3
    .venv/bin/python examples/benchmarks/models.py --quick --tasks navigation --variants none \\
        --variant "lr 1e-3" train.lr=1e-3                                              # smoke: seconds
    .venv/bin/python examples/benchmarks/models.py --benchmarl --tasks navigation,balance

Variants are lists of ``key=value`` overrides (:data:`VARIANTS`; ``--variant NAME k=v ...`` adds
one). Every (task, variant) config is loaded before anything runs, so an unknown key stops the
script at once, naming it. ``--benchmarl`` adds, on VMAS navigation and balance, BenchMARL 1.5.2's
own MAPPO (``shared/tools/benchmarl_baseline.sh``, its base config, training return only: it
runs without evaluation) and the variant "ours on BenchMARL's config" (its settings mirrored in
our config, as ``vs_benchmarl.py`` does for navigation), at the same frames.

A run directory that already holds a ``summary.json`` of the same command is reused (an
interrupted benchmark continues where it stopped); ``--rerun`` runs everything again.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(ROOT))  # this checkout's marl_ppo, as the children get (child_env)
from vs_benchmarl import BENCHMARL_SH, NAVIGATION_KWARGS, benchmarl_conf_dir, navigation_overrides  # noqa: E402

# The variants of issue 13's figures, each spelled out in full (not relative to the defaults):
# a fraction of the 2 x 2 x 2 grid that still gives each option's effect twice or more
# (truncate vs terminate with and without value norm; value norm with either time limit; GRU
# against the same MLP row). "mlp/none/terminate" is everything as before issue 13.
VARIANTS: dict[str, list[str]] = {
    "mlp/none/terminate": ["model.kind=mlp", "loss.value_norm=none", "env.time_limit=terminate"],
    "mlp/none/truncate": ["model.kind=mlp", "loss.value_norm=none", "env.time_limit=truncate"],
    "mlp/running/terminate": ["model.kind=mlp", "loss.value_norm=running", "env.time_limit=terminate"],
    "mlp/running/truncate": ["model.kind=mlp", "loss.value_norm=running", "env.time_limit=truncate"],
    "gru/running/truncate": ["model.kind=gru", "loss.value_norm=running", "env.time_limit=truncate"],
    "mlp/popart/truncate": ["model.kind=mlp", "loss.value_norm=popart", "env.time_limit=truncate"],
    "global critic": ["model.critic=global"],
}
# --factorial: the grid, every combination of these (8 variants, named "gru/running/truncate")
FACTORS: dict[str, list[str]] = {
    "model.kind": ["mlp", "gru"],
    "loss.value_norm": ["none", "running"],
    "env.time_limit": ["truncate", "terminate"],
}
BENCHMARL_CONFIG = "ours on BenchMARL's config"  # with --benchmarl, on the VMAS tasks
BENCHMARL = "BenchMARL MAPPO"


@dataclass(frozen=True)
class Task:
    name: str
    config: str  # under configs/
    benchmarl: bool  # BenchMARL has it (VMAS): --benchmarl runs it there
    quick: tuple[str, ...]  # --quick: tiny sizes
    # seconds per 1 000 frames with one torch thread on this project's 2-core machine (shared),
    # start-up and final evaluation apart, measured over 2 iterations; for the time estimate only
    s_per_kframe: float
    # the same for "ours on BenchMARL's config" (45 epochs x 15 minibatches per 6 000 frames), and BenchMARL's own
    benchmarl_config_s_per_kframe: float = 0.0
    benchmarl_s_per_kframe: float = 0.0


TASKS = {
    "navigation": Task(
        "navigation",
        "navigation.yaml",
        True,
        (
            "env.num_envs=10",
            "env.max_steps=20",
            "train.frames_per_batch=200",
            "train.num_epochs=1",
            "train.minibatch_size=100",
            "model.hidden=[32]",
        ),
        s_per_kframe=0.5,
        benchmarl_config_s_per_kframe=2.5,
        benchmarl_s_per_kframe=3.4,
    ),
    "balance": Task(
        "balance",
        "balance.yaml",
        True,
        (
            "env.num_envs=10",
            "env.max_steps=20",
            "train.frames_per_batch=200",
            "train.num_epochs=1",
            "train.minibatch_size=100",
            "model.hidden=[32]",
        ),
        s_per_kframe=0.85,
        benchmarl_config_s_per_kframe=3.5,
        benchmarl_s_per_kframe=2.0,
    ),
    "simple_spread": Task(
        "simple_spread",
        "simple_spread.yaml",
        False,
        (
            "env.num_envs=2",
            "env.max_steps=10",
            "train.frames_per_batch=40",
            "train.num_epochs=1",
            "train.minibatch_size=20",
            "model.hidden=[32]",
        ),
        s_per_kframe=1.5,
    ),
}
QUICK_FRAMES = {"navigation": 400, "balance": 400, "simple_spread": 80}
# with --quick: benchmarl_baseline.py cannot shorten BenchMARL's 100-step episodes, so its quick run is
# 2 batches of one episode per env (its return is that of the episodes ending in the last batch)
QUICK_BENCHMARL = dict(frames_per_batch=1000, epochs=1, minibatch=500, n_envs=10, frames=2000)
FULL_BENCHMARL = dict(frames_per_batch=6000, epochs=45, minibatch=400, n_envs=10)  # BenchMARL's base config
START_S = {"ours": 7.0, BENCHMARL: 9.0}  # a child's start-up, set-up, final checkpoint and evaluation
RECURRENT_COST = 2.0  # a guess (no recurrent model yet when this was written): time relative to the MLP's

# BenchMARL 1.5.2's task/vmas/balance.yaml (read from its venv at run time when it is there)
BALANCE_KWARGS = {"n_agents": 4, "random_package_pos_on_line": True, "package_mass": 5}


@dataclass
class Run:
    task: str
    variant: str
    seed: int
    overrides: list[str]
    run_dir: str
    frames: int = 0
    train_return: float = float("nan")
    eval_return: float = float("nan")
    wall_s: float = 0.0
    rc: int | None = None
    error: str = ""
    reused: bool = False
    command: list[str] = field(default_factory=list)


# -- what runs ------------------------------------------------------------------------------


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "variant"


def _kwargs_override(kwargs: dict) -> str:
    items = ", ".join(f"{k}: {str(v).lower() if isinstance(v, bool) else v}" for k, v in kwargs.items())
    return f"env.kwargs={{{items}}}"


def benchmarl_task_kwargs(task: str) -> dict:
    """BenchMARL's kwargs of a VMAS task (its venv's ``task/vmas/<task>.yaml``, else as of 1.5.2), less max_steps."""
    conf = benchmarl_conf_dir()
    if conf is not None and (conf / "task" / "vmas" / f"{task}.yaml").exists():
        from omegaconf import OmegaConf

        read = OmegaConf.to_container(OmegaConf.load(conf / "task" / "vmas" / f"{task}.yaml"))
        read.pop("defaults", None)
        read.pop("max_steps", None)
        return read
    return dict(NAVIGATION_KWARGS if task == "navigation" else BALANCE_KWARGS)


def benchmarl_config_overrides(task: str, quick: bool) -> list[str]:
    """Our overrides for BenchMARL's base MAPPO config on a VMAS task (vs_benchmarl.py's, on ``task``;
    ``quick``: --quick's tiny sizes instead)."""
    sizes = dict(frames_per_batch=200, epochs=1, minibatch=100, n_envs=10) if quick else FULL_BENCHMARL
    base = navigation_overrides(
        n_envs=sizes["n_envs"],
        frames_per_batch=sizes["frames_per_batch"],
        epochs=sizes["epochs"],
        minibatch=sizes["minibatch"],
        total_frames=1,
    )
    out = []
    for o in base:
        key = o.split("=", 1)[0]
        if key in ("train.total_frames", "train.seed"):  # set per run
            continue
        if key == "env.scenario":
            o = f"env.scenario={task}"
        elif key == "env.kwargs":
            o = _kwargs_override(benchmarl_task_kwargs(task))
        elif key == "env.max_steps" and quick:
            o = "env.max_steps=20"
        elif key == "model.hidden" and quick:
            o = "model.hidden=[32]"
        out.append(o)
    return out


def plan(args) -> tuple[list[Run], list[Run], list[Run]]:
    """Our runs, BenchMARL's, and all in the order they run (seed-major: every variant has a result early)."""
    out = Path(args.out)
    ours, theirs, order = [], [], []
    for seed in range(args.seed, args.seed + args.seeds):
        for tname in args.tasks:
            task = TASKS[tname]
            frames = args.frames or (QUICK_FRAMES[tname] if args.quick else None)
            variants = dict(args.variant_map)
            if args.on_benchmarl_config:  # each variant's options on top of BenchMARL's config
                if not task.benchmarl:
                    continue
                variants = {
                    f"{v} on BenchMARL's config": [*benchmarl_config_overrides(tname, args.quick), *o]
                    for v, o in variants.items()
                }
            if args.benchmarl and task.benchmarl:
                variants[BENCHMARL_CONFIG] = benchmarl_config_overrides(tname, args.quick)
            for vname, vover in variants.items():
                overrides = [*(task.quick if args.quick else ()), *vover]
                if frames:
                    overrides.append(f"train.total_frames={frames}")
                name = f"{tname}-{_slug(vname)}-seed{seed}"
                overrides += [
                    f"train.seed={seed}",
                    f"train.num_threads={args.threads}",
                    "log.progress=false",
                    "log.plot=false",
                    "log.checkpoint_every=0",
                    "log.eval_every=0",
                    f"log.eval_episodes={args.eval_episodes}",
                    "log.loggers=[csv]",
                    f"log.root={out / 'runs'}",
                    f"log.name={name}",
                ]
                ours.append(Run(tname, vname, seed, overrides, str(out / "runs" / name)))
                order.append(ours[-1])
            if args.benchmarl and task.benchmarl:
                theirs.append(Run(tname, BENCHMARL, seed, [], str(out / "benchmarl" / f"{tname}-seed{seed}")))
                order.append(theirs[-1])
    return ours, theirs, order


def frames_of(args, run: Run) -> int:
    from marl_ppo.config import load_config

    if run.variant == BENCHMARL:
        if args.quick:
            return QUICK_BENCHMARL["frames"]
        return args.frames or load_config(ROOT / "configs" / TASKS[run.task].config).train.total_frames
    cfg = load_config(ROOT / "configs" / TASKS[run.task].config, run.overrides)
    return cfg.train.iterations * cfg.train.frames_per_batch


def check_configs(runs: list[Run]) -> None:
    """Loads every run's config (no env): an unknown key or a bad value stops everything here."""
    from marl_ppo.config import ConfigError, load_config

    seen = set()
    for r in runs:
        key = (r.task, r.variant)
        if key in seen:
            continue
        seen.add(key)
        try:
            load_config(ROOT / "configs" / TASKS[r.task].config, r.overrides)
        except ConfigError as err:
            sys.exit(f"models.py: task {r.task!r}, variant {r.variant!r}: {err}")


def estimate_s(args, run: Run, frames: int) -> float:
    task = TASKS[run.task]
    if run.variant == BENCHMARL:
        return START_S[BENCHMARL] + (0 if args.quick else frames / 1000 * task.benchmarl_s_per_kframe)
    if args.quick:
        return START_S["ours"]
    if run.variant == BENCHMARL_CONFIG:
        return START_S["ours"] + frames / 1000 * task.benchmarl_config_s_per_kframe
    recurrent = any(o in ("model.kind=gru", "model.kind=lstm") for o in run.overrides)
    return START_S["ours"] + frames / 1000 * task.s_per_kframe * (RECURRENT_COST if recurrent else 1.0)


# -- running ----------------------------------------------------------------------------------


def child_env(threads: int) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    if threads:
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(threads)
    return env


def _final_returns(run_dir: Path) -> tuple[int, float, float]:
    """frames, final training return and evaluation return (means over the groups) of a finished run."""
    from marl_ppo.run.logger import read_scalars

    summary = json.loads((run_dir / "summary.json").read_text())
    scalars = read_scalars(run_dir)
    train = [
        pts[-1][1]
        for key, pts in scalars.items()
        if key.startswith("collect/") and key.endswith("/episode_reward") and pts
    ]
    evals = [v for k, v in summary.items() if k.startswith("eval/") and k.endswith("/episode_reward")]
    mean = lambda xs: sum(xs) / len(xs) if xs else float("nan")  # noqa: E731
    return int(summary["frames"]), mean(train), mean(evals)


def run_ours(args, run: Run) -> Run:
    config = str(ROOT / "configs" / TASKS[run.task].config)
    return run_train(args, run, [sys.executable, "-m", "marl_ppo.cli", "train", config, *run.overrides])


def run_train(args, run: Run, command: list[str], stamp_name: str = "models_run.json") -> Run:
    """Runs ``command`` (a ``marl-ppo train`` child writing ``run.run_dir``) unless that directory holds a
    finished run of the same command (``args.rerun``: always); its frames and returns into ``run``."""
    run_dir = Path(run.run_dir)
    run.command = command
    stamp = run_dir / stamp_name
    if (
        not args.rerun
        and (run_dir / "summary.json").exists()
        and stamp.exists()
        and json.loads(stamp.read_text()).get("command") == run.command[1:]
    ):
        run.frames, run.train_return, run.eval_return = _final_returns(run_dir)
        run.wall_s, run.rc, run.reused = json.loads(stamp.read_text()).get("wall_s", 0.0), 0, True
        return run
    if run_dir.exists():  # an unfinished or different run of the same name: start it afresh
        import shutil

        shutil.rmtree(run_dir)
    t0 = time.perf_counter()
    proc = subprocess.run(run.command, cwd=ROOT, env=child_env(args.threads), capture_output=True, text=True)
    run.wall_s, run.rc = time.perf_counter() - t0, proc.returncode
    if proc.returncode != 0 or not (run_dir / "summary.json").exists():
        run.error = (proc.stderr.strip().splitlines() or ["(no output)"])[-1][:500]
        return run
    run.frames, run.train_return, run.eval_return = _final_returns(run_dir)
    stamp.write_text(json.dumps({"command": run.command[1:], "wall_s": run.wall_s}))
    return run


def run_benchmarl(args, run: Run, frames: int) -> Run:
    sizes = QUICK_BENCHMARL if args.quick else FULL_BENCHMARL
    run.command = [
        "bash",
        args.benchmarl_script,
        "--task",
        run.task,
        "--frames",
        str(frames),
        "--seed",
        str(run.seed),
        "--frames-per-batch",
        str(sizes["frames_per_batch"]),
        "--epochs",
        str(sizes["epochs"]),
        "--minibatch",
        str(sizes["minibatch"]),
        "--n-envs",
        str(sizes["n_envs"]),
        "--out",
        run.run_dir,
    ]
    Path(run.run_dir).mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    proc = subprocess.run(run.command, cwd=ROOT, env=child_env(args.threads), capture_output=True, text=True)
    run.wall_s, run.rc = time.perf_counter() - t0, proc.returncode
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("benchmarl ")]
    if proc.returncode != 0 or not lines:
        run.error = (proc.stderr.strip().splitlines() or ["(no output)"])[-1][:500]
        return run
    line = dict(kv.split("=", 1) for kv in lines[-1].split()[1:] if "=" in kv)
    run.frames, run.train_return = int(line["frames"]), float(line["final_mean_return"])
    return run


# -- results ----------------------------------------------------------------------------------


def _mean_sd(values: list[float]) -> tuple[float, float]:
    values = [v for v in values if not math.isnan(v)]
    if not values:
        return float("nan"), float("nan")
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else float("nan"))


def _fmt(mean: float, sd: float) -> str:
    if math.isnan(mean):
        return "n/a"
    return f"{mean:.3f}" + (f" ± {sd:.3f}" if not math.isnan(sd) else "")


def table(runs: list[Run]) -> list[dict]:
    rows: dict[tuple[str, str], list[Run]] = {}
    for r in runs:
        rows.setdefault((r.task, r.variant), []).append(r)
    out = []
    for (task, variant), rs in rows.items():
        ok = [r for r in rs if r.rc == 0]
        tm, ts = _mean_sd([r.train_return for r in ok])
        em, es = _mean_sd([r.eval_return for r in ok])
        out.append(
            {
                "task": task,
                "variant": variant,
                "seeds": len(ok),
                "failed": len(rs) - len(ok),
                "frames": max((r.frames for r in ok), default=0),
                "train_mean": tm,
                "train_sd": ts,
                "eval_mean": em,
                "eval_sd": es,
                "wall_s_per_run": statistics.fmean([r.wall_s for r in ok]) if ok else float("nan"),
            }
        )
    return out


def markdown(rows: list[dict]) -> str:
    lines = [
        "| task | variant | seeds | frames | train return (mean ± sd) | eval return (mean ± sd) | s/run |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        seeds = f"{r['seeds']}" + (f" ({r['failed']} failed)" if r["failed"] else "")
        lines.append(
            f"| {r['task']} | {r['variant']} | {seeds} | {r['frames']} "
            f"| {_fmt(r['train_mean'], r['train_sd'])} | {_fmt(r['eval_mean'], r['eval_sd'])} "
            f"| {'n/a' if math.isnan(r['wall_s_per_run']) else format(r['wall_s_per_run'], '.0f')} |"
        )
    return "\n".join(lines)


# -- main -------------------------------------------------------------------------------------


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tasks", default=",".join(TASKS), help=f"comma-separated, of {list(TASKS)}")
    p.add_argument(
        "--variants",
        help=f"comma-separated names of {list(VARIANTS)}, or 'none'; default: all of "
        "them, or none when --variant or --factorial is given",
    )
    p.add_argument(
        "--variant",
        nargs="+",
        action="append",
        default=[],
        metavar=("NAME", "KEY=VALUE"),
        help="one more variant: a name and its overrides (repeatable)",
    )
    p.add_argument(
        "--factorial",
        action="store_true",
        help="also every combination of " + " x ".join(f"{k} {{{', '.join(v)}}}" for k, v in FACTORS.items()),
    )
    p.add_argument("--seeds", type=int, default=3, help="seeds per (task, variant): --seed .. --seed + N - 1")
    p.add_argument("--seed", type=int, default=0, help="the first seed")
    p.add_argument("--frames", type=int, help="frames per run, every task (default: each task config's total_frames)")
    p.add_argument("--eval-episodes", type=int, default=50, help="final deterministic evaluation episodes per run")
    p.add_argument("--threads", type=int, default=1, help="train.num_threads (and OMP/MKL threads) of each run")
    p.add_argument("--quick", action="store_true", help="tiny sizes and frames: a smoke check of the script")
    p.add_argument(
        "--benchmarl",
        action="store_true",
        help="also BenchMARL's MAPPO and 'ours on BenchMARL's config' on the VMAS tasks",
    )
    p.add_argument(
        "--on-benchmarl-config",
        action="store_true",
        help="run each variant on BenchMARL's config (VMAS tasks only) instead of the task's own",
    )
    p.add_argument("--benchmarl-script", default=str(BENCHMARL_SH), help="path of benchmarl_baseline.sh")
    p.add_argument("--out", help="run directories (default: a new temporary folder, kept)")
    p.add_argument("--json", help="results file (default: <out>/models_results.json)")
    p.add_argument("--rerun", action="store_true", help="rerun runs that already finished in --out")
    p.add_argument("--dry-run", action="store_true", help="list the runs and the estimate, run nothing")
    args = p.parse_args(argv)
    args.tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    unknown = [t for t in args.tasks if t not in TASKS]
    if unknown:
        p.error(f"unknown task(s) {unknown}; tasks are {list(TASKS)}")
    if args.variants is None:
        args.variants = "none" if (args.variant or args.factorial) else ",".join(VARIANTS)
    names = [] if args.variants.strip() == "none" else [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in names if v not in VARIANTS]
    if unknown:
        p.error(f"unknown variant(s) {unknown}; variants are {list(VARIANTS)} (or add one with --variant NAME k=v ...)")
    args.variant_map = {v: VARIANTS[v] for v in names}
    if args.factorial:
        import itertools

        for combo in itertools.product(*FACTORS.values()):
            args.variant_map["/".join(combo)] = [f"{k}={v}" for k, v in zip(FACTORS, combo)]
    for name, *overrides in args.variant:
        bad = [o for o in overrides if "=" not in o]
        if bad or "=" in name:
            p.error(f"--variant takes a name, then key=value overrides; got {[name, *overrides]}")
        args.variant_map[name] = overrides
    if not args.variant_map and not args.benchmarl:
        p.error("no variants to run (--variants none and no --variant)")
    if args.seeds < 1:
        p.error("--seeds must be >= 1")
    args.out = args.out or tempfile.mkdtemp(prefix="models-bench-")
    args.json = args.json or str(Path(args.out) / "models_results.json")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    ours, theirs, order = plan(args)
    check_configs(ours)
    if theirs and not Path(args.benchmarl_script).exists():
        sys.exit(f"models.py: no BenchMARL script at {args.benchmarl_script} (pass --benchmarl-script)")
    frames = {id(r): frames_of(args, r) for r in ours + theirs}
    est = {id(r): estimate_s(args, r, frames[id(r)]) for r in ours + theirs}
    total = sum(est.values())
    bm = f" (+ {BENCHMARL_CONFIG!r} and {BENCHMARL} on the VMAS tasks)" if theirs else ""
    print(
        f"models.py: {len(ours)} runs of ours + {len(theirs)} of BenchMARL = {len(ours) + len(theirs)} runs: "
        f"{len(args.tasks)} task(s) x {len(args.variant_map)} variant(s){bm} x {args.seeds} seed(s), "
        f"one at a time, {args.threads} thread(s) each"
    )
    for tname in args.tasks:
        f = sorted({frames[id(r)] for r in ours + theirs if r.task == tname})
        print(f"  {tname}: {TASKS[tname].config}, frames per run {f}")
    for name, over in args.variant_map.items():
        print(f"  variant {name!r}: {' '.join(over) or '(the task config as it is)'}")
    if theirs:
        print(
            f"  variant {BENCHMARL_CONFIG!r} (VMAS tasks): "
            + " ".join(benchmarl_config_overrides(theirs[0].task, args.quick))
        )
        print(
            f"  {BENCHMARL}: {args.benchmarl_script} (venv "
            f"{'found' if benchmarl_conf_dir() else 'not found: the first run installs it, minutes'})"
        )
    print(
        f"estimated time: {_duration(total)} on a 2-core machine with 1 thread per run (rough: from 2-iteration "
        f"timings of each task on a shared machine; recurrent variants guessed at {RECURRENT_COST:g}x the MLP)"
    )
    print(f"run directories: {args.out}; results: {args.json}", flush=True)
    if args.dry_run:
        for r in order:
            print(f"  {r.task:<14} {r.variant:<28} seed {r.seed}  ~{est[id(r)]:.0f}s  {r.run_dir}")
        return 0
    done: list[Run] = []
    t_start, spent_est = time.perf_counter(), 0.0
    for i, r in enumerate(order, 1):
        r = run_benchmarl(args, r, frames[id(r)]) if r.variant == BENCHMARL else run_ours(args, r)
        done.append(r)
        spent_est += est[id(r)]
        elapsed = time.perf_counter() - t_start
        left = (total - spent_est) * (elapsed / spent_est if spent_est and not r.reused else 1.0)
        status = ("reused" if r.reused else f"{r.wall_s:.0f}s") if r.rc == 0 else f"FAILED rc={r.rc}: {r.error}"
        print(
            f"[{i}/{len(order)}] {r.task} / {r.variant} / seed {r.seed}: train {r.train_return:.3f} "
            f"eval {r.eval_return:.3f} ({status}); about {_duration(left)} left",
            flush=True,
        )
        _write(args, done)
    rows = _write(args, done)
    print()
    print(markdown(rows))
    print(f"\nresults: {args.json}")
    return 1 if any(r.rc != 0 for r in done) else 0


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" + (f" ({seconds / 3600:.1f} h)" if seconds >= 3600 else "")


def _no_nan(obj):
    """``obj`` with NaN as ``null`` (strict JSON)."""
    if isinstance(obj, float) and math.isnan(obj):
        return None
    if isinstance(obj, dict):
        return {k: _no_nan(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_no_nan(v) for v in obj]
    return obj


def _write(args, runs: list[Run]) -> list[dict]:
    rows = table(runs)
    meta = {k: v for k, v in vars(args).items() if k != "variant"}
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    doc = {"args": meta, "table": rows, "runs": [asdict(r) for r in runs]}
    Path(args.json).write_text(json.dumps(_no_nan(doc), indent=2, default=str))
    return rows


if __name__ == "__main__":
    sys.exit(main())
