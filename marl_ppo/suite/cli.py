"""The suite's command line: ``python -m marl_ppo.suite`` and ``marl-ppo suite``.

::

    marl-ppo suite SUITE.yaml [--launcher local|ray|slurm] [--ray-address ADDR] [--workers N] ...
    marl-ppo suite merge OUT1 OUT2 ... --out MERGED
"""

from __future__ import annotations

import argparse
import sys
import warnings
from typing import Sequence

from marl_ppo.suite.results import REBUILD_HINT
from marl_ppo.suite.runner import LAUNCHERS, SuiteResult, run_suite
from marl_ppo.suite.scoring import PROTOCOLS, ScoreSpec, parse_score
from marl_ppo.suite.spec import Suite, SuiteError, plan


def build_parser(prog: str = "python -m marl_ppo.suite") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog,
        description="Run a benchmark suite (tasks x sweep variants x seeds) "
        "and write marl-eval JSON results and an aggregate plot. "
        f"'{prog} merge OUT1 OUT2 --out DIR' merges suites run apart.",
    )
    p.add_argument("suite", help="a suite YAML file, or a shipped suite by name (marl-ppo list suites)")
    p.add_argument(
        "--launcher",
        choices=LAUNCHERS,
        default="local",
        help="local: worker processes here; ray: one Ray task per run; slurm: a submitit job array",
    )
    p.add_argument(
        "--ray-address",
        help="Ray cluster to run on (default: $RAY_ADDRESS, else a local cluster started and stopped by this command)",
    )
    p.add_argument(
        "--workers",
        type=int,
        help="local launcher: processes at once (default: the suite's; 1: sequential, in-process)",
    )
    p.add_argument("--out", help="output folder (default: the suite's 'out'; shared storage on a cluster)")
    p.add_argument(
        "--override",
        nargs="+",
        action="extend",
        default=[],
        metavar="KEY=VALUE",
        help="config overrides for every run, applied last (e.g. train.total_frames=6000)",
    )
    p.add_argument("--rerun", action="store_true", help="run again runs that finished before")
    p.add_argument(
        "--ci",
        choices=("auto", "bootstrap", "t"),
        default="auto",
        help="95%% interval of the plot's bands and the report's per-task table (the same); auto: Student's t "
        "below 10 seeds (a percentile bootstrap of 3 seeds is their range), the bootstrap from 10",
    )
    p.add_argument("--no-plot", action="store_true", help="skip the aggregate plot")
    p.add_argument("--dry-run", action="store_true", help="list the runs and exit")
    return p


def build_merge_parser(prog: str = "python -m marl_ppo.suite merge") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog,
        description="Merge suites run on different machines into one marl-eval JSON, plot and report "
        "(refuses runs present twice and mismatched tasks/variants); from one suite output, rebuild its results.",
    )
    p.add_argument("sources", nargs="+", help="suite output folders (or their marl_eval.json files)")
    p.add_argument("--out", required=True, help="folder for the merged marl_eval.json, returns.png and report")
    p.add_argument(
        "--ci", choices=("auto", "bootstrap", "t"), help="95%% interval of the plot and report (default: the parts')"
    )
    p.add_argument("--protocol", choices=PROTOCOLS, help="how the report normalises scores (default: the parts')")
    p.add_argument(
        "--score",
        action="append",
        default=[],
        metavar="ENV/TASK=SCORE",
        help="what a task is scored on: a group, groups joined by ',' (summed), or a metric such as "
        "vs_random/red/win_rate (e.g. vmas/simple_tag=adversary)",
    )
    p.add_argument("--no-plot", action="store_true", help="skip the aggregate plot")
    p.add_argument(
        "--force", action="store_true", help="replace the results --out already holds (another suite's, or merge's)"
    )
    return p


def parse_scores(items: Sequence[str]) -> dict[str, ScoreSpec]:
    """``ENV/TASK=SCORE`` arguments as ``{"ENV/TASK": score}``.

    >>> parse_scores(["vmas/simple_tag=adversary", "pettingzoo/battle=vs_random/red/win_rate"])
    {'vmas/simple_tag': ('adversary',), 'pettingzoo/battle': ('vs_random/red/win_rate',)}
    """
    out = {}
    for item in items:
        task, eq, spec = item.partition("=")
        if not eq or task.count("/") != 1 or not spec:
            raise SuiteError(f"--score takes ENV/TASK=SCORE (e.g. vmas/simple_tag=adversary), got {item!r}")
        try:
            out[task] = parse_score(spec.split(",") if "/" not in spec else spec, f"--score {task}")
        except ValueError as err:
            raise SuiteError(str(err)) from None
    return out


