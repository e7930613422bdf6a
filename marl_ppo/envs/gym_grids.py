"""Level-Based Foraging and the multi-robot warehouse: ``env.kind=lbf`` and ``env.kind=rware``.

Both libraries (``lbforaging`` 2.0, ``rware`` 2.0) register gymnasium envs with one action, observation
and reward per agent in a tuple, and one ``done`` for the whole team. :class:`GridGames` steps
``num_envs`` copies of one task in one loop and writes them as torchrl's multi-agent layout: one group
``agents`` (``agent_0``, ``agent_1``, ...) with ``(agents, observation)`` ``float32`` ``[n, agents, obs]``
(flattened, as the library computes it), ``(agents, action)`` a categorical ``[n, agents]``, and
``(agents, reward)`` ``[n, agents, 1]``, each agent's own reward; ``done``, ``terminated`` and
``truncated`` ``[n, 1]`` at the root, for the team.

``env.scenario`` is the task: the gymnasium id without its library's prefix and version
(``8x8-2p-2f-coop`` for ``Foraging-8x8-2p-2f-coop-v3``, ``2s-10x10-3p-3f`` with a sight of 2,
``tiny-2ag`` for ``rware-tiny-2ag-v2``), or the gymnasium id itself. ``env.max_steps`` is the
episode's length (LBF's ``max_episode_steps``, RWARE's ``max_steps``); ``env.kwargs`` go to the env's
constructor over the registered ones (LBF ``penalty: 0.1``; RWARE ``reward_type: global``, by name).

How an episode ends: LBF's ends when the last food is eaten (``terminated``) or at the step limit
with food left (``truncated``, as torchrl's ``LBForagingWrapper`` reports it); RWARE's tasks go on
until the step limit (or ``max_inactivity_steps``), always a ``truncated``.
``env.time_limit=terminate`` folds the truncations into terminations.

Seeds: ``set_seed(seed)`` gives copy ``i`` its own seed drawn from ``numpy``'s ``SeedSequence([seed, i])``,
used at the copy's next reset (as torchrl's LBF wrapper keeps its seed for the next reset); later
episodes go on from the copy's own generator.

Videos: the libraries draw with pyglet (OpenGL). Without a ``DISPLAY``, pyglet is put in headless mode
(EGL: a GPU, or Mesa's software renderer) before its first window.

Needs the optional extra ``lbf`` (``pip install 'marl-ppo[lbf]'``) or ``rware`` (``'marl-ppo[rware]'``).

>>> from marl_ppo.envs.options import EnvConfig
>>> env = make_lbf(EnvConfig(kind="lbf", scenario="8x8-2p-2f-coop", max_steps=50, kwargs={}), seed=0, num_envs=3)
>>> env.group_map, env.reset()["agents", "observation"].shape
({'agents': ['agent_0', 'agent_1']}, torch.Size([3, 2, 12]))
>>> env.close()
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase
from torchrl.data import Categorical, Composite, Unbounded
from torchrl.envs import EnvBase

from marl_ppo import options
from marl_ppo.envs.options import EnvConfig
from marl_ppo.options import ConfigError

__all__ = ["GridLibrary", "LIBRARIES", "GridGames", "make_lbf", "make_rware", "library_tasks", "gym_id"]


def _lbf_ending(game: Any) -> tuple[bool, bool]:
    """(terminated, truncated) of an LBF episode that is over: every food eaten, or food left at the step limit."""
    eaten = not game.field.any()
    return eaten, not eaten


def _rware_ending(game: Any) -> tuple[bool, bool]:
    return False, True  # a warehouse's requests never run out: only the step (or inactivity) limit ends it


def _rware_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    """RWARE's enum options given by name (``reward_type: global``, ``observation_type: flattened``)."""
    from rware.warehouse import ObservationType, RewardType

    out = dict(kwargs)
    for key, enum in (("reward_type", RewardType), ("observation_type", ObservationType)):
        value = out.get(key)
        if isinstance(value, str):
            try:
                out[key] = enum[value.upper()]
            except KeyError:
                names = [m.name.lower() for m in enum]
                raise ConfigError(f"env.kwargs.{key} must be one of {names}, got {value!r}") from None
    return out


