"""What can be trained here: VMAS scenarios, PettingZoo MPE tasks and families, Overcooked layouts and OpenSpiel
games, read from the libraries.

``marl-ppo list`` prints it. Every list comes from the library itself (VMAS's scenario lists,
``mpe2``'s modules, PettingZoo's registry, Overcooked's layout files, ``pyspiel.registered_names()``),
never from a list of ours; a PettingZoo env whose module cannot be imported here is listed with the
package it misses and the extra that installs it, a kind whose library is missing with its extra.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from marl_ppo.envs.families import extra_for

__all__ = ["PettingZooEnv", "pettingzoo_envs", "KindScenarios", "kind_scenarios"]


@dataclass(frozen=True)
class PettingZooEnv:
    """One env of PettingZoo's registry: its id (``env.scenario``), family and what it misses here."""

    env_id: str
    family: str
    missing: str | None = None  # the package its module failed to import, None when it imports

    @property
    def install(self) -> str:
        """How to install what it misses: marl_ppo's extra where one installs the package (a family's line in
        :data:`~marl_ppo.envs.families.FAMILIES` says which, as ``train`` does), else PettingZoo's own extra
        for the family."""
        extra = extra_for((self.missing or "").partition(".")[0])
        if extra is not None:
            return f"pip install 'marl-ppo[{extra}]'"
        return f"pip install 'pettingzoo[{self.family}]'"


def pettingzoo_envs() -> list[PettingZooEnv]:
    """Every env of PettingZoo's registries (``env.scenario: sisl/pursuit-v5``), each module imported to see."""
    import pettingzoo

    registry = {**pettingzoo.aec_registry, **pettingzoo.parallel_registry}
    out = []
    for env_id, spec in sorted(registry.items()):
        try:
            importlib.import_module(spec.entry_point.partition(":")[0])
            missing = None
        except ImportError as err:
            missing = err.name or str(err)
        out.append(PettingZooEnv(env_id, spec.namespace, missing))
    return out


@dataclass(frozen=True)
class KindScenarios:
    """The scenarios of one env kind (``env.kind=kind env.scenario=NAME``), as its library lists them; empty,
    with the extra to install, where the library is not installed."""

    kind: str
    names: tuple[str, ...]
    extra: str
    installed: bool


def kind_scenarios(kinds: tuple[str, ...] = ("lbf", "rware", "overcooked", "openspiel")) -> list[KindScenarios]:
    """The scenarios of each of ``kinds``, as its library lists them (its env kind's ``scenarios``)."""
    from marl_ppo.envs.kinds import env_kind
    from marl_ppo.options import PACKAGES, installed

    out = []
    for kind in kinds:
        package, extra = PACKAGES[f"env.kind: {kind}"]
        ok = installed(package)
        out.append(KindScenarios(kind, tuple(env_kind(kind).scenario_names()) if ok else (), extra, ok))
    return out
