"""Bit for bit across refactors: the default run (3 iterations) and a group of four seeds in one
process digest to the recorded references.

The reference (``tests/run/data/reference_default.json``) was written by ``tests/run/reference_run.py
--write`` with the code as it stood before a restructuring; every parameter, optimizer and RNG
tensor of every checkpoint, every metric CSV line (but timings) and the resolved config must come
out identical. A change that is meant to change the numbers rewrites the reference in its own
commit and says why.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import reference_run  # noqa: E402

pytestmark = pytest.mark.slow


def _differences(got, want, path="") -> list[str]:
    if isinstance(want, dict) and isinstance(got, dict):
        out = []
        for key in sorted(set(got) | set(want)):
            out += _differences(got.get(key), want.get(key), f"{path}/{key}")
        return out
    return [] if got == want else [f"{path}: got {str(got)[:120]}, reference {str(want)[:120]}"]


def _reference(path: Path) -> dict:
    reference = json.loads(path.read_text())
    if reference["machine"] != reference_run.machine():
        pytest.skip(
            f"the reference was recorded with {reference['machine']}, this machine has "
            f"{reference_run.machine()}: bit-for-bit results are only defined on the same kernels"
        )
    return reference


def test_default_run_matches_the_reference():
    reference = _reference(reference_run.REFERENCE)
    assert reference["overrides"] == reference_run.OVERRIDES
    with tempfile.TemporaryDirectory() as tmp:
        got = reference_run.digest(reference_run.run(Path(tmp)))
    diffs = _differences(got, reference["digest"])
    assert not diffs, f"{len(diffs)} entries differ from the reference, e.g.:\n" + "\n".join(diffs[:10])


def test_a_group_of_seeds_matches_the_reference():
    """Four seeds in one process: every seed's checkpoints, metric lines and config, as recorded."""
    reference = _reference(reference_run.SEEDS_REFERENCE)
    assert reference["overrides"] == reference_run.SEEDS_OVERRIDES
    with tempfile.TemporaryDirectory() as tmp:
        got = reference_run.run_seeds(Path(tmp))
    assert sorted(got) == [f"group-seed{s}" for s in range(4)]
    diffs = _differences(got, reference["digest"])
    assert not diffs, f"{len(diffs)} entries differ from the reference, e.g.:\n" + "\n".join(diffs[:10])