def _merge(argv: Sequence[str], prog: str) -> int:
    from marl_ppo.suite.merge import merge_suites

    args = build_merge_parser(prog + " merge").parse_args(argv)
    try:
        written = merge_suites(
            args.sources,
            args.out,
            plot=not args.no_plot,
            ci=args.ci,
            protocol=args.protocol,
            scores=parse_scores(args.score),
            force=args.force,
        )
    except SuiteError as err:
        print(f"{prog} merge: error: {err}", file=sys.stderr)
        return 2
    print(f"marl-eval JSON: {written.json_path}")
    if written.plot_path:
        print(f"plot: {written.plot_path}")
    if written.report_path:
        print(f"report: {written.report_path}")
    for what, why in written.errors.items():
        print(f"not written: {what}: {why}", file=sys.stderr)
    return 1 if written.errors else 0


def report(result: SuiteResult) -> int:
    """Prints the result table and files; 0 when every run succeeded and every result was written, else 1."""
    print(result.table())
    if result.json_path:
        print(f"marl-eval JSON: {result.json_path}")
    if result.plot_path:
        print(f"plot: {result.plot_path}")
    if result.report_path:
        print(f"report: {result.report_path}")
    for what, why in result.errors.items():
        print(f"not written: {what}: {why}; {REBUILD_HINT.format(out=result.out)}", file=sys.stderr)
    if result.failed:
        print(f"{len(result.failed)} of {len(result.runs)} runs failed (see their error.txt)", file=sys.stderr)
        return 1
    return 1 if result.errors else 0


def main(argv: Sequence[str] | None = None, prog: str = "python -m marl_ppo.suite") -> int:
    """Command line: 0 when every run succeeded, 1 when some failed, 2 for a bad suite or arguments."""
    warnings.filterwarnings("ignore", message="PettingZoo in TorchRL is tested")
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["merge"]:
        return _merge(argv[1:], prog)
    args = build_parser(prog).parse_args(argv)
    try:
        suite = Suite.load(args.suite)
        if args.workers is not None:
            suite = suite.replace(workers=args.workers)
        if args.dry_run:
            for job in plan(suite, out=args.out, overrides=args.override, remote=args.launcher != "local"):
                print(f"{job.label:<48} {job.run_dir}")
            return 0
        result = run_suite(
            suite,
            out=args.out,
            overrides=args.override,
            rerun=args.rerun,
            plot=not args.no_plot,
            ci=args.ci,
            launcher=args.launcher,
            ray_address=args.ray_address,
        )
    except SuiteError as err:
        print(f"{prog}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted; finished runs keep their directories (run again to continue)", file=sys.stderr)
        return 130
    return report(result)


def multirun_suite(config: str | None, overrides: Sequence[str], *, out: str | None = None, workers: int = 1) -> Suite:
    """``marl-ppo train -m CONFIG key=a,b ...`` as a one-task suite: ``key=a,b`` is swept
    (``train.seed=0,1,2`` gives the seeds), other overrides apply to every run.

    >>> s = multirun_suite(None, ["train.lr=1e-3,3e-4", "train.seed=0,1", "env.num_envs=8"], out="/tmp/m")
    >>> s.sweep, s.seeds, s.tasks[0].overrides
    ((('train.lr', ('1e-3', '3e-4')),), (0, 1), ('env.num_envs=8',))
    """
    import time
    from pathlib import Path

    from marl_ppo.config import ConfigError, load_config
    from marl_ppo.suite.spec import TaskSpec
    from marl_ppo.suite.sweep import SweepError, parse_sweep, split_multirun

    try:
        grid, fixed = split_multirun(overrides)
        seeds = grid.pop("train.seed", None)
        cfg = load_config(config, fixed)
        seeds = tuple(int(s) for s in seeds) if seeds else (cfg.train.seed,)
        sweep = parse_sweep(grid, "-m")
    except (ConfigError, SweepError, ValueError) as err:
        raise SuiteError(str(err)) from None
    if out is None:
        out = str(Path(cfg.log.root) / "multirun" / time.strftime("%Y-%m-%d_%H-%M-%S"))
    task = TaskSpec(config=str(Path(config).resolve()) if config else None, overrides=tuple(fixed))
    return Suite(tasks=(task,), seeds=seeds, sweep=sweep, workers=workers, out=out, name="multirun")


def multirun(
    config: str | None,
    overrides: Sequence[str],
    *,
    out: str | None = None,
    workers: int = 1,
    launcher: str = "local",
    ray_address: str | None = None,
) -> int:
    """Runs :func:`multirun_suite`; prints the result table (exit code as :func:`main`'s)."""
    try:
        suite = multirun_suite(config, overrides, out=out, workers=workers)
        result = run_suite(suite, launcher=launcher, ray_address=ray_address)  # type: ignore[arg-type]
    except SuiteError as err:
        print(f"marl-ppo train -m: error: {err}", file=sys.stderr)
        return 2
    return report(result)
