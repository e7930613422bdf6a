"""SIGINT and SIGTERM as a request to stop at the next safe point, not an exception anywhere.

A run that gets Ctrl-C (SIGINT) or SIGTERM (what SLURM, Ray and ``kill`` send) finishes the
gradient step it is in, writes a checkpoint of the last completed iteration, closes its loggers
and ends with :class:`RunInterrupted`. A second signal stops at once
(``KeyboardInterrupt``), leaving the checkpoints already written.

Handlers can be installed from the main thread only (a Python rule); elsewhere (a worker
thread) signals keep their previous behaviour.

>>> import os, signal
>>> with StopSignals() as stop:
...     os.kill(os.getpid(), signal.SIGTERM)
...     stop.requested
'SIGTERM'
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Sequence
from types import FrameType

from marl_ppo.envs.workers import STOP_SIGNALS  # light: the envs package loads lazily

__all__ = ["StopSignals", "RunInterrupted"]


class RunInterrupted(RuntimeError):
    """A run stopped by SIGINT or SIGTERM after writing a checkpoint of its last completed iteration."""

    def __init__(self, signal_name: str, message: str) -> None:
        super().__init__(message)
        self.signal_name = signal_name

    @property
    def exit_code(self) -> int:
        """The shell's convention: 128 + the signal number (130 for SIGINT, 143 for SIGTERM)."""
        return 128 + int(signal.Signals[self.signal_name])


class StopSignals:
    """Context manager: while active, the first SIGINT/SIGTERM sets :attr:`requested` (its name)."""

    def __init__(self) -> None:
        self.requested: str | None = None
        self._previous: dict[int, object] = {}

    def __enter__(self) -> "StopSignals":
        if threading.current_thread() is threading.main_thread():
            for sig in STOP_SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.requested is not None:  # the second one: stop now
            raise KeyboardInterrupt(f"second {signal.Signals(signum).name}: stopping at once")
        self.requested = signal.Signals(signum).name

    def agree(self, most: Callable[[int], int]) -> str | None:
        """The signal that any process of the run got, now :attr:`requested` here too (``most``: the ranks'
        maximum of a number, :meth:`~marl_ppo.core.ranks.Ranks.max`; one process: itself). Every rank asks at
        the same points and answers from the agreed number alone (a signal that lands after this rank gave
        its number is agreed at the next point), so all stop at the same step."""
        signum = most(int(signal.Signals[self.requested]) if self.requested else 0)
        if not signum:
            return None
        if self.requested is None:
            self.requested = signal.Signals(signum).name
        return self.requested

    def flags(self) -> list[float]:
        """Which stop signal this process got, one number each of :data:`STOP_SIGNALS` (1: got it), for a sum over
        the ranks that travels with the gradients (:attr:`~marl_ppo.core.aggregate.AggregatedStep.agree`)."""
        return [float(self.requested == signal.Signals(sig).name) for sig in STOP_SIGNALS]

    def adopt(self, sums: Sequence[float]) -> str | None:
        """The signal that ``sums`` (of :meth:`flags` over the ranks, as a step gave them) say a rank got, now
        :attr:`requested` here too (the last of :data:`STOP_SIGNALS` where ranks got different ones); ``None``
        where they say none, even if one has landed here since this rank gave its flags (the next step's
        sums carry it): every rank decides from the same numbers."""
        got = [signal.Signals(sig).name for sig, n in zip(STOP_SIGNALS, sums) if n > 0]
        if not got:
            return None
        if self.requested is None:
            self.requested = got[-1]
        return self.requested

    def __exit__(self, *exc) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        self._previous.clear()
