"""torchrl's batched envs' workers: worker processes leave SIGINT/SIGTERM to the main process, and closing
a ``SerialEnv`` leaves the run's thread count alone."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

import torch
from torchrl.envs import SerialEnv

__all__ = ["workers_ignore_stop_signals", "STOP_SIGNALS", "SerialEnvKeepingThreads"]

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


class SerialEnvKeepingThreads(SerialEnv):
    """torchrl's ``SerialEnv``, whose ``close`` leaves torch's thread count as it found it.

    torchrl 0.14.1's ``BatchedEnvBase.close`` raises the process's thread count by the number of
    copies (up to the count torchrl saw at import), for a ``SerialEnv`` too, which never lowered it.
    The collector closes the env when it reaches ``total_frames``, before the last batch's update,
    and the evaluation closes its own: a run of ``train.num_threads=1`` made its last update and its
    final evaluation on every core, and rounded them differently (a CNN's convolutions).

    >>> from marl_ppo.envs import EnvConfig
    >>> from marl_ppo.envs.pettingzoo import make_pettingzoo
    >>> torch.set_num_threads(1)
    >>> cfg = EnvConfig(kind="pettingzoo", scenario="tictactoe_v3", kwargs={})
    >>> env = make_pettingzoo(cfg, seed=0, num_envs=2, lean=False)
    >>> env.close(); torch.get_num_threads()
    1
    """

    def close(self, *, raise_if_closed: bool = True) -> None:
        threads = torch.get_num_threads()
        try:
            super().close(raise_if_closed=raise_if_closed)
        finally:
            torch.set_num_threads(threads)