@dataclass(frozen=True)
class GridLibrary:
    """One gymnasium library of multi-agent grid tasks (see the module docstring).

    Attributes:
        kind: the env kind (``env.kind``) and the name of marl_ppo's extra that installs the library.
        title: how messages name it.
        package: the module to import (it registers the tasks with gymnasium).
        id_pattern: a regular expression of its registered ids; its group 1 is the short name (``env.scenario``).
        steps_kwarg: the constructor's keyword for the episode's step limit (``env.max_steps``).
        shapes: the short names' pattern, for the error of an unknown name.
        examples: short names shown in that error.
        ending: ``(game) -> (terminated, truncated)`` of an episode the game says is over.
        kwargs: ``(env.kwargs) -> constructor keywords``.
    """

    kind: str
    title: str
    package: str
    id_pattern: str
    steps_kwarg: str
    shapes: str
    examples: tuple[str, ...]
    ending: Callable[[Any], tuple[bool, bool]]
    kwargs: Callable[[dict[str, Any]], dict[str, Any]] = field(default=dict)

    def check_installed(self) -> None:
        """A :class:`ConfigError` naming the extra when the library is not installed here."""
        if not options.installed(self.package):  # looked up here, so that a test can stand in for it
            raise ConfigError(
                f"env.kind: {self.kind} needs the {self.package!r} package, which is not installed here: "
                f"pip install 'marl-ppo[{self.kind}]'"
            )


LIBRARIES = {
    "lbf": GridLibrary(
        "lbf",
        "Level-Based Foraging",
        "lbforaging",
        r"Foraging-((?!grid).+)-v3",
        "max_episode_steps",
        "[2s-]<size>x<size>-<players>p-<food>f[-coop] (size 5..19, players 2..9, food 1..4; 2s: sight 2)",
        ("8x8-2p-2f-coop", "10x10-3p-3f", "2s-8x8-2p-2f-coop", "15x15-4p-5f"),
        _lbf_ending,
    ),
    "rware": GridLibrary(
        "rware",
        "RWARE",
        "rware",
        r"rware-((?:tiny|small|medium|large)-\d+ag(?:-easy|-hard)?)-v2",
        "max_steps",
        "<size>-<agents>ag[-easy|-hard] (size tiny, small, medium, large; agents 1..19)",
        ("tiny-2ag", "tiny-4ag", "small-4ag", "medium-6ag-hard"),
        _rware_ending,
        _rware_kwargs,
    ),
}


def library_tasks(library: GridLibrary) -> dict[str, str]:
    """The library's registered tasks, ``{short name: gymnasium id}``, read from gymnasium's registry."""
    import gymnasium

    library.check_installed()
    __import__(library.package)
    pattern = re.compile(library.id_pattern)
    return {m.group(1): env_id for env_id in sorted(gymnasium.registry) if (m := pattern.fullmatch(env_id))}


def lbf_tasks() -> list[str]:
    """LBF's scenario names (``env.scenario``), from gymnasium's registry."""
    return list(library_tasks(LIBRARIES["lbf"]))


def rware_tasks() -> list[str]:
    """RWARE's scenario names (``env.scenario``), from gymnasium's registry."""
    return list(library_tasks(LIBRARIES["rware"]))


def gym_id(library: GridLibrary, scenario: str) -> str:
    """The gymnasium id ``scenario`` names (a short name or the id); a one-line :class:`ConfigError` for any other."""
    tasks = library_tasks(library)
    if scenario in tasks:
        return tasks[scenario]
    if scenario in tasks.values():
        return scenario
    close = difflib.get_close_matches(scenario, list(tasks), n=3)
    hint = f"; did you mean {close}?" if close else ""
    raise ConfigError(
        f"{library.title} has no task {scenario!r}{hint} (env.scenario: one of its {len(tasks)} tasks "
        f"{library.shapes}, e.g. {', '.join(library.examples)}; or the gymnasium id, e.g. {tasks[library.examples[0]]})"
    )


