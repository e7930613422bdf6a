"""``marl-ppo eval RUN --partner OTHER`` and ``marl-ppo crossplay RUN...``: their options and handlers (no torch
until they run; :mod:`marl_ppo.run.crossplay` plays the pairs)."""

from __future__ import annotations

import argparse
import glob
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from marl_ppo.options import ConfigError

__all__ = ["add_partner_arguments", "add_crossplay_parser", "partner_eval", "run_directories"]

TEAM_HELP = (
    "the team return of an episode: the mean of the agents' returns (an env that gives each agent the team's "
    "reward: Hanabi) or their sum (an env that gives each its share: Overcooked's cooks their own deliveries)"
)
SEAT_HELP = (
    "with --partner: a group the run plays (GROUP), or one agent of a group (GROUP:AGENT, by index or name); "
    "repeatable; the partner plays every other agent (default: the env's first group; one group: its agent 0)"
)


def add_partner_arguments(p: argparse.ArgumentParser) -> None:
    """Adds ``--partner`` to ``eval``'s parser."""
    p.add_argument(
        "--partner",
        metavar="OTHER_RUN",
        help="cooperative games: seat OTHER_RUN's policy (its last.pt) beside the run's, in the groups the run does "
        "not play (--seat): the team return per episode and each group's (runs of one env and groups)",
    )
    p.add_argument("--team", choices=("mean", "sum"), default="mean", help="with --partner: " + TEAM_HELP)


def partner_eval(args: argparse.Namespace) -> int:
    """The run in its seats beside ``--partner``'s policy: the team return and each group's, as JSON."""
    if args.opponent:
        raise ValueError("--partner and --opponent do not go together: a partner plays with the run, not against it")
    from marl_ppo.run.crossplay import Partners
    from marl_ppo.run.video import eval_recorder

    partners = Partners(
        [args.run_dir, args.partner],
        episodes=args.episodes,
        seating=args.seat,
        checkpoints=[args.checkpoint, "last.pt"],
        device=args.device,
        max_steps=args.max_steps,
        sample=args.sample,
        video=bool(args.video),
        team=args.team,
    )
    try:
        recorder = eval_recorder(args.video, partners.loaded[0][0].env)
        cell = partners.cell(0, 1, callback=recorder)
    finally:
        partners.close()
    result = {
        "run_dir": str(args.run_dir),
        "partner": str(args.partner),
        "checkpoint": args.checkpoint,
        "seats": {"run": partners.seating.labels(True), "partner": partners.seating.labels(False)},
        "measure": partners.measure,
        "episodes": cell["n"],
        "team_return": cell["mean"],
        "team_return_sd": cell["sd"],
        "episode_reward": cell["groups"],
    }
    if recorder is not None:
        result["video"] = str(recorder.save(args.video))
    print(json.dumps(result, indent=2))
    return 0


def add_crossplay_parser(sub, positive_int) -> None:
    """Adds the ``crossplay`` command to the command line's subparsers ``sub`` (``positive_int``: the command
    line's argparse type of an integer >= 1)."""
    p = sub.add_parser(
        "crossplay",
        help="every ordered pair of runs (e.g. the seeds of one config) seated together: the self-play vs "
        "cross-play matrix of team returns (JSON, heat map)",
    )
    p.add_argument(
        "runs",
        nargs="+",
        metavar="RUN",
        help="run directories (two or more), a train.seeds group's directory, one seed of a group (its whole "
        "group) or a quoted glob ('runs/overcooked-*')",
    )
    p.add_argument("--episodes", type=positive_int, default=10, help="episodes per ordered pair")
    p.add_argument("--seat", action="append", metavar="GROUP[:AGENT]", help=SEAT_HELP.replace("with --partner: ", ""))
    p.add_argument("--out", help="output folder (default: crossplay beside the first run); files are overwritten")
    p.add_argument("--checkpoint", default="last.pt", help="checkpoint file in each RUN/checkpoints")
    p.add_argument("--max-steps", type=positive_int, metavar="N", help="env.max_steps for every pair's episodes")
    p.add_argument("--device", help="run on this device instead of the runs' (e.g. cpu for cuda runs)")
    p.add_argument("--team", choices=("mean", "sum"), default="mean", help=TEAM_HELP)
    p.add_argument("--sample", action="store_true", help="the policies sample their actions")
    p.set_defaults(func=_crossplay)


def run_directories(paths: Sequence[str | Path]) -> list[Path]:
    """Run directories from the command line: run directories, a glob (quoted, so that the shell leaves it),
    a ``train.seeds`` group's directory (its ``group_summary.json``'s runs) or one seed of a group alone
    (every seed of its group)."""
    from marl_ppo.run.group_result import GROUP_SUMMARY
    from marl_ppo.run.seeds import GROUP_FILE, group_run_dirs

    out: list[Path] = []
    for text in map(str, paths):
        path = Path(text).expanduser()
        if (path / "config.yaml").is_file():
            found = [path]
        elif (path / GROUP_SUMMARY).is_file():
            found = [Path(d) for d in json.loads((path / GROUP_SUMMARY).read_text())["run_dirs"]]
        elif not path.exists() and glob.has_magic(text):
            found = [Path(p) for p in sorted(glob.glob(text)) if (Path(p) / "config.yaml").is_file()]
        else:
            found = []
        if not found:
            raise ConfigError(
                f"{text}: not a run directory (no config.yaml), a train.seeds group's directory nor a glob"
            )
        out += found
    if len(out) == 1 and (out[0] / GROUP_FILE).is_file():
        out = group_run_dirs(out[0])
    out = list(dict.fromkeys(p.resolve() for p in out))
    if len(out) < 2:
        raise ConfigError(f"cross-play needs two runs or more (the seeds of one config), got {[str(p) for p in out]}")
    return out


def _crossplay(args: argparse.Namespace) -> int:
    """Plays every pair, prints the matrix and the scores on stderr and the JSON's summary on stdout."""
    from marl_ppo.run.crossplay import crossplay

    runs = run_directories(args.runs)
    out = Path(args.out) if args.out else runs[0].parent / "crossplay"

    def progress(i: int, j: int, cell: dict) -> None:
        print(f"run {i} beside run {j}: team return {cell['mean']:.4g} ({cell['n']} episodes)", file=sys.stderr)

    result = crossplay(
        runs, out, episodes=args.episodes, seating=args.seat, checkpoint=args.checkpoint, device=args.device,
        max_steps=args.max_steps, sample=args.sample, team=args.team, progress=progress,
    )  # fmt: skip
    for key in ("self_play", "cross_play", "gap"):
        d = result[key]
        ci = f"95% CI [{d['ci95'][0]:.4g}, {d['ci95'][1]:.4g}]" if d["ci95"] else d["no_interval"]
        print(f"{key.replace('_', '-')}: {d['mean']:.4g}, {ci}", file=sys.stderr)
    summary = {k: result[k] for k in ("runs", "seats", "matrix", "self_play", "cross_play", "gap", "files")}
    print(json.dumps(summary, indent=2))
    return 0
