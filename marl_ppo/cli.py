"""The ``marl-ppo`` command line.

::

    marl-ppo train [CONFIG.yaml] [key=value ...]      # default: MAPPO on VMAS navigation
    marl-ppo train --resume RUN_DIR [key=value ...]   # continue a run from its last checkpoint
    marl-ppo train -m [CONFIG.yaml] key=a,b k2=c,d    # a grid of runs (hydra's multirun habit)
    marl-ppo eval RUN_DIR [--episodes N] [--video F]  # deterministic returns per group (VMAS, PettingZoo: GIF)
    marl-ppo eval RUN_DIR --partner OTHER [--seat G]  # beside another run's policy: the team return
    marl-ppo crossplay RUN RUN ... [--out DIR]        # every pair of runs: self-play vs cross-play matrix
    marl-ppo plot RUN_DIR [RUN_DIR ...] [--out DIR]   # learning curves (PNG)
    marl-ppo export RUN_DIR [--format onnx ...]       # each trained group's policy as a file, checked
    marl-ppo suite SUITE.yaml [--launcher ray]        # tasks x sweep x seeds, marl-eval JSON and a plot
    marl-ppo suite merge OUT1 OUT2 --out MERGED       # suites run apart, merged
    marl-ppo list [configs|suites|tune|scenarios|pettingzoo]  # what is shipped and what can be trained here
    marl-ppo train CONFIG --print-config | --dry-run  # the resolved config; the env, groups and networks
    marl-ppo tune TUNE.yaml [key=value ...] [--resume]   # a search on Ray Tune (random/optuna, asha/pbt)
    marl-ppo --version                                # also: python -m marl_ppo ...
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import warnings
from pathlib import Path

__all__ = ["main", "build_parser"]


def _train(args: argparse.Namespace) -> int:
    from marl_ppo.config import load_config  # light: a bad config is refused before torch is loaded

    words = [w for w in (args.config, *args.overrides) if w is not None]
    files = [w for w in words if "=" not in w]  # the config may come anywhere among the overrides
    if len(files) > 1:
        raise ValueError(f"one config file or shipped config name at most, got {files}; overrides are key=value")
    config = files[0] if files else None
    overrides = [w for w in words if "=" in w]
    if args.multirun:
        if args.resume:
            raise ValueError("-m and --resume do not go together: rerun the same -m command to continue a grid")
        from marl_ppo.suite.cli import multirun

        return multirun(config, overrides, out=args.out, workers=args.workers, launcher=args.launcher)
    if args.print_config or args.dry_run:
        return _inspect(args, config, overrides)
    if args.resume:
        run_dir = Path(args.resume)
        if not (run_dir / "config.yaml").exists():
            raise FileNotFoundError(f"cannot resume: {run_dir} has no config.yaml")
        if (run_dir / "seeds_group.json").exists():  # one seed of a train.seeds group: the whole group goes on
            from marl_ppo.run.ranks import launch
            from marl_ppo.run.seeds import group_run_dirs
            from marl_ppo.run.trainer import Trainer

            dirs = group_run_dirs(run_dir)
            missing = [str(d) for d in dirs if not (d / "config.yaml").exists()]
            if missing and not args.skip_missing_seeds:
                raise FileNotFoundError(
                    f"cannot resume the seed group of {run_dir}: {missing} holds no run (no config.yaml); resume the "
                    f"other seeds as a group with: marl-ppo train --resume {run_dir} --skip-missing-seeds"
                )
            dirs = [d for d in dirs if (d / "config.yaml").exists()]
            configs = [load_config(d / "config.yaml", overrides) for d in dirs]
            if (code := launch(configs[0], args.argv)) is not None:  # train.ranks: its processes do the rest
                return code
            trainer = Trainer(configs[0], configs=configs, run_dirs=dirs, resume=True)
        else:
            cfg = load_config(run_dir / "config.yaml", overrides)
            from marl_ppo.run.ranks import launch
            from marl_ppo.run.trainer import Trainer

            if (code := launch(cfg, args.argv)) is not None:
                return code
            trainer = Trainer(cfg, run_dir=run_dir, resume=True)
    else:
        cfg = load_config(config, overrides)  # what train.seeds cannot run is refused here
        from marl_ppo.run.ranks import launch
        from marl_ppo.run.trainer import Trainer

        if (code := launch(cfg, args.argv)) is not None:  # train.ranks: N processes through torch's launcher
            return code
        trainer = Trainer(cfg)
    for run_dir in trainer.run_dirs:
        print(f"run directory: {run_dir}")
    if trainer.cfg.train.total_frames % (trainer.cfg.train.frames_per_batch * trainer.cfg.train.ranks):
        from marl_ppo.config import rounded_budget

        print(f"marl-ppo train: {rounded_budget(trainer.cfg.train)}", file=sys.stderr)
    print(trainer.parts.reward_table)
    summary = trainer.fit()
    if trainer.group_dir is not None:  # train.seeds: the group's result across its seeds
        from marl_ppo.run.group_result import group_lines

        print("\n".join(group_lines(trainer.group_summary, trainer.group_dir)))
    print(json.dumps(summary, indent=2))  # last on stdout, so that scripts can parse it
    return 0


def _inspect(args: argparse.Namespace, config: str | None, overrides: list[str]) -> int:
    """``--print-config``: the resolved, checked config as YAML (a file ``train`` reads back to the same
    config). ``--dry-run``: also builds the env, groups, reward table and networks; prints the table and,
    per group, its parameter counts, observation entries and networks (:mod:`marl_ppo.run.dry_run`).
    Neither trains nor writes anything."""
    from marl_ppo.config import load_config, to_yaml

    source = Path(args.resume) / "config.yaml" if args.resume else config
    cfg = load_config(source, overrides)  # every check train runs before it builds anything
    if args.print_config:
        print(to_yaml(cfg), end="")
        return 0
    from marl_ppo.run.dry_run import dry_run

    return dry_run(cfg)


def _list(args: argparse.Namespace) -> int:
    from marl_ppo.config_files import CONFIGS, shipped_configs, shipped_suites, shipped_tunes

    def header(path: Path) -> str:  # the first sentence of a shipped file's opening comment says what it is
        lines = []
        for line in path.read_text().splitlines():
            if not line.startswith("#"):
                break
            lines.append(line.lstrip("# ").strip())
        text = " ".join(lines)
        return text[: text.index(". ") + 1] if ". " in text else text

    what = args.what
    if what in ("all", "configs"):
        print("configs (marl-ppo train NAME):")
        for name in shipped_configs():
            print(f"  {name:<20} {header(CONFIGS / f'{name}.yaml')}")
    if what in ("all", "suites"):
        print("suites (marl-ppo suite NAME):")
        for name in shipped_suites():
            print(f"  {name:<20} {header(CONFIGS / 'suites' / f'{name}.yaml')}")
    if what in ("all", "tune"):
        print("searches (marl-ppo tune NAME):")
        for name in shipped_tunes():
            print(f"  {name:<20} {header(CONFIGS / 'tune' / f'{name}.yaml')}")
    if what in ("all", "scenarios"):
        from marl_ppo.envs.vmas import vmas_scenarios

        print("VMAS scenarios (env.kind=vmas env.scenario=NAME):")
        print("  " + " ".join(vmas_scenarios()))
    if what in ("all", "pettingzoo"):
        from marl_ppo.envs.catalog import pettingzoo_envs
        from marl_ppo.envs.pettingzoo import mpe_tasks

        print("PettingZoo MPE tasks, from mpe2 (env.kind=pettingzoo env.scenario=NAME):")
        print("  " + " ".join(mpe_tasks()))
        print("PettingZoo envs by registry id (env.kind=pettingzoo env.scenario=ID):")
        for env in pettingzoo_envs():
            status = "" if env.missing is None else f"needs {env.missing!r}: {env.install}"
            print(f"  {env.env_id:<36} {status}")
    return 0


def _tune(args: argparse.Namespace) -> int:
    from marl_ppo.suite.spec import SuiteError
    from marl_ppo.suite.tune_runner import run_tune
    from marl_ppo.suite.tune_spec import TuneSpec

    try:
        spec = TuneSpec.load(args.tune, tuple(args.overrides))
        if args.out:
            spec = dataclasses.replace(spec, out=args.out)
        if args.max_concurrent:
            spec = dataclasses.replace(spec, max_concurrent=args.max_concurrent)
        result = run_tune(spec, resume=args.resume, address=args.ray_address)
    except SuiteError as err:
        print(f"marl-ppo tune: error: {err}", file=sys.stderr)
        return 2
    if result.interrupted:
        print(
            f"marl-ppo tune: interrupted before every trial ended; continue the search with: marl-ppo tune "
            f"{args.tune} --out {result.out} --resume (no best.yaml until it ends)",
            file=sys.stderr,
        )
        return 130
    return 0 if result.best is not None else 1


def _eval(args: argparse.Namespace) -> int:
    if args.partner:  # marl_ppo/run/crossplay_cli.py
        from marl_ppo.run.crossplay_cli import partner_eval

        return partner_eval(args)
    from marl_ppo.run.build import load_policy
    from marl_ppo.run.evaluation import Evaluator

    cfg, parts = load_policy(args.run_dir, args.checkpoint, device=args.device)
    from marl_ppo.run.video import eval_recorder

    recorder = eval_recorder(args.video, cfg.env)
    if args.opponent:
        if args.seat and len(args.seat) > 1:
            raise ValueError(f"--opponent plays the run in one seat (or all), got --seat {' '.join(args.seat)}")
        return _matches(args, cfg, parts, recorder)
    if args.sample and parts.pools:
        raise ValueError(f"--sample: the pool seats {sorted(parts.pools)} would play their snapshots")
    # the run's own evaluation: the same envs and seed rule as training's (the same figure for the same N)
    evaluator = Evaluator(
        cfg, parts.policy, list(parts.groups), episodes=args.episodes, max_steps=args.max_steps, video=bool(args.video)
    )
    first = "sampled" if args.sample or not cfg.log.eval_deterministic else "greedy"
    try:  # the other mode beside it (a pool seat only plays greedy)
        modes = evaluator.both_modes(callback=recorder, sample=not parts.pools, first=first)
    finally:  # worker processes (env.parallel=true) end here, not at interpreter exit
        evaluator.close()
        if not parts.env.is_closed:
            parts.env.close()
    if (out := modes[first]).episodes == 0:
        print(f"marl-ppo eval: {out.no_episode_message()}", file=sys.stderr)
        return 1
    result = {"run_dir": str(args.run_dir), "checkpoint": args.checkpoint, "episodes": out.episodes}
    result |= {"episode_reward": out.returns} | {f"episode_reward_{m}": r.returns for m, r in modes.items()}
    if recorder is not None:
        result["video"] = str(recorder.save(args.video))
    print(json.dumps(result, indent=2))
    return 0


def _matches(args: argparse.Namespace, cfg, parts, recorder=None) -> int:
    """``marl-ppo eval RUN --opponent SOURCE``: win/draw/loss per seat, one line each, and JSON; ``--video``:
    the first match's first episode."""
    from marl_ppo.run.evaluation import Evaluator
    from marl_ppo.run.matches import Matches

    video = recorder is not None
    evaluator = Evaluator(
        cfg, parts.policy, list(parts.groups), episodes=args.episodes, max_steps=args.max_steps, video=video
    )
    try:
        seat = args.seat[0] if args.seat else None
        matches = Matches(cfg, parts, args.opponent, evaluator, seat=seat, sample=args.sample, callback=recorder)
        played = matches()
    finally:
        evaluator.close()
        parts.env.close()
    out, failed = [], False
    for (source, seat), (result, counts) in played.items():
        if counts is None:
            print(f"marl-ppo eval: against {source} in seat {seat}: {result.no_episode_message()}", file=sys.stderr)
            failed = True
            continue
        print(f"against {source}: {counts.line()}", file=sys.stderr)
        rates = {"win_rate": counts.win_rate, "draw_rate": counts.draw_rate, "loss_rate": counts.loss_rate}
        rates |= {f"{name}_ci95": list(bounds) for name, bounds in counts.intervals().items()}
        out.append({"opponent": source, **dataclasses.asdict(counts), **rates})
    result = {"run_dir": str(args.run_dir), "checkpoint": args.checkpoint, "matches": out}
    if recorder is not None and recorder.frames:
        source, seat = next(iter(played))
        result["video"] = {"file": str(recorder.save(args.video)), "opponent": source, "seat": seat}
    print(json.dumps(result, indent=2))
    return 1 if failed else 0