def make_game(library: GridLibrary, env_id: str, cfg: EnvConfig) -> Any:
    """One game of the task ``env_id`` (a gymnasium id): the library's env class, built from the registered
    keywords, ``env.kwargs`` over them and ``env.max_steps`` (not through ``gymnasium.make``, whose own
    ``max_episode_steps`` would add a ``TimeLimit`` instead of setting LBF's)."""
    import gymnasium
    from gymnasium.envs.registration import load_env_creator

    spec = gymnasium.spec(env_id)
    if library.steps_kwarg in cfg.kwargs:
        raise ConfigError(
            f"env.kwargs.{library.steps_kwarg} is env.max_steps: set env.max_steps={cfg.kwargs[library.steps_kwarg]}"
        )
    kwargs = {**spec.kwargs, **library.kwargs(dict(cfg.kwargs)), library.steps_kwarg: cfg.max_steps}
    try:
        game = load_env_creator(spec.entry_point)(**kwargs)
    except TypeError as err:
        raise ConfigError(f"env.kwargs for {library.title} {cfg.scenario!r}: {err}") from None
    for name, space in (("action", game.action_space[0]), ("observation", game.observation_space[0])):
        wanted = gymnasium.spaces.Discrete if name == "action" else gymnasium.spaces.Box
        if not isinstance(space, wanted):
            raise ConfigError(
                f"{library.title} {cfg.scenario!r} with env.kwargs {dict(cfg.kwargs)}: each agent's {name} space is "
                f"{space}; env.kind={library.kind} takes a {wanted.__name__} {name}"
            )
    return game


def _headless_pyglet() -> None:
    """pyglet in headless mode (EGL) where no display is set, before its first window; kept otherwise."""
    import sys

    if not os.environ.get("DISPLAY") and "pyglet.window" not in sys.modules:
        import pyglet

        pyglet.options["headless"] = True


def _copy_seeds(seed: int | None, n: int) -> list[int | None]:
    if seed is None:
        return [None] * n
    return [int(np.random.SeedSequence([seed, i]).generate_state(1)[0]) for i in range(n)]


