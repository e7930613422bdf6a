"""The suite's command line: ``python -m marl_ppo.suite`` and ``marl-ppo suite``."""
from __future__ import annotations

import argparse
import sys
import warnings
from typing import Sequence

from marl_ppo.suite.runner import run_suite
from marl_ppo.suite.spec import Suite, SuiteError, plan


def build_parser(prog: str = "python -m marl_ppo.suite") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description="Run a benchmark suite (tasks x seeds) and write "
                                "marl-eval JSON results and an aggregate plot.")
    p.add_argument("suite", help="suite YAML file (see configs/suites/)")
    p.add_argument("--workers", type=int, help="processes at once (default: the suite's; 1: sequential, in-process)")
    p.add_argument("--out", help="output folder (default: the suite's 'out')")
    p.add_argument("--override", nargs="+", action="extend", default=[], metavar="KEY=VALUE",
                   help="config overrides for every run, applied last (e.g. train.total_frames=6000)")
    p.add_argument("--rerun", action="store_true", help="run again runs that finished before")
    p.add_argument("--ci", choices=("t", "bootstrap"), default="t", help="confidence band of the plot")
    p.add_argument("--no-plot", action="store_true", help="skip the aggregate plot")
    p.add_argument("--dry-run", action="store_true", help="list the runs and exit")
    return p


def main(argv: Sequence[str] | None = None, prog: str = "python -m marl_ppo.suite") -> int:
    """Command line: 0 when every run succeeded, 1 when some failed, 2 for a bad suite or arguments."""
    warnings.filterwarnings("ignore", message="PettingZoo in TorchRL is tested")
    args = build_parser(prog).parse_args(argv)
    try:
        suite = Suite.load(args.suite)
        if args.workers is not None:
            suite = suite.replace(workers=args.workers)
        if args.dry_run:
            for job in plan(suite, out=args.out, overrides=args.override):
                print(f"{job.label:<48} {job.run_dir}")
            return 0
        result = run_suite(suite, out=args.out, overrides=args.override, rerun=args.rerun,
                           plot=not args.no_plot, ci=args.ci)
    except SuiteError as err:
        print(f"{prog}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted; finished runs keep their directories (run again to continue)", file=sys.stderr)
        return 130
    print(result.table())
    if result.json_path:
        print(f"marl-eval JSON: {result.json_path}")
    if result.plot_path:
        print(f"plot: {result.plot_path}")
    if result.failed:
        print(f"{len(result.failed)} of {len(result.runs)} runs failed (see their error.txt)", file=sys.stderr)
        return 1
    return 0

