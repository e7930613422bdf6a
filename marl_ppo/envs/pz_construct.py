"""Building a PettingZoo game from ``env.kwargs``: errors that name the parameters the game takes.

Split from :mod:`~marl_ppo.envs.pettingzoo` (what a game's constructor takes, and why it refused).
"""

from __future__ import annotations

import difflib
import inspect
import re
import sys
from typing import Any, Callable

from marl_ppo.options import ConfigError

__all__ = ["accepts_max_cycles", "check_kwargs", "construct"]


def check_kwargs(task: str, ctor: Any, kwargs: dict) -> None:
    """Refuses ``env.kwargs`` the env's constructor does not take, with its parameter names and the closest."""
    try:
        params = inspect.signature(ctor).parameters
    except (TypeError, ValueError):  # no constructor to read: the env itself will say
        return
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return
    known = sorted(n for n in params if n not in ("self", "render_mode", "max_cycles", "continuous_actions"))
    unknown = sorted(set(kwargs) - set(params))
    if unknown:
        close = {k: difflib.get_close_matches(k, known, n=1) for k in unknown}
        hints = "; ".join(f"{k!r}: did you mean {c[0]!r}?" for k, c in close.items() if c)
        raise ConfigError(
            f"env.kwargs {unknown} are not parameters of PettingZoo task {task!r}"
            f"{' (' + hints + ')' if hints else ''}; it takes {known}"
        )


def accepts_max_cycles(module) -> bool:
    """Whether the module's env constructor takes ``max_cycles`` (by name, or through ``**kwargs``)."""
    target = getattr(module, "raw_env", None) or getattr(module, "parallel_env", None) or module.env
    try:
        params = inspect.signature(target).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "max_cycles" or p.kind is p.VAR_KEYWORD for p in params)


def construct(
    make: Callable[..., Any],
    kwargs: dict,
    max_steps: int,
    takes_max_cycles: bool,
    where: str,
    name: str,
    own: str,
) -> Any:
    """``make(**kwargs)``, with ``max_cycles=max_steps`` where the env takes it and kwargs do not set it.

    Any error of the env's constructor becomes one ConfigError naming the call and ``env.kwargs``; a
    keyword it does not take, the parameters of the class that refused it (found in the game's ``own``
    module first, then in its family's, ``pettingzoo.classic``...: several games name their class ``raw_env``).
    """
    try:
        if "max_cycles" not in kwargs and takes_max_cycles:
            try:
                return make(max_cycles=max_steps, **kwargs)
            except TypeError as err:
                if "max_cycles" not in str(err):
                    raise
                # a **kwargs that does not take it after all: its episodes end on their own
        return make(**kwargs)
    except ConfigError:
        raise
    except TypeError as err:
        refused = re.match(r"([\w.]+?)(?:\.__init__)?\(\) got an unexpected keyword argument '(\w+)'", str(err))
        ctor = _find_callable(".".join(own.split(".")[:2]), refused.group(1), own) if refused else None
        if ctor is not None:
            check_kwargs(name, ctor, kwargs)
        raise ConfigError(f"{where} with env.kwargs={kwargs!r} failed: {err}") from err
    except Exception as err:  # a bad value deep in the game (pursuit's n_pursuers=-1: an IndexError)
        raise ConfigError(f"{where} with env.kwargs={kwargs!r} failed: {type(err).__name__}: {err}") from err


def _find_callable(family: str, qualname: str, own: str | None = None) -> Any:
    """The class or function called ``qualname`` in one of the loaded modules of package ``family``, if any,
    those of the game's ``own`` module first: PettingZoo's constructors pass ``**kwargs`` down to a base
    class whose signature names the parameters."""
    head, *rest = qualname.split(".")
    loaded = [(n, m) for n, m in list(sys.modules.items()) if _within(n, family)]
    for _, module in sorted(loaded, key=lambda item: not (own and _within(item[0], own))):  # stable: own first
        obj = getattr(module, head, None)
        for part in rest:
            obj = getattr(obj, part, None)
        if callable(obj):
            return obj
    return None


def _within(module_name: str, package: str) -> bool:
    return module_name == package or module_name.startswith(package + ".")
