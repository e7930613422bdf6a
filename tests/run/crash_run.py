"""Runs ``marl-ppo ARGS...`` and kills itself with SIGKILL at a chosen point (tests/run/test_recovery.py).

    python tests/run/crash_run.py POINT ITERATION marl-ppo-args...

POINT is where the process dies, in the iteration numbered ITERATION (1-based):

* ``update``: in the middle of that iteration's PPO update (after its first gradient step);
* ``logged``: right after that iteration's metrics reached the logs, before its checkpoint;
* ``checkpoint``: while that iteration's checkpoint is being written (half of the bytes are in
  ``iter_XXXXX.pt.tmp``, nothing renamed yet).

SIGKILL cannot be caught: no ``finally``, no handler, no flush runs, as with ``kill -9`` or the
out-of-memory killer.
"""

from __future__ import annotations

import os
import signal
import sys

import marl_ppo.core.update as update_module
import marl_ppo.run.checkpoints as checkpoints
import marl_ppo.run.logger as run_logging
import marl_ppo.run.record as record
from marl_ppo.cli import main
from marl_ppo.core.aggregate import AggregatedStep


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def arm(point: str, iteration: int) -> None:
    if point == "update":
        real_update, real_step = update_module.ppo_update, AggregatedStep.__call__
        calls = {"n": 0}

        def update(*args, **kwargs):
            calls["n"] += 1
            if calls["n"] == iteration:

                def step(self, losses):
                    out = real_step(self, losses)
                    die()
                    return out

                AggregatedStep.__call__ = step
            return real_update(*args, **kwargs)

        update_module.ppo_update = update  # the joint update mode, looked up by the trainer each iteration
    elif point == "logged":
        real_log = run_logging.RunLogger.log
        seen = {"n": 0}

        def log(self, metrics, step):
            real_log(self, metrics, step)
            if "time/iteration" in metrics:
                seen["n"] += 1
                if seen["n"] == iteration:
                    die()

        run_logging.RunLogger.log = log
    elif point == "checkpoint":
        real_write = checkpoints.write_checkpoint

        def write(state, paths):
            if int(state["iteration"]) == iteration:
                import io

                import torch

                buffer = io.BytesIO()
                torch.save(state, buffer)
                data = buffer.getvalue()
                first = paths[0]
                first.parent.mkdir(parents=True, exist_ok=True)
                with open(first.with_name(first.name + ".tmp"), "wb") as f:
                    f.write(data[: len(data) // 2])
                    f.flush()
                die()
            return real_write(state, paths)

        record.write_checkpoint = write  # where each seed's record writes its checkpoints
    else:
        raise SystemExit(f"unknown point {point!r}: update, logged or checkpoint")


if __name__ == "__main__":
    point, at = sys.argv[1], int(sys.argv[2])
    arm(point, at)
    sys.exit(main(sys.argv[3:]))
