"""Game parameters checked against the ranges their libraries declare, before native code sees them.

An env kind's row names its check (``EnvKind.check``), which :class:`~marl_ppo.envs.options.EnvConfig`
runs when it is made: a value outside the library's range is one :class:`~marl_ppo.options.ConfigError`
naming the parameter, the value and the range, before a run directory exists. Some libraries abort the
process instead of raising (OpenSpiel's Hanabi ``REQUIRE``s its ranges in C++: SIGABRT; a hand of 0 cards
segfaults), where no Python ``except`` runs; games no range here covers are played first in a child
process (:func:`marl_ppo.envs.openspiel.load_game`). No torch here.

>>> check_openspiel_kwargs("hanabi", {"players": 6})  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
marl_ppo.options.ConfigError: env.kwargs.players=6: OpenSpiel's Hanabi takes 2 to 5 (outside it, ...)
"""

from __future__ import annotations

from typing import Any

from marl_ppo.options import ConfigError

__all__ = ["HANABI_RANGES", "OPENSPIEL_RANGES", "check_openspiel_kwargs", "check_openspiel"]

# The Hanabi Learning Environment's HanabiGame constructor (hanabi_lib/hanabi_game.cc:33-37, as open_spiel 2.0.2
# ships it): MinPlayers() = 2 <= players <= MaxPlayers() = 5, 0 < colors <= kMaxNumColors = 5, 0 < ranks <=
# kMaxNumRanks = 5, each REQUIREd (SIGABRT); hand_size 0 segfaults on the deal; max_life_tokens 0 ends every
# game before its first move. None: no upper bound.
HANABI_RANGES: dict[str, tuple[int, int | None]] = {
    "players": (2, 5),
    "colors": (1, 5),
    "ranks": (1, 5),
    "hand_size": (1, None),
    "max_information_tokens": (0, None),
    "max_life_tokens": (1, None),
}


# each game's name in messages, the library that declares its ranges, and the ranges, by its OpenSpiel name (a game
# not here is played first in a child process)
OPENSPIEL_RANGES: dict[str, tuple[str, str, dict[str, tuple[int, int | None]]]] = {
    "hanabi": ("OpenSpiel's Hanabi", "the Hanabi Learning Environment", HANABI_RANGES),
}


def _in_range(name: str, value: Any, low: int, high: int | None, what: str, library: str) -> None:
    span = f"{low} to {high}" if high is not None else f"{low} or more"
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"env.kwargs.{name}={value!r}: {what} takes an integer, {span}")
    if value < low or (high is not None and value > high):
        raise ConfigError(f"env.kwargs.{name}={value}: {what} takes {span} (outside it, {library} crashes the process)")


def check_openspiel_kwargs(game: str, kwargs: dict[str, Any]) -> None:
    """Refuses a parameter outside its game's :data:`OPENSPIEL_RANGES` (other games: the child-process probe)."""
    if game not in OPENSPIEL_RANGES:
        return
    what, library, ranges = OPENSPIEL_RANGES[game]
    for name, value in kwargs.items():
        if name in ranges:
            _in_range(name, value, *ranges[name], what, library)


def check_openspiel(cfg) -> None:
    """``EnvKind.check`` of ``env.kind=openspiel``."""
    check_openspiel_kwargs(cfg.scenario, {k: v for k, v in cfg.kwargs.items() if k != "group_map"})
