"""Overcooked (the ``overcooked`` package, Carroll et al. 2019's gridworld): ``env.kind=overcooked``.

Two cooks share a kitchen: they carry onions to a pot, the soup cooks, one carries it in a dish to
the serving counter, and the team earns 20 per soup delivered. ``env.scenario`` is the layout
(``cramped_room``, ``asymmetric_advantages``, ``coordination_ring``, ... : every ``.layout`` file the
package ships); ``env.max_steps`` the horizon (400 in the papers), at which an episode ends as a
truncation (``env.time_limit=terminate`` makes it a termination).

Groups, one per cook: ``agent_0`` and ``agent_1`` (``env.kwargs.group_map: all_in_one_group``: one
group ``agents`` of both). Each step both act (6 moves: north, south, east, west, stay, interact; every
move is legal in every state, the ``(group, "action_mask")`` the library gives is all ``True``).
What each group gets:

* ``(g, "observation")``: ``env.kwargs.observation: featurized`` (the default), the library's
  player-centric feature vector (``featurize_state``, 96 floats for two cooks: positions, what is
  held, the closest onion, dish, soup, serving counter and pots, walls around); ``grid``, the
  lossless encoding (``lossless_state_encoding``: 26 channels of the kitchen, channels first,
  ``[26, H, W]`` float32, the last channel the "urgency" flag of the final 40 steps) for
  ``model.kind=cnn`` (with ``model.options.cnn.channel_order=chw``: a kitchen's three sides do not
  say which are channels; small kitchens want ``paddings: [1, 1]``);
* ``(g, "reward")``: the team's reward, the env's one number (the library's sparse reward: 20 per soup
  delivered, whichever cook delivers it), the same for both cooks: a group's episode reward is the
  team's score, 20 per soup, and a reward table row ``{own: 1.0}`` trains a cook on it;
* ``(g, "info", "delivered")``: 20 per soup this cook delivered (``sparse_r_by_agent``; the two add up to
  the team's reward), for a row that credits each cook with its own deliveries instead;
* ``(g, "info", "shaped_reward")``: the cook's own shaping reward (3 for an onion put in a pot, 3 for
  a dish picked up, 5 for a soup picked up; ``shaped_r_by_agent``), which no group trains on unless
  its row says so: ``{key: [agent_0, info, shaped_reward], weight: 1.0}``.

Any other ``env.kwargs`` overwrite the layout's parameters (``old_dynamics: true``: a pot starts cooking
when its third onion goes in, as in Carroll et al. 2019; ``rew_shaping_params``, ``cook_time``, ...).
The game is deterministic: seeds change nothing. Videos draw the library's own sprites.

The adapter steps the library's MDP (``OvercookedGridworld.get_state_transition``), not its envs:
``OvercookedEnv`` asks at every step for a motion planner it reads from, or pickles into, the package's
own folder, and ``Overcooked`` computes a potential with it at every step, which fails once no pot is
empty (the planner is asked for the closest of no pots). overcooked 0.2.1's ``featurize_state`` passes
``with_argmin=True`` to a planner method that dropped the keyword, and asks it for the closest of no
objects; the planner here answers both as overcooked-ai did (the cost, and ``None`` where nothing is in
reach). Layouts are read from the package's own files (the library ``eval``s them), so a name not among
them is refused first.

Needs the optional extra ``overcooked`` (``pip install 'marl-ppo[overcooked]'``).

>>> from marl_ppo.envs.options import EnvConfig
>>> env = make_overcooked(EnvConfig(kind="overcooked", scenario="cramped_room", max_steps=400, kwargs={}),
...                       seed=0, num_envs=2)
>>> env.group_map, env.reset()["agent_0", "observation"].shape
({'agent_0': ['agent_0'], 'agent_1': ['agent_1']}, torch.Size([2, 1, 96]))
"""

from __future__ import annotations

import inspect
import os
from pathlib import Path
from typing import Any

import numpy as np
from torchrl.data import Unbounded
from torchrl.envs import EnvBase

from marl_ppo.envs.options import EnvConfig
from marl_ppo.envs.seat_games import SeatGames, require, seat_group_map
from marl_ppo.envs.vmas import unknown_name
from marl_ppo.options import ConfigError, choice

__all__ = ["make_overcooked", "Overcooked", "overcooked_layouts", "OBSERVATIONS"]

