"""Opponent sources as the config names them: ``opponents: {group: SOURCE}`` (no torch here).

A group with a source acts but does not learn (``self`` excepted: it learns, with another seat's
networks). The forms:

* ``random``: uniform over the legal actions (the env's action mask where it gives one);
* ``self`` or ``self:GROUP``: the group plays with the networks of a training group whose specs
  are identical (by default the first such group), and its own steps train them too: symmetric
  self-play, each seat on its own reward and done keys;
* ``pool``: the group trains its own networks, but each env copy draws per episode whether it plays
  them (the latest policy: those steps train) or a frozen snapshot of its own past policy
  (:class:`PoolConfig`): the other groups face a pool of its past selves (simple_tag's ``agent``);
* ``pool:GROUP``: as ``self:GROUP`` (the group plays with ``GROUP``'s networks), with the pool of
  ``GROUP``'s snapshots: symmetric self-play against past selves (tic-tac-toe's ``player_2``);
* ``checkpoint:RUN_DIR`` or ``checkpoint:RUN_DIR:GROUP``: the policy of another run's group (by
  default the group of the same name), frozen, from that run's ``last.pt``;
* ``package.module:callable`` or ``path/to/file.py:callable``: a scripted player,
  ``act(observation, action_mask) -> action`` for one agent of one env (see ``docs/opponents.md``).

>>> parse_source("opponents.player_2", "checkpoint:runs/ttt:player_1")
OpponentSource(kind='checkpoint', target='runs/ttt', group='player_1')
>>> parse_source("opponents.player_2", "randm")
Traceback (most recent call last):
...
marl_ppo.options.ConfigError: opponents.player_2: unknown opponent source 'randm' (did you mean 'random'?); ...
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from marl_ppo.options import ConfigError, at_least

__all__ = ["OpponentSource", "PoolConfig", "parse_source", "FORMS", "source_label", "sequential_refusal"]

FORMS = (
    "random, self, self:GROUP, pool, pool:GROUP, checkpoint:RUN_DIR[:GROUP], package.module:callable or "
    "path/to/file.py:callable"
)
_GROUP = re.compile(r"^[A-Za-z_][\w-]*$")
SEATINGS = ("independent", "learner")


@dataclass(frozen=True)
class OpponentSource:
    """One parsed source: ``kind`` and what it names (``target``: a run directory or a callable's path)."""

    kind: Literal["random", "self", "pool", "checkpoint", "callable"]
    target: str | None = None
    group: str | None = None

    @property
    def learns(self) -> bool:
        """Whether the group's steps train a network (``self``; ``pool`` in its episodes against the latest)."""
        return self.kind in ("self", "pool")


def parse_source(key: str, text: str) -> OpponentSource:
    """Parses one source; a :class:`ConfigError` naming ``key``, the text and the forms otherwise."""
    if not isinstance(text, str) or not text.strip():
        raise ConfigError(f"{key} must be an opponent source ({FORMS}), got {text!r}")
    text = text.strip()
    if text == "random":
        return OpponentSource("random")
    kind, _, group = text.partition(":")
    if kind in ("self", "pool") and (text == kind or group):
        if group and not _GROUP.match(group):
            raise ConfigError(f"{key}: '{kind}:GROUP' names a training group, got {text!r}")
        return OpponentSource(kind, group=group or None)
    if text.startswith("checkpoint:"):
        rest = text.partition(":")[2]
        run_dir, sep, group = rest.rpartition(":")
        if not sep or not _GROUP.match(group) or "/" in group:
            run_dir, group = rest, None
        if not run_dir:
            raise ConfigError(f"{key}: 'checkpoint:RUN_DIR[:GROUP]' needs a run directory, got {text!r}")
        return OpponentSource("checkpoint", target=run_dir, group=group)
    target, sep, name = text.rpartition(":")
    if sep and target and name:
        return OpponentSource("callable", target=text)
    close = difflib.get_close_matches(text, ["random", "self", "pool", "checkpoint:"], n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise ConfigError(f"{key}: unknown opponent source {text!r}{hint}; the sources are {FORMS}")


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
            if parse_source(f"pool.fixed[{i}]", text).learns:
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
    selfs = [g for g, source in sources.items() if source.kind == "self"]
    if selfs:
        given = ", ".join(f"opponents.{g}={opponents[g]}" for g in selfs)
        return (
            f"{selfs} train another group's networks from their own loss ({given}): the shared module would be "
            "updated by two units' passes; use loss.algorithm=mappo, or pool:GROUP with pool.latest_share=0 "
            "(the seat then plays frozen snapshots only)"
        )
    for g, source in sources.items():
        if source.kind != "pool" or source.group in (None, g):
            continue
        if pool.latest_share > 0:
            return (
                f"opponents.{g}={opponents[g]} plays {source.group}'s latest policy in pool.latest_share="
                f"{pool.latest_share} of its episodes, whose steps would train {source.group}'s networks in a "
                "second unit's pass; set pool.latest_share=0 (the seat then plays frozen snapshots and pool.fixed "
                "players only) or use loss.algorithm=mappo"
            )
        owner = sources.get(source.group)
        if owner is not None and owner.kind == "pool":
            return (
                f"opponents.{g}={opponents[g]} needs pool.latest_share=0, with which {source.group} "
                f"(opponents.{source.group}={opponents[source.group]}) would never play its latest policy and "
                f"nothing would train; give {source.group} no opponent source"
            )
    return None
