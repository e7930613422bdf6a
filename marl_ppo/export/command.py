"""``marl-ppo export``: its options and its handler (no torch until it runs)."""

from __future__ import annotations

import argparse

__all__ = ["add_export_parser"]


def add_export_parser(sub) -> None:
    """Adds the ``export`` command to the command line's subparsers ``sub``."""
    p = sub.add_parser(
        "export", help="export each trained group's deterministic policy (ONNX, TorchScript, torch.export)"
    )
    p.add_argument("run_dir", help="a run directory written by marl-ppo train")
    p.add_argument(
        "--format",
        action="append",
        choices=("onnx", "torchscript", "exported"),
        help="onnx (extra export), torchscript (.pt) or exported (torch.export, .pt2); repeatable (default: onnx)",
    )
    p.add_argument(
        "--group", action="append", metavar="G", help="export this group only (repeatable; default: all trained)"
    )
    p.add_argument("--checkpoint", default="last.pt", help="checkpoint file in RUN_DIR/checkpoints")
    p.add_argument("--out", help="output folder, one subfolder per group (default: RUN_DIR/export)")
    p.add_argument(
        "--outputs",
        choices=("action", "params"),
        default="action",
        help="action: each head's mode; params: each head's distribution parameters (loc/scale, logits)",
    )
    p.add_argument(
        "--layout",
        choices=("group", "agent"),
        default="group",
        help="group: rows [batch, n_agents, ...]; agent: one agent per row [batch, ...] (agents sharing parameters)",
    )
    p.set_defaults(func=_export)


def _export(args: argparse.Namespace) -> int:
    """Exports the run's groups; prints each file written and each ``policy.json``."""
    from marl_ppo.export import export_run

    written = export_run(
        args.run_dir,
        formats=args.format or ["onnx"],
        groups=args.group,
        out=args.out,
        checkpoint=args.checkpoint,
        outputs=args.outputs,
        layout=args.layout,
    )
    for files in written.values():
        for path in files.values():
            print(path)
        print(next(iter(files.values())).parent / "policy.json")
    return 0
