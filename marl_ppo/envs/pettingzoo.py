"""PettingZoo adapter: ``env.kind=pettingzoo``, any PettingZoo env, as copies in a batched env.

``env.scenario`` is either a short name, a registry id or an import path; which game family it
belongs to, and what that family needs, is read from the family's line in
:data:`~marl_ppo.envs.families.FAMILIES`:

* MPE tasks (``simple_spread_v3``, from ``mpe2``, parallel API);
* classic turn-based games (``tictactoe_v3``, ``connect_four_v3``, from ``pettingzoo.classic``,
  AEC API): each player is its own group by default (a turn-based family's seats are rivals);
  ``env.kwargs.group_map: all_in_one_group`` puts both players in one group ``agents`` with one
  shared policy (self-play);
* a PettingZoo registry id (``butterfly/knights_archers_zombies-v11``, ``sisl/pursuit-v5``; parallel
  API where the registry has it), with the same options as an import path below;
* an import path to any module with ``parallel_env`` (preferred) or ``env`` (AEC):
  ``pettingzoo.butterfly.knights_archers_zombies_v11``, ``pettingzoo.sisl.pursuit_v5``, a
  package of your own. ``env.kwargs`` go to that constructor, and ``env.max_steps`` as
  ``max_cycles`` (unless ``env.kwargs`` sets it or the constructor does not take it). Agents are
  grouped by name prefix (``archer_0``, ``archer_1`` -> group ``archer``) in a parallel env and one
  group per agent in an AEC env; ``env.kwargs.group_map`` (``one_group_per_agent`` or
  ``all_in_one_group``) overrides that.

The copies run in one loop where it can reproduce torchrl's data: a turn-based game in
:class:`~marl_ppo.envs.aec_games.AecGames`, a parallel one in
:class:`~marl_ppo.envs.parallel_games.ParallelGames` (each steps the copies' games and gives the
same data as a ``SerialEnv`` of them, faster); otherwise in a ``SerialEnv`` (``env.parallel=true``:
a ``ParallelEnv``). Every env is wrapped with torchrl's
``PettingZooWrapper(use_mask=True)``: ``(group, "mask")`` is ``False`` for an agent that is not
acting (AEC: not its turn; parallel: it has left the episode, e.g. a Knights-Archers-Zombies
archer eaten by a zombie). Those steps are padding: the router gives
them no advantage and the losses skip them. A parallel env given by import path runs until every
agent is done (a dead agent does not end the episode for the others). ``(group, "action_mask")``,
where the env gives one, is fed to the policy's masked categorical. Observations that are not one
float vector per agent are flattened (:class:`~marl_ppo.envs.transforms.FlatObservation`), except
images, kept for the ``cnn`` model kind and resized, grayed and stacked as ``env.image`` says
(:mod:`~marl_ppo.envs.images`), in each copy before the batch stores them. An episode cut at
``max_cycles`` comes out of the wrapper as a truncation (``(group, "truncated")`` and root
``truncated`` ``True``, ``terminated`` ``False``), which ``env.time_limit=truncate`` keeps and
``terminate`` turns into a termination (:mod:`~marl_ppo.envs.time_limit`).
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import importlib
import pkgutil
import warnings
from collections.abc import Iterator
from functools import partial
from typing import Any, Callable

from torchrl.envs import Compose, EnvBase, ParallelEnv, TransformedEnv

from marl_ppo.envs.families import (
    GameFamily,
    classic_tasks,
    extra_for,
    locate,
    mpe_tasks,
    pettingzoo_tasks,
    short_names,
)
from marl_ppo.envs.images import observation_transforms
from marl_ppo.envs.one_loop import in_one_loop
from marl_ppo.envs.options import EnvConfig, ImageOptions
from marl_ppo.envs.pz_construct import accepts_max_cycles, check_kwargs, construct
from marl_ppo.envs.serial import SerialEnvKeepingThreads
from marl_ppo.envs.vmas import unknown_name
from marl_ppo.envs.workers import workers_ignore_stop_signals
from marl_ppo.options import ConfigError
from marl_ppo.table import resolve

__all__ = [
    "make_pettingzoo",
    "make_mpe_game",
    "make_classic_game",
    "mpe_tasks",
    "classic_tasks",
    "pettingzoo_tasks",
    "raw_observation_specs",
    "wrap_game",
]

_GROUP_MAPS = ("one_group_per_agent", "all_in_one_group")


def make_pettingzoo(cfg: EnvConfig, *, seed: int, num_envs: int, device=None, lean: bool = True) -> EnvBase:
    """``num_envs`` copies of the PettingZoo env ``cfg`` names, in a ``SerialEnv`` or ``ParallelEnv``.

    With ``lean`` (the default) and ``env.parallel=false``, the copies are stepped in one loop where
    :func:`~marl_ppo.envs.one_loop.in_one_loop` can: the same data, collected faster (docs/performance.md).
    """
    make = copy_factory(cfg)
    if lean and not cfg.parallel:
        env = in_one_loop(make, seed=seed, num_envs=num_envs)
        if env is not None:
            return env
    if cfg.parallel:
        # a worker's failure is a traceback from another process: build one copy here first
        make(seed).close()
    fns = [partial(make, seed + i) for i in range(num_envs)]
    env = (ParallelEnv if cfg.parallel else SerialEnvKeepingThreads)(num_envs, fns)
    with workers_ignore_stop_signals():  # Ctrl-C/SIGTERM are the main process's to handle
        env.set_seed(seed)  # starts a ParallelEnv's worker processes
    return env


def raw_observation_specs(cfg: EnvConfig) -> dict[str, Any]:
    """Each group's observation spec as the game gives it, before :class:`FlatObservation` (one probe copy):
    ``[n_agents, *shape]`` (tic-tac-toe: ``int8`` ``[1, 3, 3, 2]``), a discrete one ``Categorical`` ``[n_agents]``."""
    probe = copy_factory(cfg)(0)
    try:
        base = probe.base_env if isinstance(probe, TransformedEnv) else probe
        spec = base.full_observation_spec
        out = {}
        for g in base.group_map:
            leaf = spec[g, "observation"]
            out[g] = leaf["observation"] if hasattr(leaf, "keys") else leaf
        return out
    finally:
        probe.close()


def copy_factory(cfg: EnvConfig) -> Callable[[int], EnvBase]:
    """``make(seed) -> EnvBase``: one wrapped copy of the env, checked where it can be here."""
    game = locate(cfg.scenario)
    family = game.family
    kwargs = {**observation_kwargs(cfg.scenario), **cfg.kwargs}
    if game.form == "short":
        if family.make is None or cfg.scenario not in family.list_games():
            listing = short_names()
            known = [name for names in listing.values() for name in names]
            err = unknown_name("PettingZoo task", cfg.scenario, known, listing)
            raise ConfigError(f"{err}; any other PettingZoo env by import path, e.g. pettingzoo.sisl.pursuit_v5")
        return resolve(family.make)(family, cfg.scenario, cfg, kwargs)
    group_map_name = _pop_group_map(kwargs, default=family.group_map)
    if game.form == "registry":
        _registry_spec(cfg.scenario)
        return partial(_registry_env, cfg.scenario, group_map_name, cfg.max_steps, kwargs, cfg.image)
    module = _import_env_module(cfg.scenario)
    return partial(_module_env, module.__name__, group_map_name, cfg.max_steps, kwargs, cfg.image)


def make_mpe_game(family: GameFamily, task: str, cfg: EnvConfig, kwargs: dict[str, Any]) -> Callable[[int], EnvBase]:
    """One copy of an MPE task, a module of ``family.package`` (``mpe2``) built here: torchrl's
    ``PettingZooEnv(task=...)`` imports the removed ``pettingzoo.mpe``. ``env.max_steps`` is its ``max_cycles``."""
    return partial(_mpe_env, f"{family.package}.{task}", task, cfg.max_steps, cfg.continuous_actions, kwargs)


def make_classic_game(
    family: GameFamily, task: str, cfg: EnvConfig, kwargs: dict[str, Any]
) -> Callable[[int], EnvBase]:
    """One copy of a classic game, ``pettingzoo.make("aec", <registry id>)``, its module imported here first."""
    group_map_name = _pop_group_map(kwargs, default=family.group_map)
    env_id = family.registry_id(task)
    _check_classic_imports(task, env_id)
    return partial(_classic_env, task, env_id, group_map_name, kwargs, cfg.image)


def observation_kwargs(scenario: str) -> dict[str, Any]:
    """What the game ``scenario`` needs in its constructor to produce its observation (its family's
    ``draws_observation``: a butterfly game's ``render_mode="rgb_array"``), or ``{}``.

    >>> observation_kwargs("pettingzoo.butterfly.pistonball_v6"), observation_kwargs("simple_spread_v3")
    ({'render_mode': 'rgb_array'}, {})
    """
    return dict(locate(scenario).family.draws_observation)


def _pop_group_map(kwargs: dict[str, Any], default: str | None) -> str | None:
    name = kwargs.pop("group_map", default)
    if name is not None and name not in _GROUP_MAPS:
        raise ConfigError(f"env.kwargs.group_map must be one of {list(_GROUP_MAPS)}, got {name!r}")
    return name


@functools.cache
def _wrapper_class(seeds_in_31_bits: bool = True) -> type:
    """torchrl's ``PettingZooWrapper``, faster (a parallel game: :class:`~marl_ppo.envs.lean_step.LeanParallelStep`),
    and (``seeds_in_31_bits``) seeding the game within 31 bits; made on first use (torchrl is imported lazily)."""
    from torchrl.envs.libs.pettingzoo import PettingZooWrapper

    from marl_ppo.envs.lean_step import LeanParallelStep

    class _Faster(LeanParallelStep, PettingZooWrapper):
        # The wrapper reads these of the PettingZoo env several times a step, and EnvBase.__getattr__
        # finds them there only after two nn.Module.__dir__ calls each: 20 % of a tic-tac-toe run's
        # time. The same values, read directly.
        @property
        def agents(self) -> list:
            return self._env.agents

        @property
        def agent_selection(self) -> Any:
            return self._env.agent_selection

        @property
        def possible_agents(self) -> list:
            return self._env.possible_agents

    class _Wrapper(_Faster):
        def _set_seed(self, seed: int | None) -> None:
            # torchrl chains a batched env's seeds through 32 bits; the game gets them within 31, the
            # range every engine takes (OpenSpiel's hanabi refuses a seed >= 2**31 with a pybind cast error)
            super()._set_seed(None if seed is None else seed % 2**31)

    return _Wrapper if seeds_in_31_bits else _Faster


def wrap_game(
    game: Any, group_map_name: str | None, seed: int, image: ImageOptions | None = None, **options: Any
) -> EnvBase:
    """A PettingZoo game (AEC or parallel) in torchrl's wrapper, masks on, observations flattened where needed
    and images kept and changed as ``image`` (``env.image``) says."""
    from torchrl.envs.utils import MarlGroupMapType

    with _quiet_version_notice():
        env = _wrapper_class()(
            game,
            use_mask=True,  # compulsory for AEC envs; in parallel ones it masks agents that have left
            group_map=None if group_map_name is None else MarlGroupMapType[group_map_name.upper()],
            seed=seed % 2**31,
            categorical_actions=True,
            **options,
        )
    # in each copy, so that a batched env (its shared buffers, its resets) sees one layout
    transforms = observation_transforms(env, image or ImageOptions())
    if not transforms:
        return env
    return TransformedEnv(env, transforms[0] if len(transforms) == 1 else Compose(*transforms))


def _mpe_env(path: str, task: str, max_steps: int, continuous: bool, kwargs: dict, seed: int) -> EnvBase:
    module = importlib.import_module(path)
    check_kwargs(task, getattr(module, "raw_env", None), kwargs)
    with _quiet_version_notice():
        return _wrapper_class(seeds_in_31_bits=False)(
            module.parallel_env(max_cycles=max_steps, continuous_actions=continuous, **kwargs),
            use_mask=True,
            seed=seed,
            categorical_actions=True,
        )


@contextlib.contextmanager
def _quiet_version_notice() -> Iterator[None]:
    """torchrl warns on every wrapper that it was tested with PettingZoo 1.24.3; we pin and test 1.27."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="PettingZoo in TorchRL is tested", category=UserWarning)
        yield


def _missing_dependency(task: str, err: BaseException) -> ConfigError:
    return ConfigError(
        f"PettingZoo classic task {task!r} needs a package that is not installed ({err}); "
        "tictactoe_v3, connect_four_v3, go_v5 and rps_v2 need nothing more"
    )


def _check_classic_imports(task: str, env_id: str) -> None:
    """Imports the game's module, so that a missing dependency fails here and not in a worker."""
    import pettingzoo

    module = pettingzoo.aec_registry[env_id].entry_point.partition(":")[0]
    try:
        importlib.import_module(module)
    except ImportError as err:
        raise _missing_dependency(task, err) from err


def _classic_env(task: str, env_id: str, group_map_name: str, kwargs: dict, image: ImageOptions, seed: int) -> EnvBase:
    """One classic game, AEC API, wrapped so that non-acting agents are masked out."""
    import pettingzoo

    make = partial(pettingzoo.make, "aec", env_id)  # turn-based: no max_cycles/continuous_actions
    try:
        own = pettingzoo.aec_registry[env_id].entry_point.partition(":")[0]
        game = construct(make, kwargs, 0, False, f"PettingZoo classic task {task!r}", task, own)
    except ConfigError as err:
        if isinstance(err.__cause__, ImportError):  # e.g. hanabi_v5 imports, then asks for open_spiel
            raise _missing_dependency(task, err.__cause__) from err.__cause__
        raise
    return wrap_game(game, group_map_name, seed, image)


def _import_env_module(path: str):
    """The module at ``path``, which must have ``parallel_env`` or ``env``; a ConfigError saying what is wrong."""
    try:
        module = importlib.import_module(path)
    except ModuleNotFoundError as err:
        parent, _, leaf = path.rpartition(".")
        hint = ""
        if err.name == path and parent:
            try:
                siblings = [m.name for m in pkgutil.iter_modules(importlib.import_module(parent).__path__)]
            except (ImportError, AttributeError):
                siblings = []
            close = difflib.get_close_matches(leaf, siblings, n=3)
            hint = f"; {parent} has {close}" if close else ""
        extra = ""
        top = (err.name or "").partition(".")[0]
        if extra_for(top) is not None:  # a package a family needs, which an extra of marl_ppo installs
            extra = f" ({top!r} is not installed: pip install 'marl-ppo[{extra_for(top)}]')"
        elif err.name != path and not path.startswith(f"{err.name}."):  # the module is there; what it imports is not
            namespace = locate(path).family.namespace  # also PettingZoo's extra for the family
            how = (
                f"pip install 'pettingzoo[{namespace}]'"
                if namespace
                else f"install the package that provides {err.name}"
            )
            extra = f" (the module imports {err.name!r}, which is not installed: {how})"
        raise ConfigError(f"env.scenario {path!r}: cannot import {err.name!r}{extra}{hint}") from err
    except ImportError as err:
        raise ConfigError(f"env.scenario {path!r}: importing it failed: {err}") from err
    if not (callable(getattr(module, "parallel_env", None)) or callable(getattr(module, "env", None))):
        raise ConfigError(
            f"env.scenario {path!r}: module {module.__name__} has neither parallel_env nor env; expected a "
            "PettingZoo env module (e.g. pettingzoo.sisl.pursuit_v5)"
        )
    return module


def _module_env(
    path: str, group_map_name: str | None, max_steps: int, kwargs: dict, image: ImageOptions, seed: int
) -> EnvBase:
    """One copy of the env of module ``path``: parallel API if it has one, else AEC."""
    module = importlib.import_module(path)
    parallel = callable(getattr(module, "parallel_env", None))
    ctor = module.parallel_env if parallel else module.env
    where = f"env.scenario {path!r}: {path}.{'parallel_env' if parallel else 'env'}(**env.kwargs)"
    game = construct(ctor, kwargs, max_steps, accepts_max_cycles(module), where, path, path)
    # parallel: run until every agent is done, so that an agent leaving early does not end the others' episode
    return wrap_game(game, group_map_name, seed, image, **({"done_on_any": False} if parallel else {}))


def _registry_spec(env_id: str):
    """PettingZoo's registry entry for ``env_id`` (parallel if it has one), its module importable."""
    import pettingzoo

    spec = pettingzoo.parallel_registry.get(env_id) or pettingzoo.aec_registry.get(env_id)
    if spec is None:
        known = sorted(set(pettingzoo.parallel_registry) | set(pettingzoo.aec_registry))
        raise unknown_name("PettingZoo registry id", env_id, known)
    module = spec.entry_point.partition(":")[0]
    try:
        importlib.import_module(module)
    except ImportError as err:
        raise ConfigError(
            f"env.scenario {env_id!r}: its module {module} imports {getattr(err, 'name', None) or err}, which is "
            f"not installed: pip install 'pettingzoo[{spec.namespace}]'"
        ) from err
    return spec


def _registry_env(
    env_id: str, group_map_name: str | None, max_steps: int, kwargs: dict, image: ImageOptions, seed: int
) -> EnvBase:
    """One copy of a registered env (``butterfly/knights_archers_zombies-v11``), parallel API if it has one."""
    import pettingzoo

    spec = _registry_spec(env_id)
    parallel = env_id in pettingzoo.parallel_registry
    takes_max_cycles = spec.max_cycles is not None or accepts_max_cycles(
        importlib.import_module(spec.entry_point.partition(":")[0])
    )
    make = partial(pettingzoo.make, "parallel" if parallel else "aec", env_id)
    where = f"pettingzoo.make({env_id!r}, **env.kwargs)"
    game = construct(make, kwargs, max_steps, takes_max_cycles, where, env_id, spec.entry_point.partition(":")[0])
    return wrap_game(game, group_map_name, seed, image, **({"done_on_any": False} if parallel else {}))
