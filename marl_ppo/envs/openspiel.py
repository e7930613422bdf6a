"""OpenSpiel games (``pyspiel``): ``env.kind=openspiel``, Hanabi and any other game by name.

``env.scenario`` is the game's short name (``hanabi``, ``tiny_hanabi``, ``kuhn_poker``, ``goofspiel``,
... : ``pyspiel.registered_names()``), ``env.kwargs`` its parameters (Hanabi: ``players``, ``colors``,
``ranks``, ``hand_size``, ``max_information_tokens``, ``max_life_tokens``, ...), except
``group_map``, which is ours: each player is its own group by default (``player_0``, ``player_1``,
...), ``all_in_one_group`` puts them all in one group ``agents`` (one shared policy).

Per group, as for PettingZoo's turn-based games (``aec_games``):

* ``(g, "observation")``: the player's ``observation_tensor`` (its ``information_state_tensor`` in a game
  without one), flattened to float32 (Hanabi 2 players: 658; Hanabi-Small: 171);
* ``(g, "action_mask")``: the legal moves of a player to act (``legal_actions``), all ``True`` for the others;
* ``(g, "mask")``: ``True`` for the player to act only (every player at a simultaneous node), so each
  group's loss counts its own moves;
* ``(g, "reward")``: what the step changed the player's ``returns()`` by. Hanabi gives every player the
  same reward, the change of the shared score (``-score`` when the last life token goes: the game ends
  at 0), so a player's episode reward is the team's final score, and the rewards of a partner's move
  reach a player who did not act (the advantages carry them to its own last move);
* done, terminated per group and at the root when the game is over; no truncation (games end on their
  own: ``env.max_steps`` only bounds an evaluation's rollout, give it the game's ``max_game_length``).

Chance nodes (Hanabi's deals and draws) are sampled between the players' moves by each copy's own
generator, ``numpy.random.default_rng`` of the copy's seed (torchrl's chain, as ``SerialEnv`` seeds its
copies), by ``rng.choice(outcomes, p=probabilities)``. Simultaneous-move games (``goofspiel``) take
every player's action at once; mean-field games are refused.

torchrl's ``OpenSpielWrapper`` does not fit this layout: it writes ``returns()`` (the sum so far) as each
step's reward, so an episode's rewards add up the score once per step; its legal moves are a mask on the
action spec, not an entry a policy reads, with no entry for whose turn it is; one game per env
(``OpenSpielEnv(parameters=...)`` fails on open_spiel 2.0.2's ``load_game``).

Needs the optional extra ``openspiel`` (``pip install 'marl-ppo[openspiel]'``).

>>> from marl_ppo.envs.options import EnvConfig
>>> small = {"colors": 2, "ranks": 5, "hand_size": 2, "max_information_tokens": 3, "max_life_tokens": 1}
>>> env = make_openspiel(EnvConfig(kind="openspiel", scenario="hanabi", kwargs=small), seed=0, num_envs=2)
>>> td = env.reset()
>>> td["player_0", "observation"].shape, td["player_0", "mask"].flatten().tolist()
(torch.Size([2, 1, 171]), [True, True])
"""

from __future__ import annotations

import functools
import json
import math
import signal
import subprocess
import sys
from typing import Any

import numpy as np
from torchrl.data import Unbounded
from torchrl.envs import EnvBase

from marl_ppo.envs.options import EnvConfig
from marl_ppo.envs.seat_games import SeatGames, require, seat_group_map
from marl_ppo.envs.vmas import unknown_name
from marl_ppo.options import ConfigError

__all__ = ["make_openspiel", "OpenSpielGames", "load_game", "openspiel_games"]


def openspiel_games() -> list[str]:
    """Every game the installed ``pyspiel`` registers, by short name."""
    require("pyspiel", "openspiel")
    import pyspiel

    return sorted(pyspiel.registered_names())


# played in a child process before this one loads the game: a C++ REQUIRE aborts, a bad pointer segfaults
_PROBE = """
import json, sys
import numpy as np
import pyspiel
game = pyspiel.load_game(sys.argv[1], json.loads(sys.argv[2]))
rng = np.random.default_rng(0)
for _ in range(2):
    state, moves = game.new_initial_state(), 0
    while not state.is_terminal() and moves < 100:
        if state.is_chance_node():
            outcomes, probabilities = zip(*state.chance_outcomes())
            state.apply_action(int(rng.choice(outcomes, p=probabilities)))
            continue
        players = range(game.num_players()) if state.is_simultaneous_node() else [state.current_player()]
        for p in players:
            state.observation_tensor(p) if game.get_type().provides_observation_tensor else None
        if state.is_simultaneous_node():
            state.apply_actions([int(rng.choice(state.legal_actions(p))) for p in players])
        else:
            state.apply_action(int(rng.choice(state.legal_actions())))
        moves += 1
"""


@functools.lru_cache(maxsize=None)
def _native_failure(name: str, parameters: str) -> str | None:
    """How the game ``name`` with ``parameters`` (JSON) dies in a child process that loads it and plays two games
    of random legal moves (a native abort or segfault, with the library's last words), or ``None``. Written by
    hand: nothing in pyspiel reports a C++ ``REQUIRE`` as a Python exception."""
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _PROBE, name, parameters], capture_output=True, text=True, timeout=300
        )
    except subprocess.TimeoutExpired:
        return None  # slow, not dead: the game itself will say what it does
    if proc.returncode >= 0:
        return None  # ran, or raised a Python error that loading it here reports in its own words
    why = signal.Signals(-proc.returncode).name if -proc.returncode in signal.valid_signals() else proc.returncode
    said = [ln.strip() for ln in proc.stderr.splitlines() if ln.strip() and not ln.startswith(("Fatal", "  "))]
    words = said[-1] if said else "no message"
    if " in " in words and "failed at " in words:  # "... failed at /path/file.cc:33 in Fn: condition"
        words = f"{words.split(' at ')[0]} ({words.rsplit('/', 1)[-1]})"
    return f"the library crashed the process ({why}): {words}"


