"""PettingZoo's game families, one table line each: where a family's games come from and what they need.

``env.kind=pettingzoo`` takes ``env.scenario`` in three forms, and :func:`locate` finds the family of
a scenario from this table alone:

* a short name (``simple_spread_v3``, ``tictactoe_v3``): the family whose ``short_names`` pattern it
  matches in full (the first such line), built by that family's ``make``;
* a PettingZoo registry id (``butterfly/knights_archers_zombies-v11``): the family whose ``namespace``
  is its first part;
* an import path (``pettingzoo.butterfly.pistonball_v6``, ``magent2.environments.battle_v4``): the
  family whose ``package`` holds the module (the longest such package).

A registry id or an import path of no family here is a game of :data:`OTHER` (nothing is known of it
but what its module says). Nothing outside this module reads the shape of a scenario or a family's
name: the adapter (:mod:`~marl_ppo.envs.pettingzoo`), the env kind's line (:mod:`~marl_ppo.envs.kinds`)
and the catalog read the facts on the family's line. A family of your own (a package of PettingZoo
games) is one ``FAMILIES.register(GameFamily(...))``. Nothing here imports torch or a game.

>>> locate("pettingzoo.butterfly.pistonball_v6").family.draws_observation
(('render_mode', 'rgb_array'),)
>>> [locate(s).family.name for s in ("simple_spread_v3", "classic/go-v5", "magent2.environments.battle_v4")]
['mpe', 'classic', 'magent2']
>>> locate("tictactoe_v3"), locate("mypackage.my_game_v1").family is OTHER
(Game(family='classic', form='short', scenario='tictactoe_v3'), True)
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from marl_ppo.table import Table

__all__ = [
    "GameFamily",
    "Game",
    "FAMILIES",
    "OTHER",
    "locate",
    "extra_for",
    "mpe_tasks",
    "classic_tasks",
    "pettingzoo_tasks",
    "short_names",
    "bounds_episodes",
    "renders",
]


def package_games(family: GameFamily) -> list[str]:
    """The modules of ``family.package`` whose names match ``family.short_names`` (``mpe2``'s tasks)."""
    package = importlib.import_module(family.package)
    return sorted(m.name for m in pkgutil.iter_modules(package.__path__) if family.takes_short_name(m.name))


def registry_games(family: GameFamily) -> list[str]:
    """The games of ``family.namespace`` in PettingZoo's AEC registry, as short names (``classic/tictactoe-v3``:
    ``tictactoe_v3``)."""
    import pettingzoo

    return sorted(f"{s.name}_v{s.version}" for s in pettingzoo.aec_registry.values() if s.namespace == family.namespace)


@dataclass(frozen=True)
class GameFamily:
    """One family of PettingZoo games (see the module docstring).

    Attributes:
        name: the family's name in the table.
        title: how messages name it (``MPE``); its ``name`` when empty.
        package: the package whose modules are its games: an import path under it is one of its games.
        namespace: PettingZoo's registry namespace of its games (``butterfly``), which is also PettingZoo's
            extra that installs what they import (``pip install 'pettingzoo[butterfly]'``).
        short_names: a regular expression its games' short names match in full (``simple\\w*``), or ``None``.
        games: ``(family) -> list[str]``: its short names, listed (``marl-ppo list``, an unknown name's error).
        make: ``"module:function"`` ``(family, game, cfg, kwargs) -> make(seed)``: one copy of the short-named
            ``game`` (imported on first use: the table loads no torch).
        turn_based: its games are turn-based (AEC) between rival seats, whose rewards sum to a constant: each
            player is its own group by default, so that each seat's return is logged (``env.kwargs.group_map``
            overrides it).
        draws_observation: constructor keywords its games need to draw the observation they give (butterfly's
            screens are drawn only with a render mode), for every copy unless ``env.kwargs`` sets them.
        bounded: ``env.max_steps`` caps its episodes (passed as ``max_cycles``); otherwise its games end on their
            own and ``env.max_steps`` caps only the evaluation's rollout.
        renders: its games draw video frames with ``render_mode="rgb_array"`` (``log.video``).
        extra: marl_ppo's extra that installs ``needs`` (``pip install 'marl-ppo[butterfly]'``).
        needs: the top-level packages its games import that ``extra`` installs.
    """

    name: str
    title: str = ""
    package: str | None = None
    namespace: str | None = None
    short_names: str | None = None
    games: Callable[[GameFamily], list[str]] | None = None
    make: str | Callable[..., Any] | None = None
    turn_based: bool = False
    draws_observation: tuple[tuple[str, Any], ...] = ()
    bounded: bool = False
    renders: bool = True
    extra: str | None = None
    needs: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        return self.title or self.name

    @property
    def group_map(self) -> str | None:
        """The default ``env.kwargs.group_map`` of its games (``None``: the wrapper's own grouping)."""
        return "one_group_per_agent" if self.turn_based else None

    def takes_short_name(self, name: str) -> bool:
        return self.short_names is not None and re.fullmatch(self.short_names, name) is not None

    def holds(self, module: str) -> bool:
        """Whether the module at import path ``module`` is one of its games (lies in its package)."""
        return self.package is not None and module.startswith(self.package + ".")

    def list_games(self) -> list[str]:
        """Its short names (none without ``games``)."""
        return [] if self.games is None else self.games(self)

    def registry_id(self, game: str) -> str:
        """A short name as PettingZoo's registry id: ``tictactoe_v3`` -> ``classic/tictactoe-v3``."""
        name, _, version = game.rpartition("_v")
        return f"{self.namespace}/{name}-v{version}"


_PZ = "marl_ppo.envs.pettingzoo"
#: any registry id or import path of no family below: nothing known but what its module says
OTHER = GameFamily("other", title="any other PettingZoo env")
FAMILIES: Table[GameFamily] = Table(
    "pettingzoo family",
    [
        GameFamily(
            "mpe",
            title="MPE",
            package="mpe2",
            short_names=r"simple\w*",
            games=package_games,
            make=f"{_PZ}:make_mpe_game",  # mpe2's parallel env: torchrl's PettingZooEnv(task=) imports pettingzoo.mpe
            bounded=True,
        ),
        GameFamily(
            "classic",
            package="pettingzoo.classic",
            namespace="classic",
            short_names=r"(?!simple)\w+_v\d+",
            games=registry_games,
            make=f"{_PZ}:make_classic_game",
            turn_based=True,
        ),
        GameFamily(
            "butterfly",
            package="pettingzoo.butterfly",
            namespace="butterfly",
            # pistonball and cooperative pong leave the screen they observe undrawn without a render mode (every
            # frame the first); knights-archers-zombies draws its own either way
            draws_observation=(("render_mode", "rgb_array"),),
            bounded=True,
            extra="butterfly",
            needs=("pymunk",),
        ),
        GameFamily("sisl", package="pettingzoo.sisl", namespace="sisl", bounded=True),
        GameFamily("atari", package="pettingzoo.atari", namespace="atari", bounded=True),
        GameFamily("magent2", title="MAgent2", package="magent2", bounded=True, extra="magent2", needs=("magent2",)),
        OTHER,
    ],
)


@dataclass(frozen=True)
class Game:
    """Where a scenario comes from: its family, the ``form`` it is written in, and the scenario itself."""

    family: GameFamily
    form: Literal["short", "registry", "path"]
    scenario: str

    def __repr__(self) -> str:
        return f"Game(family={self.family.name!r}, form={self.form!r}, scenario={self.scenario!r})"


def locate(scenario: str) -> Game:
    """The family and form of ``scenario`` (see the module docstring), from the table's lines alone."""
    if "/" in scenario:
        namespace = scenario.partition("/")[0]
        family = next((f for f in FAMILIES if f.namespace == namespace), OTHER)
        return Game(family, "registry", scenario)
    if "." in scenario:
        holders = [f for f in FAMILIES if f.holds(scenario)]
        family = max(holders, key=lambda f: len(f.package or ""), default=OTHER)
        return Game(family, "path", scenario)
    family = next((f for f in FAMILIES if f.takes_short_name(scenario)), OTHER)
    return Game(family, "short", scenario)


def extra_for(package: str) -> str | None:
    """marl_ppo's extra that installs the top-level ``package`` a family's games import, or ``None``.

    >>> extra_for("pymunk"), extra_for("numpy")
    ('butterfly', None)
    """
    return next((f.extra for f in FAMILIES if package in f.needs), None)


def short_names() -> dict[str, list[str]]:
    """Each family's short names, by its title (an unknown short name's error lists them)."""
    return {f.label: f.list_games() for f in FAMILIES if f.short_names is not None}


def pettingzoo_tasks() -> list[str]:
    """The short names ``env.kind=pettingzoo`` accepts: :func:`mpe_tasks` and :func:`classic_tasks`.

    Any other PettingZoo env is given by registry id or import path (``pettingzoo.sisl.pursuit_v5``).
    """
    return [name for names in short_names().values() for name in names]


def mpe_tasks() -> list[str]:
    """PettingZoo MPE tasks from ``mpe2`` (e.g. ``simple_spread_v3``)."""
    return FAMILIES.lookup("mpe").list_games()


def classic_tasks() -> list[str]:
    """PettingZoo classic (turn-based) games, e.g. ``tictactoe_v3``, ``connect_four_v3``.

    Named like the MPE tasks (``<name>_v<version>``), read from PettingZoo's registry
    (``classic/tictactoe-v3``). Lists every classic game, including those that need a package
    marl_ppo does not install (``chess_v6``: chess; the poker games: rlcard; ``hanabi_v5``:
    open_spiel); building one of those fails with a :class:`~marl_ppo.options.ConfigError` naming what
    is missing. ``tictactoe_v3``, ``connect_four_v3``, ``go_v5`` and ``rps_v2`` need nothing more.
    """
    return FAMILIES.lookup("classic").list_games()


def bounds_episodes(cfg) -> bool:
    """Whether ``cfg.max_steps`` caps the episodes of the game ``cfg.scenario`` names (its family's ``bounded``)."""
    return locate(cfg.scenario).family.bounded


def renders(cfg) -> bool:
    """Whether the game ``cfg.scenario`` names draws video frames (its family's ``renders``)."""
    return locate(cfg.scenario).family.renders
