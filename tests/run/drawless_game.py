"""MPE's simple_spread behind a constructor that takes no ``render_mode``: a game that cannot draw."""

from __future__ import annotations

from mpe2 import simple_spread_v3


def parallel_env(N: int = 2, max_cycles: int = 25, continuous_actions: bool = False):  # noqa: N803 (MPE's name)
    return simple_spread_v3.parallel_env(N=N, max_cycles=max_cycles, continuous_actions=continuous_actions)
