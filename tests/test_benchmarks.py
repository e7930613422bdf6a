"""The benchmark scripts run as written (with --quick) and print their ratios."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("script, pattern", [
    ("throughput.py", r"ratio ours/floor\s+[0-9.]+x"),
    ("group_count.py", r"[0-9.]+x"),
])
def test_benchmark_script_quick(script, pattern):
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "benchmarks" / script), "--quick", "--threads", "1", "--repeats", "1"],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert re.search(pattern, out.stdout), out.stdout
