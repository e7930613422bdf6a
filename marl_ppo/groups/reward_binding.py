"""Binding a reward table to an env: each group's plan, validated against the env's signals, and applying it.

:func:`bind_rows` resolves every row against the per-step shapes of the env's signals (a clear error
naming the group, the key and what exists for anything that cannot fit) into one typed
:class:`GroupPlan` per group; :class:`BoundRewardTable` applies the plans to a batch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
from tensordict import TensorDictBase
from tensordict.utils import NestedKey

from marl_ppo.groups.reward_terms import GroupRow, RewardTableError, Term, as_key, format_key
from marl_ppo.groups.specs import GroupKeys

__all__ = ["TermPlan", "GroupPlan", "bind_rows", "BoundRewardTable"]

Key = tuple[str, ...]


@dataclass(frozen=True)
class TermPlan:
    """One term of a group's reward, resolved: the signals it reads and whether its value is per agent."""

    term: Term
    keys: tuple[Key, ...]
    per_agent: bool


@dataclass(frozen=True)
class GroupPlan:
    """One group's resolved row: its reward terms, its done and terminated signals, and where it writes."""

    n_agents: int
    terms: tuple[TermPlan, ...]
    done_key: Key
    terminated_key: Key
    done_per_agent: bool
    out: GroupKeys


def bind_rows(
    rows: Mapping[str, GroupRow],
    n_agents: Mapping[str, int],
    signals: Mapping[Key, tuple[int, ...]],
    reward_keys: Mapping[str, NestedKey | None],
    done_keys: Mapping[str, tuple[NestedKey | None, NestedKey | None]],
) -> dict[str, GroupPlan]:
    """Each group's :class:`GroupPlan` (``rows`` and ``n_agents`` name the same groups)."""
    plans = {}
    for group, row in rows.items():
        n = n_agents[group]
        terms = []
        for term in row.reward:
            keys, per_agent = _resolve_term(group, n, term, n_agents, signals, reward_keys)
            terms.append(TermPlan(term, tuple(keys), per_agent))
        done_key, term_key, per_agent = _resolve_done(group, n, row.done, signals, done_keys[group])
        plans[group] = GroupPlan(n, tuple(terms), done_key, term_key, per_agent, GroupKeys.for_group(group))
    return plans


def _signal_shape(group: str, key: tuple[str, ...], signals: Mapping) -> tuple[int, ...]:
    if key not in signals:
        near = sorted(format_key(k) for k in signals if "reward" in k[-1] or k[:1] == key[:1])
        raise RewardTableError(
            f"group {group!r}: the reward table names {format_key(key)!r}, which the env does not "
            f"write; signals under 'next' include {near or sorted(format_key(k) for k in signals)}"
        )
    return signals[key]


def _check_per_agent(group: str, key: tuple[str, ...], shape: tuple[int, ...]) -> int:
    if len(shape) != 2 or shape[-1] != 1:
        hint = " (it is missing its trailing 1)" if len(shape) == 1 else ""
        raise RewardTableError(
            f"group {group!r}: {format_key(key)!r} has per-step shape {list(shape)}{hint}; "
            f"a per-agent reward must be [n_agents, 1]"
        )
    return shape[0]


def _resolve_term(group, n, term, n_agents, signals, reward_keys):
    """Returns the signal keys a term reads and whether its value is per agent (else per env)."""
    if term.source == "own":
        key = reward_keys.get(group)
        if key is None:
            raise RewardTableError(
                f"group {group!r}: own() needs the group's own reward, but the env writes none "
                f"for it; rewards it does write: {sorted(format_key(k) for k in signals if k[-1] == 'reward')}"
            )
        key = as_key(key)
        m = _check_per_agent(group, key, _signal_shape(group, key, signals))
        if m != n:
            raise RewardTableError(f"group {group!r}: own reward {format_key(key)!r} has {m} agents, group has {n}")
        return [key], True
    if term.source == "team":
        keys = []
        for other in term.groups:
            if other not in n_agents:
                raise RewardTableError(
                    f"group {group!r}: the reward table names group {other!r}, which the env does not "
                    f"have; the env's groups are {list(n_agents)}"
                )
            key = reward_keys.get(other)
            if key is None:
                raise RewardTableError(f"group {group!r}: group {other!r} has no reward in the env")
            key = as_key(key)
            _check_per_agent(group, key, _signal_shape(group, key, signals))
            keys.append(key)
        if term.reduce == "none":
            m = n_agents[term.groups[0]]
            if m != n:
                raise RewardTableError(
                    f"group {group!r} ({n} agents) cannot take group {term.groups[0]!r}'s per-agent "
                    f"reward ({m} agents) with reduce='none'; use reduce='mean' or 'sum'"
                )
            return keys, True
        return keys, False
    key = term.key
    shape = _signal_shape(group, key, signals)
    if term.reduce == "none":
        if shape == (1,):
            return [key], False
        if shape == (n, 1):
            return [key], True
        if shape == (n,):
            raise RewardTableError(
                f"group {group!r}: signal {format_key(key)!r} has per-step shape {list(shape)}, missing "
                f"its trailing 1; expected [1] (one per env) or [{n}, 1] (one per agent)"
            )
        raise RewardTableError(
            f"group {group!r}: signal {format_key(key)!r} has per-step shape {list(shape)}, which cannot "
            f"broadcast to the group's [{n}, 1]; expected [1] or [{n}, 1], or reduce='mean'/'sum'"
        )
    _check_per_agent(group, key, shape)
    return [key], False


