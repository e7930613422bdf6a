"""Custom envs: ``env.kind=custom`` with ``env.factory``, or ``Trainer(cfg, env_fn=...)``.

A factory is any callable returning a torchrl multi-agent env (an ``EnvBase`` with a
``group_map``, batched or not), named in the config as ``"package.module:callable"`` or
``"path/to/file.py:callable"``. It gets ``env.kwargs``, plus those of ``num_envs``, ``device``,
``seed`` and ``max_steps`` that its signature names (a ``**kwargs`` catch-all gets none of them):

>>> def make(n_agents: int, num_envs: int, seed: int):  # no device, no max_steps
...     ...
>>> factory_arguments(make, {"n_agents": 2}, num_envs=4, device="cpu", seed=0, max_steps=10)
{'n_agents': 2, 'num_envs': 4, 'seed': 0}
>>> load_factory("marl_ppo.envs.toy:no_such_thing")
Traceback (most recent call last):
...
marl_ppo.options.ConfigError: env.factory 'marl_ppo.envs.toy:no_such_thing': module marl_ppo.envs.toy has...
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import importlib.util
import inspect
import os
import sys
import warnings
from pathlib import Path
from typing import Any, Callable

import torch
from torchrl.envs import EnvBase

from marl_ppo.envs.kinds import env_kind
from marl_ppo.envs.options import EnvConfig
from marl_ppo.groups.specs import GroupSpecError, read_group_specs
from marl_ppo.options import ConfigError

__all__ = [
    "recorded_env",
    "EnvFactory",
    "load_factory",
    "factory_arguments",
    "make_custom",
    "factory_path",
    "absolute_factory",
    "SYSTEM_ARGUMENTS",
]

EnvFactory = Callable[..., EnvBase]
SYSTEM_ARGUMENTS = ("num_envs", "device", "seed", "max_steps")


def load_factory(spec: str, what: str = "env.factory") -> EnvFactory:
    """The callable that ``"package.module:callable"`` or ``"path/to/file.py:callable"`` names; errors name
    it as ``what`` (the config key that gave it)."""
    target, sep, name = spec.rpartition(":")
    if not sep or not target or not name or (len(target) == 1 and target.isalpha()):  # "C:\env.py"
        raise ConfigError(f"{what} {spec!r}: expected 'package.module:callable' or 'path/to/file.py:callable'")
    module = _import_file(spec, target, what) if target.endswith(".py") else _import_module(spec, target, what)
    obj: Any = module
    for part in name.split("."):
        if not hasattr(obj, part):
            public = sorted(n for n in dir(module) if not n.startswith("_") and callable(getattr(module, n)))
            raise ConfigError(
                f"{what} {spec!r}: module {module.__name__} has no attribute {name!r}; its callables are {public}"
            )
        obj = getattr(obj, part)
    if not callable(obj):
        raise ConfigError(f"{what} {spec!r}: {name} is a {type(obj).__name__}, not a callable")
    return obj


def _import_module(spec: str, module_name: str, what: str):
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        cwd = os.getcwd()
        if err.name == module_name.partition(".")[0] and cwd not in sys.path and "" not in sys.path:
            sys.path.insert(0, cwd)  # as `python -m` would: a module next to the user's config
            try:
                return importlib.import_module(module_name)
            except ModuleNotFoundError:
                sys.path.remove(cwd)
        raise ConfigError(
            f"{what} {spec!r}: cannot import module {module_name!r} (no module named {err.name!r}). "
            "Make it importable (pip install -e your package, or PYTHONPATH=its parent folder; "
            f"sys.path is {sys.path[:4]}...), or name the file: 'path/to/file.py:callable'"
        ) from err
    except Exception as err:
        raise ConfigError(
            f"{what} {spec!r}: importing module {module_name!r} raised {type(err).__name__}: {err}"
        ) from err


def _import_file(spec: str, file_name: str, what: str):
    path = Path(file_name).expanduser().resolve()
    if not path.is_file():
        raise ConfigError(f"{what} {spec!r}: no file {str(path)!r} (relative paths start at {os.getcwd()})")
    module_name = f"marl_ppo_factory_{path.stem}_{hashlib.sha1(str(path).encode()).hexdigest()[:8]}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    module_spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[module_name] = module  # before running it: dataclasses and pickling look it up
    try:
        module_spec.loader.exec_module(module)
    except Exception as err:
        del sys.modules[module_name]
        raise ConfigError(f"{what} {spec!r}: running {path} raised {type(err).__name__}: {err}") from err
    return module


def factory_path(fn: EnvFactory) -> str | None:
    """How a config names ``fn`` (``"module:qualname"`` or ``"/abs/file.py:qualname"``), if it can.

    ``None`` for a lambda, a closure, or a function defined in a notebook: those cannot be found
    again from a run directory.
    """
    qualname = getattr(fn, "__qualname__", None)
    module_name = getattr(fn, "__module__", None)
    if not qualname or not module_name or "<" in qualname:
        return None
    module = sys.modules.get(module_name)
    if module is None:  # e.g. code run with exec: no module to import it from again
        return None
    file = getattr(module, "__file__", None)
    if module_name == "__main__" or module_name.startswith("marl_ppo_factory_"):
        return f"{Path(file).resolve()}:{qualname}" if file else None
    return f"{module_name}:{qualname}"


def factory_arguments(fn: EnvFactory, kwargs: dict[str, Any], **system: Any) -> dict[str, Any]:
    """``kwargs`` plus the ``system`` arguments (num_envs, device, seed, max_steps) ``fn`` names."""
    name = getattr(fn, "__name__", repr(fn))
    # a class (an EnvBase subclass): its __init__'s parameters; torchrl's env metaclass makes
    # inspect.signature(cls) read (*args, **kwargs), which would pass none of the system arguments
    target = fn.__init__ if inspect.isclass(fn) else fn
    try:
        params = dict(inspect.signature(target).parameters)
        if inspect.isclass(fn):
            params.pop("self", None)
    except (TypeError, ValueError):  # a builtin or C callable: pass what the config says
        return dict(kwargs)
    named = {n for n, p in params.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    clash = sorted(set(kwargs) & set(SYSTEM_ARGUMENTS))
    if clash:
        raise ConfigError(
            f"env.kwargs sets {clash}: those come from the config (env.num_envs, env.device, train.seed, "
            "env.max_steps); set them there"
        )
    takes_any = any(p.kind is p.VAR_KEYWORD for p in params.values())
    unknown = sorted(set(kwargs) - named)
    if unknown and not takes_any:
        raise ConfigError(f"env.kwargs {unknown} are not parameters of the factory {name}{inspect.signature(target)}")
    return {**kwargs, **{k: v for k, v in system.items() if k in named}}


def make_custom(
    cfg: EnvConfig,
    *,
    seed: int,
    num_envs: int,
    device: str | torch.device | None = None,
    env_fn: EnvFactory | None = None,
) -> EnvBase:
    """The env ``env_fn`` (or the factory ``cfg.factory`` names) returns, checked to be a multi-agent env."""
    if env_fn is None:
        if not cfg.factory:
            raise ConfigError(
                "env.kind=custom needs env.factory ('package.module:callable' or 'path/to/file.py:callable'); "
                "a run trained with Trainer(cfg, env_fn=...) on a function its config could not name needs that "
                "function again: load_policy(run_dir, env_fn=...) or Trainer(cfg, run_dir, resume=True, env_fn=...)"
            )
        env_fn = load_factory(cfg.factory)
    name = cfg.factory or factory_path(env_fn) or repr(env_fn)
    args = factory_arguments(
        env_fn, dict(cfg.kwargs), num_envs=num_envs, device=device or cfg.device, seed=seed, max_steps=cfg.max_steps
    )
    env = env_fn(**args)
    if not isinstance(env, EnvBase):
        raise ConfigError(
            f"env factory {name} returned {type(env).__module__}.{type(env).__name__}; expected a torchrl "
            "EnvBase with a group_map (e.g. VmasEnv, PettingZooWrapper, or your own EnvBase subclass). "
            "For a PettingZoo env, use env.kind=pettingzoo with env.scenario set to its module's import path."
        )
    try:
        read_group_specs(env)  # groups, observations and actions readable: the model kinds check the shapes
    except GroupSpecError as err:
        raise GroupSpecError(f"env factory {name}: {err}") from None
    if "seed" not in args:
        try:
            env.set_seed(seed)
        except NotImplementedError:  # an env without _set_seed: seeded by the global torch seed
            pass
    return env


def absolute_factory(spec: str) -> str:
    """``spec`` with a file path made absolute, so that a run directory names it from anywhere."""
    target, sep, name = spec.rpartition(":")
    if sep and target.endswith(".py"):
        return f"{Path(target).expanduser().resolve()}:{name}"
    return spec


def recorded_env(cfg: EnvConfig, env_fn: EnvFactory | None) -> EnvConfig:
    """The env section a run records: ``env.kind=custom`` with ``env.factory`` naming ``env_fn`` (or the
    factory the config has, its file path made absolute); ``env.kwargs`` are kept only from a config
    that was already ``custom``. A factory that cannot be named (a lambda, a notebook's function) is
    recorded as ``null`` with a warning: ``load_policy(run, env_fn=...)`` then needs it again. Any
    other env section comes back as it is."""
    takes_factory = env_kind(cfg.kind).takes_factory
    if env_fn is None:
        if takes_factory and cfg.factory:
            return dataclasses.replace(cfg, factory=absolute_factory(cfg.factory))
        return cfg
    path = factory_path(env_fn)
    if path is None:
        warnings.warn(
            f"env_fn {env_fn!r} cannot be named in the run's config.yaml (a lambda, a closure or a notebook's "
            "function): `marl-ppo eval` and `--resume` cannot rebuild its env; pass it again with "
            "load_policy(run_dir, env_fn=...) / Trainer(..., env_fn=..., resume=True), or define it in a module",
            stacklevel=4,
        )
    # kwargs belong to the env: a config for another kind (the defaults' VMAS navigation) gives none
    kwargs = cfg.kwargs if takes_factory else {}
    return dataclasses.replace(cfg, kind="custom", factory=path, kwargs=kwargs)