def _plot(args: argparse.Namespace) -> int:
    from marl_ppo.run.plots import comparison_folder, plot_runs

    out = Path(args.out) if args.out else comparison_folder(args.run_dirs)
    for path in plot_runs(args.run_dirs, out, metrics=args.metric, separate=args.separate):
        print(path)
    return 0


def _positive_int(text: str) -> int:
    """An argparse type: an integer >= 1 (argparse then names the option in its one-line error)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The ``marl-ppo`` argument parser (also rendered into the docs' CLI reference)."""
    from marl_ppo import __version__
    from marl_ppo.export.command import add_export_parser
    from marl_ppo.run.crossplay_cli import SEAT_HELP, add_crossplay_parser, add_partner_arguments

    parser = argparse.ArgumentParser(prog="marl-ppo", description="Multi-agent PPO on VMAS and PettingZoo.")
    parser.add_argument("--version", action="version", version=f"marl-ppo {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    parser.commands = sub.choices  # type: ignore[attr-defined]  # each command's parser, by name (_parse)
    p = sub.add_parser("train", help="train from a YAML config (default: VMAS navigation)")
    p.add_argument("config", nargs="?", help="a YAML config file, or a shipped config by name (marl-ppo list configs)")
    p.add_argument("overrides", nargs="*", help="key=value overrides, e.g. train.total_frames=120000")
    p.add_argument("--resume", metavar="RUN_DIR", help="continue the run in RUN_DIR from its last checkpoint")
    p.add_argument(
        "--skip-missing-seeds",
        action="store_true",
        help="--resume of a train.seeds group: go on with the seeds whose directories are there",
    )
    p.add_argument(
        "-m",
        "--multirun",
        action="store_true",
        help="sweep: every key=a,b takes each value in turn (a grid; train.seed=0,1 gives the seeds); "
        "results as a suite's (marl-eval JSON and a plot)",
    )
    p.add_argument("--out", help="-m: output folder (default: <log.root>/multirun/<date_time>)")
    p.add_argument("--workers", type=int, default=1, help="-m: worker processes at once (local launcher)")
    p.add_argument("--launcher", choices=("local", "ray", "slurm"), default="local", help="-m: where the runs go")
    p.add_argument(
        "--print-config", action="store_true", help="print the resolved, checked config as YAML; train nothing"
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="build the env, groups, reward table and networks; print the table and, per group, its parameter "
        "counts, observation entries (shapes, dtypes) and each network's trunks with their widths; write nothing",
    )
    p.set_defaults(func=_train)
    p = sub.add_parser("eval", help="evaluate a run's checkpoint with deterministic actions")
    p.add_argument("run_dir", help="a run directory written by marl-ppo train")
    p.add_argument(
        "--episodes",
        type=_positive_int,
        default=10,
        help="episodes to run and average, exactly (VMAS: one vectorized batch; PettingZoo: shared out "
        "between at most env.num_envs copies)",
    )
    p.add_argument(
        "--max-steps",
        type=_positive_int,
        metavar="N",
        help="env.max_steps for the evaluation: episodes of at most N steps (VMAS, MPE) and the rollout's "
        "length (classic games); default: the run's",
    )
    p.add_argument("--checkpoint", default="last.pt", help="checkpoint file in RUN_DIR/checkpoints")
    p.add_argument(
        "--video",
        metavar="FILE.gif",
        help="VMAS, PettingZoo: save the first episode as an animated GIF (with --opponent: the first match's)",
    )
    p.add_argument("--device", help="run on this device instead of the run's (e.g. cpu for a cuda run)")
    p.add_argument(
        "--opponent",
        action="append",
        metavar="SOURCE",
        help="play the trained policy against SOURCE (random, pool: the run's snapshots, checkpoint:RUN_DIR[:GROUP], "
        "module:callable) in each seat: win/draw/loss rates per seat, --episodes per seat; may be repeated",
    )
    p.add_argument(
        "--seat",
        action="append",
        help="with --opponent: the group the trained policy plays (default, or all: every seat it can); " + SEAT_HELP,
    )
    add_partner_arguments(p)
    p.add_argument(
        "--sample",
        action="store_true",
        help="the policies sample their actions (with --opponent: deterministic players would replay one game)",
    )
    p.set_defaults(func=_eval)
    p = sub.add_parser("plot", help="plot learning curves of one or several runs")
    p.add_argument("run_dirs", nargs="+", help="run directories; several go on one figure")
    p.add_argument("--out", help="output folder (default: RUN_DIR/plots; several runs: a folder of their own beside)")
    p.add_argument(
        "--metric",
        action="append",
        metavar="NAME",
        help="also plot this logged metric into metrics.png (repeatable; glob patterns such as "
        "'train/*/move/entropy' match several)",
    )
    p.add_argument(
        "--separate",
        action="store_true",
        help="one line per run (default: runs of one config that differ only in the seed are one line, "
        "their mean, in a band: the 95%% interval of the mean, Student's t below 10 seeds)",
    )
    p.set_defaults(func=_plot)
    add_export_parser(sub)  # marl_ppo/export/command.py: its options and handler
    add_crossplay_parser(sub, _positive_int)  # marl_ppo/run/crossplay_cli.py
    p = sub.add_parser("list", help="list the shipped configs and suites, VMAS scenarios and PettingZoo envs")
    p.add_argument(
        "what", nargs="?", default="all", choices=("all", "configs", "suites", "tune", "scenarios", "pettingzoo")
    )
    p.set_defaults(func=_list)
    p = sub.add_parser("tune", help="search config keys on Ray Tune (random/optuna; fifo/asha/pbt)")
    p.add_argument("tune", help="a tune YAML file, or a shipped one by name (marl_ppo/configs/tune/)")
    p.add_argument("overrides", nargs="*", help="key=value overrides for every trial, after the file's")
    p.add_argument("--out", help="output folder (default: the file's out:)")
    p.add_argument("--resume", action="store_true", help="continue the interrupted experiment in the output folder")
    p.add_argument(
        "--max-concurrent",
        type=_positive_int,
        metavar="N",
        help="at most N trials at once (a shared machine; default: as many as the CPUs allow, resources.cpus each)",
    )
    p.add_argument("--ray-address", help="a running Ray cluster (default: RAY_ADDRESS, else a local one)")
    p.set_defaults(func=_tune)
    # listed for --help; main() hands `marl-ppo suite ...` to marl_ppo.suite's own parser
    sub.add_parser(
        "suite", help="run a benchmark suite (tasks x seeds), write marl-eval JSON and a plot", add_help=False
    )
    return parser


def _parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """The command's arguments, its ``key=value`` overrides taken anywhere on the line (``train balance
    --dry-run train.lr=1e-3``): argparse's intermixed parsing, which does not parse subcommands, runs on
    the command's own parser; the top level (``--help``, ``--version``, an unknown command) as usual."""
    command = argv[0] if argv else None
    if command not in parser.commands:
        return parser.parse_args(argv)
    args = parser.commands[command].parse_intermixed_args(argv[1:])
    args.command = command
    return args


def main(argv: list[str] | None = None) -> int:
    warnings.filterwarnings("ignore", message="PettingZoo in TorchRL is tested")
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["suite"]:  # the suite has its own parser (options before the file included)
        from marl_ppo.suite import main as suite_main

        return suite_main(argv[1:], prog="marl-ppo suite")
    parser = build_parser()
    args = _parse(parser, argv)
    args.argv = argv  # what train.ranks starts its processes with
    from marl_ppo.run.signals import RunInterrupted  # light: no torch

    try:
        return args.func(args)
    except RunInterrupted as err:  # checkpoint written, logs closed, error.txt says why
        print(f"marl-ppo {args.command}: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print("interrupted; the run directory keeps its last checkpoint and logs", file=sys.stderr)
        return 130
    except Exception as err:  # one clear line for the user; the run dir keeps error.txt with the traceback
        if not (type(err).__name__ == "ConfigError" and os.environ.get("RANK", "0") != "0"):  # said by rank 0
            print(f"marl-ppo {args.command}: error: {type(err).__name__}: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