class GridGames(EnvBase):
    """``games`` (copies of one task of ``library``) as one env of batch ``[len(games)]`` (module docstring)."""

    def __init__(self, library: GridLibrary, games: list[Any], name: str) -> None:
        super().__init__(device="cpu", batch_size=[len(games)])
        self.library, self.games, self.name = library, games, name
        n, agents = len(games), len(games[0].action_space)
        self.n_agents = agents
        self.group_map = {"agents": [f"agent_{i}" for i in range(agents)]}
        obs_dim = int(np.prod(games[0].observation_space[0].shape))
        actions = int(games[0].action_space[0].n)
        self._pending: list[int | None] = [None] * n
        group = (n, agents)
        self.full_observation_spec = Composite(
            agents=Composite(observation=Unbounded((*group, obs_dim), dtype=torch.float32), shape=group), shape=(n,)
        )
        self.full_action_spec = Composite(
            agents=Composite(action=Categorical(actions, group, dtype=torch.int64), shape=group), shape=(n,)
        )
        self.full_reward_spec = Composite(
            agents=Composite(reward=Unbounded((*group, 1), dtype=torch.float32), shape=group), shape=(n,)
        )
        self.full_done_spec = Composite(
            {k: Categorical(2, (n, 1), dtype=torch.bool) for k in ("done", "terminated", "truncated")}, shape=(n,)
        )

    @property
    def description(self) -> str:
        """How this env steps, for the run's notes."""
        return f"env: {len(self.games)} copies of {self.library.title} {self.name} stepped by GridGames (one loop)"

    def _set_seed(self, seed: int | None) -> None:
        self._pending = _copy_seeds(seed, len(self.games))

    def _rows_to_reset(self, tensordict: TensorDictBase | None) -> list[int]:
        flags = None if tensordict is None else tensordict.get("_reset", None)
        if flags is None:
            return list(range(len(self.games)))
        return flags.reshape(len(self.games)).cpu().nonzero().flatten().tolist()

    def _observations(self, obs: tuple) -> np.ndarray:
        return np.stack(obs).reshape(self.n_agents, -1)

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs: Any) -> TensorDictBase:
        n = len(self.games)
        observation = np.zeros((n, *self.full_observation_spec["agents", "observation"].shape[1:]), np.float32)
        for i in self._rows_to_reset(tensordict):
            obs, _ = self.games[i].reset(seed=self._pending[i])
            self._pending[i] = None
            observation[i] = self._observations(obs)
        # rows not reset stay zero: EnvBase.reset keeps the input's values there
        flags = {key: np.zeros((n, 1), bool) for key in ("done", "terminated", "truncated")}
        return self._batch(observation, None, flags)

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        n = len(self.games)
        actions = tensordict.get(("agents", "action")).cpu().numpy()
        observation = np.zeros((n, *self.full_observation_spec["agents", "observation"].shape[1:]), np.float32)
        reward = np.zeros((n, self.n_agents, 1), np.float32)
        terminated, truncated = np.zeros((n, 1), bool), np.zeros((n, 1), bool)
        for i, game in enumerate(self.games):
            obs, rewards, done, cut, _ = game.step(actions[i].tolist())
            observation[i] = self._observations(obs)
            reward[i, :, 0] = rewards
            if done or cut:
                terminated[i], truncated[i] = self.library.ending(game) if done else (False, True)
        flags = {"done": terminated | truncated, "terminated": terminated, "truncated": truncated}
        return self._batch(observation, reward, flags)

    def _batch(
        self, observation: np.ndarray, reward: np.ndarray | None, flags: dict[str, np.ndarray]
    ) -> TensorDictBase:
        group = {"observation": torch.from_numpy(observation)}
        if reward is not None:
            group["reward"] = torch.from_numpy(reward)
        n = len(self.games)
        data = {"agents": TensorDict(group, batch_size=[n, self.n_agents])}
        batch = TensorDict({**data, **{k: torch.from_numpy(v) for k, v in flags.items()}}, batch_size=[n])
        return batch if self.device == torch.device("cpu") else batch.to(self.device)

    def render(self, mode: str = "rgb_array", env_index: int = 0) -> np.ndarray:
        """Copy ``env_index``'s frame, ``uint8`` ``[H, W, 3]``, drawn by the library (pyglet)."""
        if mode != "rgb_array":
            raise ValueError(f"{self.library.title} games are recorded as rgb_array frames, not {mode!r}")
        _headless_pyglet()
        try:
            frame = self.games[env_index].render(mode="rgb_array")
        except Exception as err:  # pyglet's NoSuchDisplayException, an EGL or OpenGL error
            raise RuntimeError(
                f"{self.library.title} draws its frames with pyglet (OpenGL) and could not: {type(err).__name__}: "
                f"{err}. Set DISPLAY (a display, or Xvfb) or run where EGL works (a GPU, or Mesa's libEGL)"
            ) from err
        return np.array(frame, dtype=np.uint8)  # a copy: the library's array views pyglet's buffer

    def close(self, *, raise_if_closed: bool = True) -> None:
        for game in self.games:
            game.close()
        super().close(raise_if_closed=raise_if_closed)


def _make(kind: str, cfg: EnvConfig, seed: int, num_envs: int) -> GridGames:
    library = LIBRARIES[kind]
    library.check_installed()
    if cfg.parallel:
        raise ConfigError(
            f"env.parallel=true: env.kind={kind} steps its copies in one loop here; use env.parallel=false"
        )
    env_id = gym_id(library, cfg.scenario)
    games = [make_game(library, env_id, cfg) for _ in range(num_envs)]
    env = GridGames(library, games, cfg.scenario)
    env.set_seed(seed)
    return env


def make_lbf(cfg: EnvConfig, *, seed: int, num_envs: int, device=None) -> GridGames:
    """``num_envs`` copies of the Level-Based Foraging task ``cfg.scenario``, seeded with ``seed``."""
    return _make("lbf", cfg, seed, num_envs)


def make_rware(cfg: EnvConfig, *, seed: int, num_envs: int, device=None) -> GridGames:
    """``num_envs`` copies of the RWARE task ``cfg.scenario``, seeded with ``seed``."""
    return _make("rware", cfg, seed, num_envs)
