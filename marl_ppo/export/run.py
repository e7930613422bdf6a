"""A run's trained policies exported: ``marl-ppo export RUN_DIR`` and :func:`export_run`.

The run is rebuilt from its ``config.yaml`` and a checkpoint (:func:`~marl_ppo.run.build.load_policy`,
as ``marl-ppo eval`` does, on the CPU), its env is reset and played a few steps by the trained
policy (:mod:`~marl_ppo.export.rows`: the run-back check's real observations), and each trained
group's actor goes through :func:`~marl_ppo.export.policy.export_policy` into ``OUT/<group>/``, with
what the env does to its observations (:mod:`~marl_ppo.export.preprocessing`). A group played by an opponent
(a scripted bot, a frozen checkpoint, a pool) has no trained policy in the run: it is refused with
what plays it. Groups that play with another group's networks (``opponents: {g: self}``) export
their own copy, on their own entries.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from marl_ppo.export.graph import ExportError, policy_graph
from marl_ppo.export.policy import export_policy
from marl_ppo.export.preprocessing import preprocessing
from marl_ppo.export.rows import play_env, rows_of

__all__ = ["export_run"]


def export_run(
    run_dir: str | Path,
    *,
    formats: Sequence[str] = ("onnx",),
    groups: Sequence[str] | None = None,
    out: str | Path | None = None,
    checkpoint: str = "last.pt",
    outputs: str = "action",
    layout: str = "group",
) -> dict[str, dict[str, Path]]:
    """Exports the run's trained groups (``groups``: some of them) in each of ``formats`` into
    ``out`` (default ``RUN_DIR/export``); returns the files by group and format."""
    from marl_ppo.export.formats import export_format
    from marl_ppo.run.build import load_policy
    from marl_ppo.run.checkpoints import load_checkpoint

    for fmt in formats:  # before the run is rebuilt: an unknown format, a missing package
        export_format(fmt).check_installed()
    run_dir = Path(run_dir)
    if not (run_dir / "config.yaml").is_file():
        raise FileNotFoundError(f"{run_dir} is not a run directory (no config.yaml)")
    cfg, parts = load_policy(run_dir, checkpoint, device="cpu")
    try:
        trained = list(parts.router.groups)
        chosen = list(groups) if groups else trained
        for g in chosen:
            if g not in parts.groups:
                raise ExportError(f"group {g!r}: the run has no such group; its groups are {list(parts.groups)}")
            if g not in trained:
                what = cfg.opponents.get(g, "an opponent")
                raise ExportError(
                    f"group {g!r} is played by {what} (opponents.{g}), not trained in this run; its trained "
                    f"groups are {trained}"
                )
        iteration = load_checkpoint(run_dir / "checkpoints" / checkpoint)["iteration"]
        source = {
            "run_dir": str(run_dir.resolve()),
            "checkpoint": checkpoint,
            "iteration": iteration,
            "env": {"kind": cfg.env.kind, "scenario": cfg.env.scenario},
            "algorithm": cfg.loss.algorithm,
        }
        out = Path(out) if out is not None else run_dir / "export"
        graphs = {
            g: policy_graph(parts.router.losses[g].actor_network, parts.groups[g], outputs=outputs, layout=layout)
            for g in chosen
        }  # every group's refusal before the env is played
        played = play_env(parts.env, parts.policy)
        written = {}
        for g, graph in graphs.items():
            group = parts.groups[g]
            observed = [p for p in graph.inputs if p.key in group.observation_keys]
            written[g] = export_policy(
                graph, group, formats, out / g, source=source | {"group": g}, outputs=outputs,
                env_rows=rows_of(graph, played, group.n_agents),
                preprocessing=preprocessing(cfg.env, observed, layout),
            )  # fmt: skip
        return written
    finally:
        parts.env.close()
