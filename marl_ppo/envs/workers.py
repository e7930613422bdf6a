"""Env worker processes and stop signals: workers leave SIGINT/SIGTERM to the main process."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

__all__ = ["workers_ignore_stop_signals", "STOP_SIGNALS"]

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def workers_ignore_stop_signals() -> Iterator[None]:
    """Worker processes started inside this block ignore SIGINT and SIGTERM (they inherit it).

    A terminal's Ctrl-C reaches every process of the foreground group, and SLURM signals every
    process of a job step: env workers (a ``ParallelEnv``) that died of it would break the main
    process's collection before it could checkpoint. The main process stops its workers itself
    (the collector's and the envs' ``close``), after the checkpoint.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