OBSERVATIONS = ("featurized", "grid")
AGENTS = ("agent_0", "agent_1")
# Recipe.configure's keys, which OvercookedGridworld takes through its **kwargs
_RECIPE_KEYS = {
    "cook_time", "delivery_reward", "recipe_values", "recipe_times", "onion_value", "tomato_value",
    "onion_time", "tomato_time", "max_num_ingredients",
}  # fmt: skip


def overcooked_layouts() -> list[str]:
    """The layouts the installed package ships (its ``data/layouts/*.layout``)."""
    require("overcooked", "overcooked")
    from overcooked.static import LAYOUTS_DIR

    return sorted(p.stem for p in Path(LAYOUTS_DIR).glob("*.layout"))


class _Planner:
    """The library's motion planner, asked as overcooked-ai's ``featurize_state`` asks it: ``with_argmin``
    and the closest of no objects (``(inf, None)``), and ``None`` where no object is in reach."""

    def __init__(self, planner: Any) -> None:
        self._planner = planner

    def min_cost_to_feature(self, start: Any, features: list, with_argmin: bool = False) -> Any:
        cost, best = self._planner.min_cost_to_feature(start, features) if features else (np.inf, None)
        if cost == np.inf:
            best = None
        return (cost, best) if with_argmin else cost


class _Manager:
    """What ``featurize_state`` reads of its medium-level action manager: the motion planner."""

    def __init__(self, planner: Any) -> None:
        self.motion_planner = _Planner(planner)


_KITCHENS: dict[str, tuple[Any, Any]] = {}


def _kitchen(layout: str, params: dict[str, Any], featurized: bool) -> tuple[Any, Any]:
    """The layout's MDP (with ``params`` overwritten) and, for features, its planner; built once per process
    and shared by every copy (a planner takes 0.05-0.15 s to build)."""
    from overcooked.mdp import OvercookedGridworld
    from overcooked.planning.planners import NO_COUNTERS_PARAMS, MotionPlanner

    key = repr((layout, sorted(params.items()), featurized))
    if key not in _KITCHENS:
        try:
            mdp = OvercookedGridworld.from_layout_name(layout, **params)
        except (TypeError, ValueError, AssertionError) as err:
            raise ConfigError(f"env.kwargs for Overcooked layout {layout!r}: {err}") from None
        planner = _Manager(MotionPlanner(mdp, NO_COUNTERS_PARAMS["counter_goals"])) if featurized else None
        _KITCHENS[key] = (mdp, planner)
    return _KITCHENS[key]


def _layout_params(kwargs: dict[str, Any]) -> dict[str, Any]:
    """``env.kwargs`` that overwrite the layout's parameters, checked against what the MDP takes."""
    from overcooked.mdp import OvercookedGridworld

    taken = set(inspect.signature(OvercookedGridworld.__init__).parameters) - {"self", "kwargs"}
    taken = (taken - {"terrain", "start_player_positions", "layout_name"}) | _RECIPE_KEYS
    unknown = sorted(set(kwargs) - taken)
    if unknown:
        raise ConfigError(
            f"env.kwargs {unknown} are not Overcooked options; it takes observation ({'|'.join(OBSERVATIONS)}), "
            f"group_map, and the layout's parameters {sorted(taken)}"
        )
    return kwargs


