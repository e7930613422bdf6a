"""The reward table's vocabulary: terms (own, team, signal), a group's row, and its error.

See :mod:`marl_ppo.groups.reward_table` for the table and its YAML form.

>>> own(0.5).describe("red")
'0.5 × own reward (red.reward)'
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from tensordict.utils import NestedKey

__all__ = [
    "RewardTableError",
    "Term",
    "GroupRow",
    "own",
    "team",
    "signal",
    "Reduce",
    "DoneSource",
    "as_key",
    "format_key",
    "in_group",
]

Reduce = Literal["none", "mean", "sum"]
DoneSource = Literal["auto", "own", "root"]


class RewardTableError(ValueError):
    """A reward table that does not fit the env: names the group, the key, and what exists."""


def as_key(key: NestedKey) -> tuple[str, ...]:
    if isinstance(key, str):
        return (key,)
    if not isinstance(key, (tuple, list)) or not key or not all(isinstance(k, str) for k in key):
        raise RewardTableError(f"a key must be a string or a list of strings such as [next, reward], got {key!r}")
    return tuple(key)


def _weight(value: Any, term: str) -> float:
    """A term's weight: an int or float (not a bool, not a string), finite."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise RewardTableError(f"{term}: the weight must be a finite number, got {value!r} ({type(value).__name__})")
    return float(value)


def in_group(group: str, err: RewardTableError) -> RewardTableError:
    """Prefixes a term's error with its group (the term functions do not know it)."""
    text = str(err)
    return err if text.startswith("group ") else RewardTableError(f"group {group!r}: {text}")


def format_key(key: NestedKey) -> str:
    return ".".join(as_key(key))


@dataclass(frozen=True)
class Term:
    """One weighted signal in a group's training reward. Build with :func:`own`, :func:`team`, :func:`signal`."""

    source: Literal["own", "team", "signal"]
    weight: float = 1.0
    groups: tuple[str, ...] = ()
    key: tuple[str, ...] = ()
    reduce: Reduce = "none"

    def __post_init__(self) -> None:
        _weight(self.weight, f"{self.source} term")
        if self.reduce not in ("none", "mean", "sum"):
            raise RewardTableError(f"reduce must be one of 'none', 'mean', 'sum', got {self.reduce!r}")

    def describe(self, group: str) -> str:
        if self.source == "own":
            what = f"own reward ({group}.reward)"
        elif self.source == "team":
            what = f"{self.reduce}({', '.join(self.groups)} reward)"
            if self.reduce == "none":
                what = f"{self.groups[0]} reward (per agent)"
        else:
            what = format_key(self.key)
            if self.reduce != "none":
                what = f"{self.reduce}({what})"
        return f"{self.weight:g} × {what}"


def own(weight: float = 1.0) -> Term:
    """The group's own per-agent reward, times ``weight``."""
    return Term("own", _weight(weight, "own()"))


def team(groups: Sequence[str] | str, *, reduce: Reduce = "mean", weight: float = 1.0) -> Term:
    """The reward of ``groups``' agents, reduced over all of them (one number per env), times ``weight``.

    ``reduce="none"`` keeps it per agent; it needs a single group with as many agents as the receiver.
    """
    if isinstance(groups, str):
        groups = (groups,)
    elif isinstance(groups, (list, tuple)) and all(isinstance(g, str) for g in groups):
        groups = tuple(groups)
    else:
        raise RewardTableError(f"team(): groups must be a group name or a list of group names, got {groups!r}")
    if not groups:
        raise RewardTableError("team() needs at least one group")
    if reduce == "none" and len(groups) != 1:
        raise RewardTableError(
            f"team({list(groups)}, reduce='none') is ambiguous: per-agent rewards can come "
            "from one group only; use reduce='mean' or 'sum' to combine several groups"
        )
    return Term("team", _weight(weight, f"team({list(groups)})"), groups=groups, reduce=reduce)


def signal(key: NestedKey, *, weight: float = 1.0, reduce: Reduce = "none") -> Term:
    """Any entry the env writes under ``"next"`` (e.g. a root ``"reward"``), times ``weight``.

    With ``reduce="none"`` its shape must broadcast to the group's ``[n_agents, 1]``
    (``[1]`` for a root signal, ``[n_agents, 1]`` for a per-agent one); ``"mean"``/``"sum"``
    reduce a per-agent signal ``[m, 1]`` over its agents first.
    """
    key = as_key(key)
    return Term("signal", _weight(weight, f"signal({format_key(key)!r})"), key=key, reduce=reduce)


@dataclass(frozen=True)
class GroupRow:
    """One group's row: its training reward (a sum of terms) and where its done comes from."""

    reward: tuple[Term, ...]
    done: DoneSource = "auto"

    def __post_init__(self) -> None:
        if self.done not in ("auto", "own", "root"):
            raise RewardTableError(f"done must be 'auto', 'own' or 'root', got {self.done!r}")
