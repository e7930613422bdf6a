"""``train.num_threads: 0`` (auto): as many torch threads as the machine has idle cores when the run starts.

torch's default is one intra-op thread per core. On a quiet machine that is what a run wants; on a
busy one its threads spin-wait on each other behind the other jobs: on the 2-core CPU box with two
other one-thread jobs, the default run of 12 000 frames took 40.9 s with torch's default (2 threads)
against 23.4 s with one (``docs/performance.md``, "Threads on a busy machine"). The rule: count the
cores of this process's CPU affinity that were idle over 0.1 s (from ``/proc/stat``), round, keep it
between 1 and torch's default. Decided once per process (the first run it builds); where
``/proc/stat`` cannot be read, torch's default.

Written by hand: neither torch nor the standard library says how busy the cores are.
"""

from __future__ import annotations

import functools
import os
import time

import torch

__all__ = ["idle_cores", "threads_for", "auto_threads"]


def _cpu_times(cpus: set[int]) -> dict[int, tuple[int, int]]:
    """``cpu -> (idle ticks, total ticks)`` from ``/proc/stat`` for the cores in ``cpus``."""
    out = {}
    with open("/proc/stat") as f:
        for line in f:
            name, *fields = line.split()
            if not name.startswith("cpu") or name == "cpu" or int(name[3:]) not in cpus:
                continue
            ticks = [int(x) for x in fields]
            out[int(name[3:])] = (ticks[3] + ticks[4], sum(ticks[:8]))  # idle + iowait; user..steal
    return out


def idle_cores(window: float = 0.1) -> float | None:
    """How many of this process's cores were idle over ``window`` seconds (``None``: cannot tell here)."""
    try:
        cpus = os.sched_getaffinity(0)
        before = _cpu_times(cpus)
        time.sleep(window)
        after = _cpu_times(cpus)
    except (AttributeError, OSError, ValueError):
        return None
    idle = 0.0
    for cpu, (idle1, total1) in after.items():
        idle0, total0 = before.get(cpu, (idle1, total1))
        if total1 > total0:
            idle += (idle1 - idle0) / (total1 - total0)
    return idle if after else None


def threads_for(idle: float | None, default: int) -> int:
    """The rule: ``idle`` cores rounded, within 1 and ``default`` (``None``: ``default``).

    >>> threads_for(1.96, 2), threads_for(0.04, 2), threads_for(1.2, 16), threads_for(None, 8), threads_for(9.0, 4)
    (2, 1, 1, 8, 4)
    """
    return default if idle is None else max(1, min(default, round(idle)))


@functools.cache
def auto_threads() -> int:
    """The thread count of ``train.num_threads: 0`` in this process (decided on the first call)."""
    return threads_for(idle_cores(), torch.get_num_threads())
