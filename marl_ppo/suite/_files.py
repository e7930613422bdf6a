"""The files a suite writes into a run directory, and the atomic JSON write they share."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

JOB_FILE, RESULT_FILE, ABSOLUTE_FILE, LOG_FILE = (
    "suite_job.json",
    "suite_result.json",
    "absolute_metrics.json",
    "worker.log",
)


def write_json(path: Path, obj: Any) -> None:
    """Writes ``obj`` as strict JSON (no NaN) to ``path`` through a temporary file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2, allow_nan=False))
    os.replace(tmp, path)
