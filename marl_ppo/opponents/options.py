"""The opponent options as the config names them: ``opponents: {group: SOURCE}`` and ``pool`` (no torch here).

A source's forms and what a run does with it are the lines of
:data:`~marl_ppo.opponents.sources.SOURCES` (:func:`parse_source` reads them); :class:`PoolConfig`
holds the snapshot pools' options, and :func:`sequential_refusal` says why a sequential update
mode cannot train beside some sources.

>>> parse_source("opponents.player_2", "checkpoint:runs/ttt:player_1")
OpponentSource(kind='checkpoint', target='runs/ttt', group='player_1')
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from marl_ppo.opponents.sources import OpponentSource, parse_source
from marl_ppo.options import ConfigError, at_least

__all__ = ["OpponentSource", "PoolConfig", "parse_source", "source_label", "sequential_refusal"]

SEATINGS = ("independent", "learner")


@dataclass
class PoolConfig:
    """Snapshot pools, for the groups whose source is ``pool`` (``docs/opponents.md``).

    Attributes:
        every: a snapshot of the source group's policy every K iterations (and one at the start).
        size: at most this many snapshots; past it the oldest is dropped.
        latest_share: the share of episodes (drawn per env copy) against the latest policy, which
            train the seat as ``self`` does; the others are against a snapshot drawn uniformly.
        payoff_episodes: at the end of a run with a symmetric pool (``pool:GROUP``), every pair of its
            snapshots, the latest policy and ``log.eval_opponents`` plays this many episodes in each
            seating: ``plots/payoff.png``, ``payoff.json`` and Elo ratings (0: not played).
        fixed: sources that stay in the pool beside the snapshots (``random``, ``module:callable``,
            ``checkpoint:RUN_DIR[:GROUP]``): players a policy trained only against itself never meets.
        fixed_share: the share of episodes against one of ``fixed``, drawn uniformly among them.
        draw: ``uniform`` (every snapshot alike) or ``rating`` (snapshot ``k`` weighted by its Elo chance of
            beating the latest policy: the hardest most often).
        drop: past ``size``, drop the ``oldest`` snapshot or the ``lowest``-rated one (the newest excepted).
        seating: where several seats pool one group's networks (``player_1: pool``, ``player_2:
            pool:player_1``): ``independent`` (each seat draws on its own, so some episodes have no seat
            on the latest policy and train nothing) or ``learner`` (in each episode one of those seats,
            drawn uniformly, plays the latest policy; the others draw as ``latest_share`` and
            ``fixed_share`` say).
    """

    every: int = 5
    size: int = 10
    latest_share: float = 0.5
    payoff_episodes: int = 0
    fixed: list[str] = field(default_factory=list)
    fixed_share: float = 0.0
    draw: str = "uniform"
    drop: str = "oldest"
    seating: str = "independent"

    def __post_init__(self) -> None:
        choices = (("draw", ("uniform", "rating")), ("drop", ("oldest", "lowest")), ("seating", SEATINGS))
        for key, allowed in choices:
            if getattr(self, key) not in allowed:
                raise ConfigError(f"pool.{key} must be one of {list(allowed)}, got {getattr(self, key)!r}")
        at_least("pool.every", self.every, 1)
        at_least("pool.size", self.size, 1)
        at_least("pool.payoff_episodes", self.payoff_episodes, 0, " (0: no payoff matrix)")
        for key in ("latest_share", "fixed_share"):
            if not 0.0 <= getattr(self, key) <= 1.0:
                raise ConfigError(f"pool.{key} must be in [0, 1], got {getattr(self, key)!r}")
        if self.latest_share + self.fixed_share > 1.0:
            raise ConfigError(
                f"pool.latest_share + pool.fixed_share must be at most 1 (the rest are snapshots), got "
                f"{self.latest_share!r} + {self.fixed_share!r}"
            )
        for i, text in enumerate(self.fixed):
            if not parse_source(f"pool.fixed[{i}]", text).plays:
                raise ConfigError(
                    f"pool.fixed[{i}]: {text!r} is not a fixed player; pool.fixed takes random, "
                    "module:callable or checkpoint:RUN_DIR[:GROUP]"
                )
        if bool(self.fixed) != (self.fixed_share > 0):
            raise ConfigError(
                "pool.fixed and pool.fixed_share go together: "
                + (
                    f"pool.fixed={self.fixed} would never be drawn with pool.fixed_share=0"
                    if self.fixed
                    else f"pool.fixed_share={self.fixed_share} needs players in pool.fixed"
                )
            )


def source_label(text: str) -> str:
    """A metric-name-safe label of a source: ``random``, ``checkpoint_runs_ttt``, ``my_bots_greedy``."""
    label = re.sub(r"[^\w]+", "_", text.strip()).strip("_")
    return label or "opponent"


def sequential_refusal(opponents: Mapping[str, str], pool: PoolConfig) -> str | None:
    """Why a sequential update mode (HAPPO: one unit's pass after another) cannot train beside these
    ``opponents``, or ``None``. Frozen seats (``random``, scripted, ``checkpoint:``, a ``pool`` seat's
    snapshots) train nothing and are never a unit; a seat that trains another group's networks from
    its own loss would have them updated by two units' passes, each unaware of the other's step.

    >>> sequential_refusal({"player_2": "pool:player_1"}, PoolConfig(latest_share=0.0)) is None
    True
    >>> sequential_refusal({"player_2": "self"}, PoolConfig())
    "['player_2'] train another group's networks from their own loss (opponents.player_2=self): the shared ..."
    """
    sources = {g: parse_source(f"opponents.{g}", text) for g, text in opponents.items()}
    sharing = {g: source for g, source in sources.items() if source.shares_networks(g)}
    selfs = [g for g, source in sharing.items() if not source.pool]
    if selfs:
        given = ", ".join(f"opponents.{g}={opponents[g]}" for g in selfs)
        return (
            f"{selfs} train another group's networks from their own loss ({given}): the shared module would be "
            "updated by two units' passes; use loss.algorithm=mappo, or pool:GROUP with pool.latest_share=0 "
            "(the seat then plays frozen snapshots only)"
        )
    for g, source in sharing.items():  # pool seats on another group's networks
        if pool.latest_share > 0:
            return (
                f"opponents.{g}={opponents[g]} plays {source.group}'s latest policy in pool.latest_share="
                f"{pool.latest_share} of its episodes, whose steps would train {source.group}'s networks in a "
                "second unit's pass; set pool.latest_share=0 (the seat then plays frozen snapshots and pool.fixed "
                "players only) or use loss.algorithm=mappo"
            )
        owner = sources.get(source.group)
        if owner is not None and owner.pool:
            return (
                f"opponents.{g}={opponents[g]} needs pool.latest_share=0, with which {source.group} "
                f"(opponents.{source.group}={opponents[source.group]}) would never play its latest policy and "
                f"nothing would train; give {source.group} no opponent source"
            )
    return None
