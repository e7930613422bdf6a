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
from marl_ppo.groups.specs import GroupSpec

__all__ = ["export_policy", "compare", "TOLERANCE"]

TOLERANCE = 1e-5  # floats; discrete actions must be equal


def compare(graph: PolicyGraph, want: Sequence[np.ndarray], got: Sequence[np.ndarray]) -> float:
    """The largest absolute difference between two sets of outputs; an ExportError naming the first
    output that differs beyond :data:`TOLERANCE` (any difference for a discrete one) or has another shape."""
    worst = 0.0
    for port, w, g in zip(graph.outputs, want, got):
        w, g = np.asarray(w), np.asarray(g)
        if w.shape != g.shape:
            raise ExportError(f"output {port.name!r}: shape {list(g.shape)}, the torch policy's {list(w.shape)}")
        diff = float(np.abs(w.astype(np.float64) - g.astype(np.float64)).max()) if w.size else 0.0
        floating = np.issubdtype(w.dtype, np.floating)
        if diff > (TOLERANCE if floating else 0.0):
            raise ExportError(f"output {port.name!r} differs from the torch policy's by {diff:.3g}")
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
) -> dict[str, Path]:
    """Writes ``graph`` in each of ``formats`` into the folder ``out``, checks each file, writes
    ``policy.json`` beside them; returns the files by format."""
    chosen = [export_format(f) for f in formats]
    for fmt in chosen:  # before any work: a missing package names its extra
        fmt.check_installed()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    example = graph.example(3, torch.Generator().manual_seed(0))
    program = capture(graph, example)
    check = graph.example(5, torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = [t.numpy() for t in graph(*check)]
    files, written = {}, {}
    for fmt in chosen:
        path = out / f"policy{fmt.suffix}"
        fmt.write(program, graph, example, path)
        try:
            got = fmt.run(path, graph)([t.numpy() for t in check])
        except Exception as err:  # noqa: BLE001 -- each runtime raises its own types
            others = [f for f in ("exported", "torchscript", "onnx") if f != fmt.name]
            raise ExportError(
                f"format {fmt.name!r}: the written {path.name} does not run on {len(check[0])} rows "
                f"({type(err).__name__}: {str(err).strip().splitlines()[0]}); try --format {others[0]} or {others[1]}"
            ) from None
        diff = compare(graph, want, got)
        files[fmt.name] = {"file": path.name, "max_abs_diff": diff, "checked_rows": len(check[0])}
        written[fmt.name] = path
    record = manifest(graph, group, outputs=outputs, files=files, source=source or {})
    (out / "policy.json").write_text(json.dumps(record, indent=1) + "\n")
    return written