class Overcooked(SeatGames):
    """``num_envs`` copies of one Overcooked kitchen, stepped in one loop (see the module docstring)."""

    def __init__(self, mdp: Any, planner: Any, *, num_envs: int, horizon: int, group_map: dict[str, list[str]]):
        self.mdp, self.planner, self.horizon = mdp, planner, horizon
        if mdp.num_players != len(AGENTS):
            raise ConfigError(f"Overcooked layout {mdp.layout_name!r} has {mdp.num_players} cooks; the env takes 2")
        if planner is not None:
            shape = tuple(mdp.get_featurize_state_shape())
        else:
            width, height, channels = (int(v) for v in mdp.lossless_state_encoding_shape)
            shape = (channels, height, width)
        from overcooked.mdp import Action

        self._moves = list(Action.ALL_ACTIONS)
        self._move_index = {a: k for k, a in enumerate(self._moves)}
        self.states: list[Any] = [mdp.get_standard_start_state() for _ in range(num_envs)]
        super().__init__(
            num_envs,
            AGENTS,
            group_map,
            Unbounded(shape=shape),
            len(self._moves),
            action_mask=True,
            infos=("delivered", "shaped_reward"),
        )

    @property
    def description(self) -> str:
        """How this env steps, for the run's notes."""
        what = "features" if self.planner is not None else "grids"
        return f"env: {self.batch_size[0]} copies of Overcooked {self.mdp.layout_name} ({what}) stepped in one loop"

    def _seed_copy(self, i: int, seed: int | None) -> None:
        pass  # the kitchen has no randomness

    def observe(self, state: Any) -> np.ndarray:
        """Each cook's observation of ``state``, ``[2, *shape]`` float32."""
        if self.planner is not None:
            return np.asarray(self.mdp.featurize_state(state, self.planner), dtype=np.float32)
        grid = np.asarray(self.mdp.lossless_state_encoding(state, horizon=self.horizon), dtype=np.float32)
        return grid.transpose(0, 3, 2, 1)  # [cook, x, y, channel] -> [cook, channel, y (height), x (width)]

    def _write(self, i: int, state: Any, out: dict[str, np.ndarray]) -> None:
        out["observation"][i] = self.observe(state)
        for p, moves in enumerate(self.mdp.get_actions(state)):
            legal = np.zeros(self.n_actions, bool)
            legal[[self._move_index[m] for m in moves]] = True
            out["action_mask"][i, p] = legal

    def _reset_copy(self, i: int, out: dict[str, np.ndarray]) -> None:
        self.states[i] = self.mdp.get_standard_start_state()
        self._write(i, self.states[i], out)

    def _step_copy(self, i: int, actions: np.ndarray, out: dict[str, np.ndarray]) -> None:
        state, infos = self.mdp.get_state_transition(self.states[i], [self._moves[a] for a in actions])
        self.states[i] = state
        self._write(i, state, out)
        out["delivered"][i, :, 0] = infos["sparse_reward_by_agent"]
        out["reward"][i, :, 0] = sum(infos["sparse_reward_by_agent"])  # the team's, to every cook
        out["shaped_reward"][i, :, 0] = infos["shaped_reward_by_agent"]
        terminated = bool(self.mdp.is_terminal(state))
        truncated = not terminated and state.timestep >= self.horizon
        out["terminated"][i] = terminated
        out["truncated"][i] = truncated
        out["done"][i] = terminated or truncated

    def render(self, mode: str = "rgb_array", env_index: int = 0) -> np.ndarray:
        """Copy ``env_index``'s kitchen drawn by the library's ``StateVisualizer``, ``[H, W, 3]`` uint8."""
        if mode != "rgb_array":
            raise ValueError(f"Overcooked is recorded as rgb_array frames, not {mode!r}")
        if not os.environ.get("DISPLAY") and not os.environ.get("WAYLAND_DISPLAY"):
            os.environ.setdefault("SDL_VIDEODRIVER", "dummy")  # headless: no "XDG_RUNTIME_DIR" complaint
        import pygame
        from overcooked.visualization import StateVisualizer

        state = self.states[env_index]
        surface = StateVisualizer().render_state(
            state, grid=self.mdp.terrain_mtx, hud_data=StateVisualizer.default_hud_data(state)
        )
        return np.ascontiguousarray(pygame.surfarray.array3d(surface).transpose(1, 0, 2)).astype(np.uint8)


def make_overcooked(cfg: EnvConfig, *, seed: int, num_envs: int, device=None) -> EnvBase:
    """``num_envs`` copies of the Overcooked layout ``cfg.scenario`` in one :class:`Overcooked` env, seeded."""
    layouts = overcooked_layouts()
    if cfg.scenario not in layouts:
        raise unknown_name("Overcooked layout", cfg.scenario, layouts)
    kwargs = dict(cfg.kwargs)
    observation = kwargs.pop("observation", "featurized")
    choice("env.kwargs.observation", observation, OBSERVATIONS)
    group_map = seat_group_map(AGENTS, kwargs.pop("group_map", None))
    mdp, planner = _kitchen(cfg.scenario, _layout_params(kwargs), observation == "featurized")
    env = Overcooked(mdp, planner, num_envs=num_envs, horizon=cfg.max_steps, group_map=group_map)
    env.set_seed(seed)
    return env
