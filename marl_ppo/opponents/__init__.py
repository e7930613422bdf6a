"""Opponents: groups that act from a source instead of learning (``opponents: {group: source}``).

:mod:`~marl_ppo.opponents.sources` holds the sources' table and parses them (no torch),
:mod:`~marl_ppo.opponents.options` the pool's options, :mod:`~marl_ppo.opponents.players`
holds the players (uniform random, scripted; a frozen policy is
:func:`~marl_ppo.models.actor.seat_actor`), :mod:`~marl_ppo.opponents.outcomes` counts wins, draws
and losses from the env's own rewards. See ``docs/opponents.md``.
"""

from marl_ppo.lazy import lazy_exports

# public name -> module that defines it (imported on first use: the options load no torch)
_EXPORTS = {
    "OpponentSource": "marl_ppo.opponents.sources",
    "SourceKind": "marl_ppo.opponents.sources",
    "SOURCES": "marl_ppo.opponents.sources",
    "parse_source": "marl_ppo.opponents.sources",
    "source_label": "marl_ppo.opponents.options",
    "RandomPlayer": "marl_ppo.opponents.players",
    "ScriptedPlayer": "marl_ppo.opponents.players",
    "RawObservation": "marl_ppo.opponents.players",
    "OpponentError": "marl_ppo.opponents.players",
    "PlayerContext": "marl_ppo.opponents.players",
    "opponent_policy": "marl_ppo.opponents.players",
    "Outcomes": "marl_ppo.opponents.outcomes",
    "count_outcomes": "marl_ppo.opponents.outcomes",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
