"""Opponent sources, one table line each: how a source is written and what a run does with it (no torch here).

``opponents: {group: SOURCE}`` gives a group a source: it acts but does not learn (``self`` and
``pool`` excepted: they learn). The lines of :data:`SOURCES`:

* ``random``: uniform over the legal actions (the env's action mask where it gives one);
* ``self`` or ``self:GROUP``: the group plays with the networks of a training group whose specs
  are identical (by default the first such group), and its own steps train them too: symmetric
  self-play, each seat on its own reward and done keys;
* ``pool``: the group trains its own networks, but each env copy draws per episode whether it plays
  them (the latest policy: those steps train) or a frozen snapshot of its own past policy
  (:class:`~marl_ppo.opponents.options.PoolConfig`): the other groups face a pool of its past selves
  (simple_tag's ``agent``);
* ``pool:GROUP``: as ``self:GROUP`` (the group plays with ``GROUP``'s networks), with the pool of
  ``GROUP``'s snapshots: symmetric self-play against past selves (tic-tac-toe's ``player_2``);
* ``checkpoint:RUN_DIR`` or ``checkpoint:RUN_DIR:GROUP``: the policy of another run's group (by
  default the group of the same name), frozen, from that run's ``last.pt``;
* ``package.module:callable`` or ``path/to/file.py:callable``: a scripted player,
  ``act(observation, action_mask) -> action`` for one agent of one env (see ``docs/opponents.md``).

A source's text starts with its line's name (``pool:GROUP``), except a line that is not ``named``
(``callable``), which takes any text no named line took. What the run asks of a source (does it
learn, whose networks does it play, is it a pool, what its target names, how its player is made) is
read from its line: nothing branches on a source's name. A source of your own is one
``SOURCES.register(SourceKind(...))``.

>>> parse_source("opponents.player_2", "checkpoint:runs/ttt:player_1")
OpponentSource(kind='checkpoint', target='runs/ttt', group='player_1')
>>> parse_source("opponents.player_2", "pool:player_1").shares_networks("player_2")
True
>>> parse_source("opponents.player_2", "randm")
Traceback (most recent call last):
...
marl_ppo.options.ConfigError: opponents.player_2: unknown opponent source 'randm' (did you mean 'random'?); ...
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from marl_ppo.options import ConfigError
from marl_ppo.table import Table

__all__ = ["OpponentSource", "SourceKind", "SOURCES", "parse_source", "source_forms"]

_GROUP = re.compile(r"^[A-Za-z_][\w-]*$")
_PLAYERS = "marl_ppo.opponents.players"  # the players' module (torch), imported when a player is made


@dataclass(frozen=True)
class OpponentSource:
    """One parsed source: ``kind`` (its line's name) and what it names (``target``: a run directory or a
    callable's path; ``group``: a group of the env)."""

    kind: str
    target: str | None = None
    group: str | None = None

    @property
    def row(self) -> SourceKind:
        """The source's line in :data:`SOURCES`."""
        return SOURCES.lookup(self.kind)

    @property
    def learns(self) -> bool:
        """Whether the group's steps train a network (``self``; ``pool`` in its episodes against the latest)."""
        return self.row.learns

    @property
    def pool(self) -> bool:
        """Whether the group plays snapshots of a training group's past policy (``pool``, ``pool:GROUP``)."""
        return self.row.pool

    @property
    def plays(self) -> bool:
        """Whether the source is a player of its own (an opponent to play), not a way to train."""
        return self.row.player is not None

    def shares_networks(self, group: str) -> bool:
        """Whether ``group`` with this source plays with another training group's networks (``self``,
        ``pool:OTHER``; ``pool`` plays its own)."""
        return self.learns and (not self.row.own_networks or self.group not in (None, group))


def _bare(key: str, name: str, text: str) -> OpponentSource | None:
    """``NAME`` alone."""
    return OpponentSource(name) if text == name else None


def _training_group(key: str, name: str, text: str) -> OpponentSource | None:
    """``NAME`` or ``NAME:GROUP`` (a training group)."""
    group = text.partition(":")[2]
    if text != name and not group:
        return None
    if group and not _GROUP.match(group):
        raise ConfigError(f"{key}: '{name}:GROUP' names a training group, got {text!r}")
    return OpponentSource(name, group=group or None)


def _run_dir(key: str, name: str, text: str) -> OpponentSource | None:
    """``NAME:RUN_DIR`` or ``NAME:RUN_DIR:GROUP`` (a run directory may hold colons; a group may not hold ``/``)."""
    if text == name:
        return None
    rest = text.partition(":")[2]
    run_dir, sep, group = rest.rpartition(":")
    if not sep or not _GROUP.match(group) or "/" in group:
        run_dir, group = rest, None
    if not run_dir:
        raise ConfigError(f"{key}: '{name}:RUN_DIR[:GROUP]' needs a run directory, got {text!r}")
    return OpponentSource(name, target=run_dir, group=group)


def _callable_path(key: str, name: str, text: str) -> OpponentSource | None:
    """``package.module:callable`` or ``path/to/file.py:callable``."""
    target, sep, attr = text.rpartition(":")
    return OpponentSource(name, target=text) if sep and target and attr else None


@dataclass(frozen=True)
class SourceKind:
    """One kind of opponent source (see the module docstring).

    Attributes:
        name: the line's name, which a ``named`` source's text starts with.
        forms: how it is written, for messages (``pool``, ``pool:GROUP``).
        parse: ``(key, name, text) -> OpponentSource | None``: the parsed source, ``None`` for a text not of
            its form, a ConfigError naming ``key`` for a text of its form that is wrong.
        named: its text starts with ``name`` (``random``, ``pool:GROUP``); ``False``: it takes any text that no
            named line takes (``module:callable``).
        learns: the group's steps train a network: the group is trained by the router.
        own_networks: a learning group trains its own networks unless its ``:GROUP`` names another group's
            (``pool``); ``False``: it always plays a training group's networks (``self``).
        pool: the group plays snapshots of a training group's past policy (``pool.*`` options); as an
            evaluation opponent, it plays the run's pool.
        names_run: ``target`` is another run's directory: made absolute in the recorded config and copied into
            the new run (pinned: :mod:`~marl_ppo.run.pinned`).
        names_callable: ``target`` is a callable's path: its file made absolute in the recorded config.
        player: ``"module:function"`` (or the function) ``(source, context) -> player``
            (:class:`~marl_ppo.opponents.players.PlayerContext`): the module that plays the group; ``None``: a
            way to train, not an opponent to play.
    """

    name: str
    forms: tuple[str, ...]
    parse: Callable[[str, str, str], OpponentSource | None]
    named: bool = True
    learns: bool = False
    own_networks: bool = True
    pool: bool = False
    names_run: bool = False
    names_callable: bool = False
    player: str | Callable[..., Any] | None = None


SOURCES: Table[SourceKind] = Table(
    "opponent source",
    [
        SourceKind("random", ("random",), _bare, player=f"{_PLAYERS}:random_player"),
        SourceKind("self", ("self", "self:GROUP"), _training_group, learns=True, own_networks=False),
        SourceKind("pool", ("pool", "pool:GROUP"), _training_group, learns=True, pool=True),
        SourceKind(
            "checkpoint",
            ("checkpoint:RUN_DIR[:GROUP]",),
            _run_dir,
            names_run=True,
            player=f"{_PLAYERS}:run_player",
        ),
        SourceKind(
            "callable",
            ("package.module:callable", "path/to/file.py:callable"),
            _callable_path,
            named=False,
            names_callable=True,
            player=f"{_PLAYERS}:scripted_player",
        ),
    ],
)


def source_forms() -> str:
    """Every line's forms, for messages.

    >>> source_forms().split(", ")[-2:]
    ['checkpoint:RUN_DIR[:GROUP]', 'package.module:callable or path/to/file.py:callable']
    """
    forms = [form for row in SOURCES for form in row.forms]
    return f"{', '.join(forms[:-1])} or {forms[-1]}" if len(forms) > 1 else forms[0]


def parse_source(key: str, text: str) -> OpponentSource:
    """Parses one source; a :class:`ConfigError` naming ``key``, the text and the forms otherwise."""
    if not isinstance(text, str) or not text.strip():
        raise ConfigError(f"{key} must be an opponent source ({source_forms()}), got {text!r}")
    text = text.strip()
    head = text.partition(":")[0]
    named = [SOURCES.lookup(head)] if head in SOURCES and SOURCES.lookup(head).named else []
    for row in named + [row for row in SOURCES if not row.named]:
        source = row.parse(key, row.name, text)
        if source is not None:
            return source
    # a named line's bare name where it is a form, else its name and a colon ("checkpoint:")
    starts = [row.name if row.name in row.forms else f"{row.name}:" for row in SOURCES if row.named]
    close = difflib.get_close_matches(text, starts, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise ConfigError(f"{key}: unknown opponent source {text!r}{hint}; the sources are {source_forms()}")
