"""One group's policy written in the asked formats, each file run back and checked against torch.

:func:`export_policy` captures the policy once (``torch.export``), writes each format from that
capture into ``out`` (``policy.onnx``, ``policy.pt``, ``policy.pt2``), runs every file on random
inputs of 5 rows and compares its outputs with the torch policy's (floats within 1e-5, discrete
actions equal; an ExportError if not), and writes ``policy.json`` (:mod:`~marl_ppo.export.manifest`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from marl_ppo.export.formats import capture, export_format
from marl_ppo.export.graph import ExportError, PolicyGraph
from marl_ppo.export.manifest import manifest
from marl_ppo.export.rows import EnvRows
from marl_ppo.groups.specs import GroupSpec

__all__ = ["export_policy", "compare", "TOLERANCE"]

TOLERANCE = 1e-5  # floats; discrete actions must be equal


def compare(
    graph: PolicyGraph, want: Sequence[np.ndarray], got: Sequence[np.ndarray], against: str = "the torch policy's"
) -> float:
    """The largest absolute difference between two sets of outputs; an ExportError naming the first
    output that differs beyond :data:`TOLERANCE` (any difference for a discrete one) or has another
    shape, and (``against``) what it was compared with."""
    worst = 0.0
    for port, w, g in zip(graph.outputs, want, got):
        w, g = np.asarray(w), np.asarray(g)
        if w.shape != g.shape:
            raise ExportError(f"output {port.name!r}: shape {list(g.shape)}, {against} {list(w.shape)}")
        diff = float(np.abs(w.astype(np.float64) - g.astype(np.float64)).max()) if w.size else 0.0
        floating = np.issubdtype(w.dtype, np.floating)
        if diff > (TOLERANCE if floating else 0.0):
            raise ExportError(f"output {port.name!r} differs from {against} by {diff:.3g}")
        worst = max(worst, diff)
    return worst


def export_policy(
    graph: PolicyGraph,
    group: GroupSpec,
    formats: Sequence[str],
    out: str | Path,
    *,
    source: dict[str, Any] | None = None,
    outputs: str = "action",
    env_rows: EnvRows | None = None,
    preprocessing: dict[str, Any] | None = None,
) -> dict[str, Path]:
    """Writes ``graph`` in each of ``formats`` into the folder ``out``, checks each file (on random rows;
    on ``env_rows`` too, the run's real observations, where given), writes ``policy.json`` beside them
    (``preprocessing``: what the env does to an observation before the policy reads it); returns the
    files by format."""
    chosen = [export_format(f) for f in formats]
    for fmt in chosen:  # before any work: a missing package names its extra
        fmt.check_installed()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    example = graph.example(3, torch.Generator().manual_seed(0))
    program = capture(graph, example)
    check = [t.numpy() for t in graph.example(5, torch.Generator().manual_seed(1))]
    with torch.no_grad():
        want = [t.numpy() for t in graph(*[torch.from_numpy(x) for x in check])]
    files, written = {}, {}
    for fmt in chosen:
        path = out / f"policy{fmt.suffix}"
        fmt.write(program, graph, example, path)
        run = fmt.run(path, graph)
        diff = compare(graph, want, _run_back(run, fmt.name, path, check))
        record = {"file": path.name, "needs": fmt.needs(path), "max_abs_diff": diff, "checked_rows": len(check[0])}
        if env_rows is not None:  # the trained policy's own outputs, where the run's agents met
            got = _run_back(run, fmt.name, path, env_rows.inputs)
            played = f"what the trained policy played in the run's env ({env_rows.steps} steps, group layout)"
            record["max_abs_diff"] = max(diff, compare(graph, env_rows.outputs, got, against=played))
            record |= {"env_rows": len(env_rows.inputs[0]), "env_steps": env_rows.steps}
        files[fmt.name] = record
        written[fmt.name] = path
    record = manifest(graph, group, outputs=outputs, files=files, source=source or {}, preprocessing=preprocessing)
    (out / "policy.json").write_text(json.dumps(record, indent=1) + "\n")
    return written


def _run_back(run, fmt: str, path: Path, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """``run(inputs)``; an ExportError naming the format and the formats to try where the file does not run."""
    try:
        return run(inputs)
    except Exception as err:  # noqa: BLE001 -- each runtime raises its own types
        others = [f for f in ("exported", "torchscript", "onnx") if f != fmt]
        raise ExportError(
            f"format {fmt!r}: the written {path.name} does not run on {len(inputs[0])} rows "
            f"({type(err).__name__}: {str(err).strip().splitlines()[0]}); try --format {others[0]} or {others[1]}"
        ) from None
