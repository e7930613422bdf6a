"""Opponents: groups that act from a source instead of learning (``opponents: {group: source}``).

:mod:`~marl_ppo.opponents.sources` holds the sources' table and parses them (no torch),
:mod:`~marl_ppo.opponents.options` the pool's options, :mod:`~marl_ppo.opponents.players`
holds the players (uniform random, scripted; a frozen policy is
:func:`~marl_ppo.models.actor.seat_actor`), :mod:`~marl_ppo.opponents.outcomes` counts wins, draws
and losses from the env's own rewards. See ``docs/opponents.md``.
"""

from marl_ppo.lazy import lazy_exports, names_by_module

# module -> the public names it defines (imported on first use: the options load no torch)
_EXPORTS = names_by_module(
    {
        "marl_ppo.opponents.sources": "OpponentSource SourceKind SOURCES parse_source",
        "marl_ppo.opponents.options": "source_label",
        "marl_ppo.opponents.players": "RandomPlayer ScriptedPlayer RawObservation OpponentError PlayerContext "
        "opponent_policy",
        "marl_ppo.opponents.outcomes": "Outcomes count_outcomes",
    }
)
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