def load_game(name: str, parameters: dict[str, Any]) -> Any:
    """``pyspiel.load_game(name, parameters)``; a one-line :class:`ConfigError` for an unknown game or parameter,
    and for one that crashes the library (found in a child process first: :func:`_native_failure`)."""
    games = openspiel_games()
    if name not in games:
        raise unknown_name("OpenSpiel game", name, games)
    import pyspiel

    crash = _native_failure(name, json.dumps(parameters, sort_keys=True))
    if crash is not None:
        raise ConfigError(f"env.kwargs for OpenSpiel game {name!r} ({parameters}): {crash}")

    try:
        game = pyspiel.load_game(name, parameters)
    except (pyspiel.SpielError, TypeError, RuntimeError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ConfigError(f"env.kwargs for OpenSpiel game {name!r} ({parameters}): {first}") from None
    kind = game.get_type()
    if kind.dynamics == pyspiel.GameType.Dynamics.MEAN_FIELD:
        raise ConfigError(f"OpenSpiel game {name!r} is a mean-field game, which has no players to train")
    if not (kind.provides_observation_tensor or kind.provides_information_state_tensor):
        raise ConfigError(f"OpenSpiel game {name!r} gives no observation or information-state tensor to learn from")
    return game


class OpenSpielGames(SeatGames):
    """``num_envs`` states of the pyspiel ``game``, stepped in one loop (see the module docstring)."""

    def __init__(self, game: Any, *, num_envs: int, group_map_name: str | None = None) -> None:
        import pyspiel

        self.game = game
        kind = game.get_type()
        self._simultaneous = kind.dynamics == pyspiel.GameType.Dynamics.SIMULTANEOUS
        self._use_observation = kind.provides_observation_tensor
        shape = game.observation_tensor_shape() if self._use_observation else game.information_state_tensor_shape()
        self.obs_size = int(math.prod(shape))
        agents = [f"player_{p}" for p in range(game.num_players())]
        self.states: list[Any] = [game.new_initial_state() for _ in range(num_envs)]
        self.rngs = [np.random.default_rng() for _ in range(num_envs)]
        super().__init__(
            num_envs,
            agents,
            seat_group_map(agents, group_map_name),
            Unbounded(shape=(self.obs_size,)),
            game.num_distinct_actions(),
            action_mask=True,
            turns=True,
        )

    @property
    def description(self) -> str:
        """How this env steps, for the run's notes."""
        return f"env: {self.batch_size[0]} copies of OpenSpiel {self.game} stepped in one loop"

    def _seed_copy(self, i: int, seed: int | None) -> None:
        self.rngs[i] = np.random.default_rng(seed)

    def _chance(self, i: int) -> None:
        """Samples copy ``i``'s chance nodes until a player is to act or the game is over."""
        state, rng = self.states[i], self.rngs[i]
        while state.is_chance_node():
            outcomes, probabilities = zip(*state.chance_outcomes())
            state.apply_action(int(rng.choice(outcomes, p=probabilities)))

    def _write(self, i: int, out: dict[str, np.ndarray]) -> None:
        state = self.states[i]
        players = range(len(self.agents))
        for p in players:
            tensor = state.observation_tensor(p) if self._use_observation else state.information_state_tensor(p)
            out["observation"][i, p] = tensor
        if state.is_terminal():
            out["terminated"][i] = out["done"][i] = True
            return
        acting = players if state.is_simultaneous_node() else [state.current_player()]
        for p in acting:
            legal = np.zeros(self.n_actions, bool)
            legal[state.legal_actions(p)] = True
            out["action_mask"][i, p] = legal
            out["mask"][i, p] = True

    def _reset_copy(self, i: int, out: dict[str, np.ndarray]) -> None:
        self.states[i] = self.game.new_initial_state()
        self._chance(i)
        self._write(i, out)

    def _step_copy(self, i: int, actions: np.ndarray, out: dict[str, np.ndarray]) -> None:
        state = self.states[i]
        before = np.asarray(state.returns(), np.float32)
        if state.is_simultaneous_node():
            moves = {p: int(a) for p, a in enumerate(actions)}
        else:
            moves = {state.current_player(): int(actions[state.current_player()])}
        for p, move in moves.items():
            if move not in state.legal_actions(p):  # pyspiel's own error names neither copy nor player
                raise ValueError(
                    f"copy {i}: {self.agents[p]} played {move}, not a legal move of {state.legal_actions(p)} "
                    f"(sample from (group, 'action_mask'))"
                )
        if state.is_simultaneous_node():
            state.apply_actions(list(moves.values()))
        else:
            state.apply_action(moves[state.current_player()])
        self._chance(i)
        out["reward"][i, :, 0] = np.asarray(state.returns(), np.float32) - before
        self._write(i, out)


def make_openspiel(cfg: EnvConfig, *, seed: int, num_envs: int, device=None) -> EnvBase:
    """``num_envs`` copies of the OpenSpiel game ``cfg.scenario`` (parameters ``cfg.kwargs``), seeded."""
    parameters = dict(cfg.kwargs)
    group_map_name = parameters.pop("group_map", None)
    seat_group_map(["player_0"], group_map_name)  # a bad name fails before the game is loaded
    env = OpenSpielGames(load_game(cfg.scenario, parameters), num_envs=num_envs, group_map_name=group_map_name)
    env.set_seed(seed)
    return env
