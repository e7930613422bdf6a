"""The whole tree passes ruff's lint and format check (``[tool.ruff]`` in ``pyproject.toml``: lines <= 120)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("command", [["check"], ["format", "--check"]], ids=["lint", "format"])
def test_ruff_is_clean_on_the_whole_tree(command):
    proc = subprocess.run([sys.executable, "-m", "ruff", *command, "."], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, f"ruff {' '.join(command)} .:\n{proc.stdout}{proc.stderr}"