def _resolve_done(group, n, source, signals, own_keys):
    own_done, own_term = own_keys
    if source == "auto":
        source = "own" if own_done is not None else "root"
    if source == "own":
        if own_done is None:
            raise RewardTableError(
                f"group {group!r}: done 'own' needs a per-group done, but the env has only "
                f"{sorted(format_key(k) for k in signals if k[-1] == 'done')}; use done: root"
            )
        own_done = as_key(own_done)
        m = _check_per_agent(group, own_done, _signal_shape(group, own_done, signals))
        if m != n:
            raise RewardTableError(f"group {group!r}: done {format_key(own_done)!r} has {m} agents, group has {n}")
        return own_done, (as_key(own_term) if own_term is not None else own_done), True
    if ("done",) not in signals:
        raise RewardTableError(f"group {group!r}: done 'root' needs a root 'done', which the env does not write")
    if signals[("done",)] != (1,):
        raise RewardTableError(
            f"group {group!r}: the root done has per-step shape {list(signals[('done',)])}, expected [1]"
        )
    term_key = ("terminated",) if ("terminated",) in signals else ("done",)
    return ("done",), term_key, False


class BoundRewardTable:
    """A :class:`~marl_ppo.groups.reward_table.RewardTable` validated against an env; call it on a batch
    to route rewards.

    Reads ``("next", ...)`` signals of any leading shape ``[*B]`` and writes, for every group, its
    training reward, done and terminated (:class:`~marl_ppo.groups.specs.GroupKeys`:
    ``("next", group, "train_reward" | "train_done" | "train_terminated")``) of shape
    ``[*B, n_agents, 1]``. The env's raw entries are not modified.
    """

    def __init__(self, table, plans: Mapping[str, GroupPlan], untrained: Sequence[str] = ()) -> None:
        self.table = table
        self.plans = dict(plans)
        self.untrained = list(untrained)  # groups that act without learning: no training reward
        self.n_agents = {g: plan.n_agents for g, plan in self.plans.items()}

    @property
    def groups(self) -> list[str]:
        return list(self.plans)

    def __call__(self, td: TensorDictBase) -> TensorDictBase:
        nxt = td.get("next")
        for group, plan in self.plans.items():
            n = plan.n_agents
            reward = None
            for tp in plan.terms:
                value = _term_value(nxt, tp.term, tp.keys, tp.per_agent)
                value = value * tp.term.weight if tp.term.weight != 1.0 else value
                reward = value if reward is None else reward + value
            done = nxt.get(plan.done_key)
            term = nxt.get(plan.terminated_key)
            if not plan.done_per_agent:  # root done [*B, 1]: one per env, broadcast to agents
                done = done.unsqueeze(-2)
                term = term.unsqueeze(-2)
            lead = done.shape[:-2]
            nxt.set(plan.out.reward, reward.expand(*lead, n, 1))
            nxt.set(plan.out.done, done.expand(*lead, n, 1))
            nxt.set(plan.out.terminated, term.expand(*lead, n, 1))
        return td

    def __str__(self) -> str:
        lines = ["reward table (training reward <- env signals)"]
        width = max(len(g) for g in [*self.plans, *self.untrained])
        for group, plan in self.plans.items():
            formula = " + ".join(tp.term.describe(group) for tp in plan.terms)
            lines.append(f"  {group:<{width}}  [{plan.n_agents} agents]  reward <- {formula}")
            done = "own done (" + format_key(plan.done_key) + ")" if plan.done_per_agent else "root done"
            lines.append(f"  {'':<{width}}  {'':<{len(str(plan.n_agents)) + 9}}  done   <- {done}")
        lines += [f"  {g:<{width}}  an opponent (opponents.{g}): acts, does not learn" for g in self.untrained]
        return "\n".join(lines)

    __repr__ = __str__


def _term_value(nxt: TensorDictBase, term: Term, keys: tuple[Key, ...], per_agent: bool) -> torch.Tensor:
    """A term's value, shaped ``[*B, 1, 1]`` (one per env) or ``[*B, n, 1]`` (per agent)."""
    if term.reduce == "none":
        value = nxt.get(keys[0])
        return value if per_agent else value.unsqueeze(-2)
    values = [nxt.get(k) for k in keys]
    stacked = values[0] if len(values) == 1 else torch.cat(values, dim=-2)
    if term.reduce == "mean":
        return stacked.mean(dim=-2, keepdim=True)
    return stacked.sum(dim=-2, keepdim=True)
