"""What two runs that should be the same are compared on: the router's parameters and the logged metrics."""

from __future__ import annotations

from pathlib import Path

import torch


def assert_same_run(expected, got, expected_dir: Path, got_dir: Path) -> dict[str, str]:
    """The two trainers end with equal parameters, bit for bit, and their run directories hold the same
    logged metrics, every one but the timings, as written; returns those of ``got_dir``."""
    theirs = got.parts.router.state_dict()
    for k, v in expected.parts.router.state_dict().items():
        assert torch.equal(v, theirs[k]), k
    ours, others = _scalars(expected_dir), _scalars(got_dir)
    assert ours == others != {}
    return others


def _scalars(run_dir: Path) -> dict[str, str]:
    root = Path(run_dir) / "logs" / "scalars"
    return {str(p.relative_to(root)): p.read_text() for p in root.rglob("*.csv") if "time" not in p.parts}
