"""Lazy package namespaces (PEP 562): a package's public names imported on first use.

So that importing a light module of a package (``marl_ppo.envs.options``, ``marl_ppo.models.options``,
which the run's config reads) does not pay for torch, torchrl, VMAS and PettingZoo through the
package's ``__init__``; ``from marl_ppo.envs import make_env`` works as usual.

>>> getattr_, dir_ = lazy_exports("marl_ppo", {"GroupKeys": "marl_ppo.groups.specs"}, {})
>>> getattr_("GroupKeys").__name__
'GroupKeys'
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports", "names_by_module"]


def names_by_module(modules: Mapping[str, str]) -> dict[str, str]:
    """``{module: "name name ..."}`` as ``{name: module}`` (what :func:`lazy_exports` takes).

    >>> names_by_module({"marl_ppo.groups.specs": "GroupKeys GroupSpec"})
    {'GroupKeys': 'marl_ppo.groups.specs', 'GroupSpec': 'marl_ppo.groups.specs'}
    """
    return {name: module for module, names in modules.items() for name in names.split()}


def lazy_exports(
    package: str, exports: Mapping[str, str], namespace: dict[str, Any]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``: ``exports`` maps each public name to the module that
    defines it; a name once imported is kept in ``namespace`` (the package's globals)."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value  # once imported, a plain attribute
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(exports))

    return __getattr__, __dir__
