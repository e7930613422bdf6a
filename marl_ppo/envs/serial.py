"""torchrl's ``SerialEnv`` of the adapters' env copies: its ``close`` keeps the run's thread count, and it
draws a copy's frame.

Light modules (the CLI's signal handling, the options) import :mod:`~marl_ppo.envs.workers`; this one
loads torch and torchrl, so it stands apart.
"""

from __future__ import annotations

from typing import Any

import torch
from torchrl.envs import SerialEnv

from marl_ppo.envs.game_copies import render_game, wrapper_of

__all__ = ["SerialEnvKeepingThreads"]


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

    def render(self, mode: str = "rgb_array", env_index: int = 0) -> Any:
        """Copy ``env_index``'s frame, drawn by its game (a PettingZoo copy built with ``render_mode="rgb_array"``)."""
        return render_game(wrapper_of(self._envs[env_index])._env, mode)

    def close(self, *, raise_if_closed: bool = True) -> None:
        threads = torch.get_num_threads()
        try:
            super().close(raise_if_closed=raise_if_closed)
        finally:
            torch.set_num_threads(threads)
