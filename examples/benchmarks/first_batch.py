"""Time to the first collected batch of ``make train`` (``marl-ppo train`` with the default config).

Spawns a fresh interpreter that does what ``marl-ppo train`` does (load ``configs/navigation.yaml``'s
default config, build the ``Trainer``, ``fit()``) with a callback that reports, at the first
``on_batch_collected``, the seconds since the child was spawned, then ends the child. Also times
``python -c "import torch"`` and ``marl-ppo --help`` in the same run, for scale. Medians over
``--repeats``.

    .venv/bin/python examples/benchmarks/first_batch.py --threads 1
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CHILD = r"""
import os, sys, time
spawned, threads, run_dir = float(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
from marl_ppo.config import load_config
from marl_ppo.run.trainer import Trainer
marks = {"imports": time.time() - spawned}

class FirstBatch:
    def on_batch_collected(self, trainer, batch):
        marks["first_batch"] = time.time() - spawned
        print(" ".join(f"{k}={v:.3f}" for k, v in marks.items()), f"frames={batch.numel()}", flush=True)
        os._exit(0)

overrides = [f"log.root={run_dir}", "log.progress=false"] + ([f"train.num_threads={threads}"] if threads else [])
cfg = load_config(overrides=overrides)
trainer = Trainer(cfg, callbacks=[FirstBatch()])
marks["built"] = time.time() - spawned
trainer.fit()
"""


def timed(cmd: list[str], env: dict) -> float:
    t = time.time()
    subprocess.run(cmd, cwd=ROOT, env=env, check=True, capture_output=True)
    return time.time() - t


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=0, help="train.num_threads (0: torch's default)")
    args = p.parse_args()
    env = dict(os.environ)
    marl_ppo = shutil.which("marl-ppo", path=str(Path(sys.executable).parent)) or "marl-ppo"
    rows: dict[str, list[float]] = {}
    for rep in range(args.repeats):
        rows.setdefault("import torch", []).append(timed([sys.executable, "-c", "import torch"], env))
        rows.setdefault("marl-ppo --help", []).append(
            timed([sys.executable, "-m", "marl_ppo.cli", "--help"], env)
            if not Path(marl_ppo).exists()
            else timed([marl_ppo, "--help"], env)
        )
        with tempfile.TemporaryDirectory() as tmp:
            out = subprocess.run(
                [sys.executable, "-c", CHILD, repr(time.time()), str(args.threads), tmp],
                cwd=ROOT,
                env=env,
                capture_output=True,
                text=True,
            )
        if out.returncode != 0 or "first_batch=" not in out.stdout:
            sys.exit(f"the training child failed (rc {out.returncode}):\n{out.stderr[-3000:]}")
        marks = dict(kv.split("=") for kv in out.stdout.split())
        for k in ("imports", "built", "first_batch"):
            rows.setdefault(k, []).append(float(marks[k]))
        print(f"  repeat {rep + 1}: " + "  ".join(f"{k} {v[-1]:.2f}s" for k, v in rows.items()), flush=True)
    print(f"\nmedians over {args.repeats} (seconds since the process was spawned)")
    labels = {
        "import torch": 'python -c "import torch"',
        "marl-ppo --help": "marl-ppo --help",
        "imports": "train: marl_ppo imported",
        "built": "train: Trainer built (env, networks, run dir)",
        "first_batch": f"train: first batch collected ({marks['frames']} frames)",
    }
    for k, label in labels.items():
        print(f"  {label:<48}{statistics.median(rows[k]):7.2f}")


if __name__ == "__main__":
    main()
