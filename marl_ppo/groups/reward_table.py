"""The reward table: the explicit mapping from env signals to each group's training reward and done.

Nothing is shared implicitly. Every group needs a row; a row is a weighted sum of terms:

* ``own(w)`` -- the group's own per-agent reward;
* ``team(groups, reduce="mean"|"sum", weight=w)`` -- the reward of the named groups' agents,
  reduced over all of those agents to one number per env and broadcast to this group's agents
  (a team reward shared by several groups; ``team(["predator"], weight=-1)`` is zero-sum);
* ``signal(key, weight=w, reduce="none"|"mean"|"sum")`` -- any entry the env writes under
  ``"next"`` (a global reward at the root, an ``info`` entry), broadcast to the group's agents.

Its done comes from the group's own done (``"own"``), the root done (``"root"``) or whichever the
env has (``"auto"``: own if present, else root).

A table is validated against the env's specs by :meth:`RewardTable.bind`, which returns a
:class:`BoundRewardTable`. Applying it writes ``("next", group, "train_reward" | "train_done" |
"train_terminated")``, shape ``[*B, n_agents, 1]``, and leaves the env's raw rewards untouched.

>>> import torch
>>> from tensordict import TensorDict
>>> table = RewardTable({
...     "red": [own(1.0), team(["red", "blue"], reduce="mean", weight=0.5)],
...     "blue": [team(["red"], reduce="sum", weight=-1.0)],
... })
>>> bound = table.bind_shapes(
...     {"red": 2, "blue": 1},
...     signals={("red", "reward"): (2, 1), ("blue", "reward"): (1, 1), ("done",): (1,)},
... )
>>> td = TensorDict({"next": {
...     "red": TensorDict({"reward": torch.tensor([[[1.0], [3.0]]])}, [1, 2]),
...     "blue": TensorDict({"reward": torch.tensor([[[5.0]]])}, [1, 1]),
...     "done": torch.tensor([[False]]), "terminated": torch.tensor([[False]])}}, [1])
>>> bound(td)["next", "red", "train_reward"].flatten().tolist()  # own + 0.5 * mean(1, 3, 5)
[2.5, 4.5]
>>> bound(td)["next", "blue", "train_reward"].flatten().tolist()  # -(1 + 3)
[-4.0]
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch
from tensordict import TensorDictBase
from tensordict.utils import NestedKey

from marl_ppo.groups.specs import GroupSpec

__all__ = [
    "RewardTableError",
    "Term",
    "GroupRow",
    "RewardTable",
    "BoundRewardTable",
    "own",
    "team",
    "signal",
]

Reduce = Literal["none", "mean", "sum"]
DoneSource = Literal["auto", "own", "root"]


class RewardTableError(ValueError):
    """A reward table that does not fit the env: names the group, the key, and what exists."""


def _as_key(key: NestedKey) -> tuple[str, ...]:
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


def _in_group(group: str, err: RewardTableError) -> RewardTableError:
    """Prefixes a term's error with its group (the term functions do not know it)."""
    text = str(err)
    return err if text.startswith("group ") else RewardTableError(f"group {group!r}: {text}")


def _fmt_key(key: NestedKey) -> str:
    return ".".join(_as_key(key))


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
            raise RewardTableError(
                f"reduce must be one of 'none', 'mean', 'sum', got {self.reduce!r}"
            )

    def describe(self, group: str) -> str:
        if self.source == "own":
            what = f"own reward ({group}.reward)"
        elif self.source == "team":
            what = f"{self.reduce}({', '.join(self.groups)} reward)"
            if self.reduce == "none":
                what = f"{self.groups[0]} reward (per agent)"
        else:
            what = _fmt_key(self.key)
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
    key = _as_key(key)
    return Term("signal", _weight(weight, f"signal({_fmt_key(key)!r})"), key=key, reduce=reduce)


@dataclass(frozen=True)
class GroupRow:
    """One group's row: its training reward (a sum of terms) and where its done comes from."""

    reward: tuple[Term, ...]
    done: DoneSource = "auto"

    def __post_init__(self) -> None:
        if self.done not in ("auto", "own", "root"):
            raise RewardTableError(f"done must be 'auto', 'own' or 'root', got {self.done!r}")


_TERM_FIELDS = {"own", "team", "group", "key", "weight", "reduce"}


def _term_from_dict(group: str, spec: Any) -> Term:
    try:
        return _parse_term(group, spec)
    except RewardTableError as err:
        raise _in_group(group, err) from None


def _parse_term(group: str, spec: Any) -> Term:
    if isinstance(spec, Term):
        return spec
    if isinstance(spec, str) and spec == "own":
        return own()
    if not isinstance(spec, Mapping):
        raise RewardTableError(
            f"group {group!r}: a reward term must be a mapping like {{own: 1.0}}, "
            f"{{team: [a, b], reduce: mean, weight: 0.5}}, {{group: a, weight: -1}} or "
            f"{{key: reward, weight: 1.0}}; got {spec!r}"
        )
    unknown = set(spec) - _TERM_FIELDS
    if unknown:
        raise RewardTableError(
            f"group {group!r}: unknown reward term field(s) {sorted(unknown)}; "
            f"known fields are {sorted(_TERM_FIELDS)}"
        )
    sources = [s for s in ("own", "team", "group", "key") if s in spec]
    if len(sources) != 1:
        raise RewardTableError(
            f"group {group!r}: a reward term names exactly one source of own/team/group/key, got {spec!r}"
        )
    src = sources[0]
    if src == "own":
        if "weight" in spec:
            raise RewardTableError(f"group {group!r}: write {{own: WEIGHT}}, not a separate weight")
        return own(spec["own"] if spec["own"] is not None else 1.0)
    weight = spec.get("weight", 1.0)
    if src == "key":
        return signal(spec["key"], weight=weight, reduce=spec.get("reduce", "none"))
    groups = spec[src]
    return team(groups, reduce=spec.get("reduce", "mean"), weight=weight)


def _terms(group: str, terms: Any) -> tuple[Term, ...]:
    """A row's reward terms, in the same forms from Python and from YAML (one term or a list)."""
    if terms is None:
        raise RewardTableError(f"group {group!r}: the reward list is empty (null); give terms such as [{{own: 1.0}}]")
    if isinstance(terms, (str, Mapping, Term)):
        terms = [terms]
    if not isinstance(terms, (list, tuple)):
        raise RewardTableError(f"group {group!r}: the reward must be a list of terms, got {terms!r}")
    return tuple(_term_from_dict(group, t) for t in terms)


class RewardTable:
    """Explicit mapping from env signals to each group's training reward and done.

    ``rows`` maps a group to its list of :class:`Term` (or a :class:`GroupRow` to set the done
    source); ``done`` optionally sets done sources by group.
    """

    def __init__(
        self,
        rows: Mapping[str, Sequence[Term] | GroupRow],
        done: Mapping[str, DoneSource] | None = None,
    ) -> None:
        done = dict(done or {})
        unknown_done = set(done) - set(rows)
        if unknown_done:
            raise RewardTableError(
                f"done sources given for group(s) {sorted(unknown_done)} that have no reward row; "
                f"rows exist for {sorted(rows)}"
            )
        self.rows = {}
        for group, row in rows.items():
            if not isinstance(row, GroupRow):
                row = GroupRow(_terms(group, row), done.get(group, "auto"))
            elif group in done:
                row = GroupRow(row.reward, done[group])
            if not row.reward:
                raise RewardTableError(f"group {group!r} has an empty reward row")
            self.rows[group] = row

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RewardTable) and self.rows == other.rows

    @classmethod
    def own_rewards(cls, groups: Sequence[str]) -> "RewardTable":
        """Each group trains on its own per-agent reward; done from the env (``"auto"``)."""
        return cls({g: [own(1.0)] for g in groups})

    @classmethod
    def from_dict(cls, mapping: Mapping[str, Any]) -> "RewardTable":
        """Builds a table from the YAML/dict form::

            adversary:
              reward: [{own: 1.0}, {team: [adversary, agent], reduce: mean, weight: 0.5}]
              done: root
            agent: [{group: adversary, weight: -1.0}]     # a bare list is the reward
        """
        if not isinstance(mapping, Mapping):
            raise RewardTableError(f"a reward table maps each group to its row, got {type(mapping).__name__} {mapping!r}")
        rows: dict[str, GroupRow] = {}
        for group, row in mapping.items():
            if row is None:
                raise RewardTableError(f"group {group!r}: the row is empty (null); give a reward list such as [{{own: 1.0}}]")
            if isinstance(row, Mapping):
                unknown = set(row) - {"reward", "done"}
                if unknown:
                    raise RewardTableError(
                        f"group {group!r}: unknown row field(s) {sorted(unknown)}; a row has 'reward' and 'done'"
                    )
                if "reward" not in row:
                    raise RewardTableError(f"group {group!r}: the row has no 'reward' list")
                terms, done = row["reward"], row.get("done", "auto")
            else:
                terms, done = row, "auto"
            rows[str(group)] = GroupRow(_terms(group, terms), done)
        return cls(rows)

    def to_dict(self) -> dict[str, Any]:
        """The YAML/dict form (inverse of :meth:`from_dict`)."""
        out: dict[str, Any] = {}
        for group, row in self.rows.items():
            terms = []
            for t in row.reward:
                if t.source == "own":
                    terms.append({"own": t.weight})
                elif t.source == "team":
                    terms.append({"team": list(t.groups), "reduce": t.reduce, "weight": t.weight})
                else:
                    terms.append({"key": list(t.key), "reduce": t.reduce, "weight": t.weight})
            out[group] = {"reward": terms, "done": row.done}
        return out

    def __str__(self) -> str:
        lines = ["reward table (training reward <- env signals)"]
        for group, row in self.rows.items():
            lines.append(f"  {group:<12} reward <- " + " + ".join(t.describe(group) for t in row.reward))
            lines.append(f"  {'':<12} done   <- {row.done}")
        return "\n".join(lines)

    # -- validation ------------------------------------------------------------------------

    def bind(self, groups: Mapping[str, GroupSpec], env: Any) -> "BoundRewardTable":
        """Validates the table against a multi-agent env's specs and returns the applicable table."""
        batch_ndim = len(env.batch_size)
        signals: dict[tuple[str, ...], tuple[int, ...]] = {}
        for spec in (env.full_reward_spec, env.full_done_spec, env.full_observation_spec):
            for key in spec.keys(include_nested=True, leaves_only=True):
                signals[_as_key(key)] = tuple(spec[key].shape[batch_ndim:])
        return self.bind_shapes(
            {g: s.n_agents for g, s in groups.items()},
            signals,
            reward_keys={g: s.raw_reward_key for g, s in groups.items()},
            done_keys={g: (s.raw_done_key, s.raw_terminated_key) for g, s in groups.items()},
        )

    def bind_shapes(
        self,
        n_agents: Mapping[str, int],
        signals: Mapping[tuple[str, ...], tuple[int, ...]],
        reward_keys: Mapping[str, NestedKey | None] | None = None,
        done_keys: Mapping[str, tuple[NestedKey | None, NestedKey | None]] | None = None,
    ) -> "BoundRewardTable":
        """Validates against plain shapes: ``n_agents`` per group and the per-step shape of each
        signal under ``"next"`` (env batch dims removed). Defaults: a group's reward is
        ``(group, "reward")`` and its done ``(group, "done")`` when those signals exist."""
        signals = {_as_key(k): tuple(v) for k, v in signals.items()}
        reward_keys = dict(reward_keys or {})
        for g in n_agents:
            if reward_keys.get(g) is None and (g, "reward") in signals:
                reward_keys[g] = (g, "reward")
        done_keys = dict(done_keys or {})
        for g in n_agents:
            if g not in done_keys:
                done_keys[g] = (
                    (g, "done") if (g, "done") in signals else None,
                    (g, "terminated") if (g, "terminated") in signals else None,
                )
        unmapped = [g for g in n_agents if g not in self.rows]
        if unmapped:
            raise RewardTableError(
                f"group(s) {unmapped} have no row in the reward table; every group needs an explicit "
                f"row (e.g. [own(1.0)]); rows exist for {sorted(self.rows)}"
            )
        extra = [g for g in self.rows if g not in n_agents]
        if extra:
            raise RewardTableError(
                f"the reward table has row(s) for {extra}, which the env does not have; "
                f"the env's groups are {list(n_agents)}"
            )
        plans: dict[str, tuple] = {}  # group -> (terms, done key, terminated key, done per agent)
        for group, row in self.rows.items():
            n = n_agents[group]
            resolved = []
            for term in row.reward:
                keys, out = _resolve_term(group, n, term, n_agents, signals, reward_keys)
                resolved.append((term, keys, out))
            plans[group] = (resolved, *_resolve_done(group, n, row.done, signals, done_keys[group]))
        return BoundRewardTable(self, dict(n_agents), plans)


def _signal_shape(group: str, key: tuple[str, ...], signals: Mapping) -> tuple[int, ...]:
    if key not in signals:
        near = sorted(_fmt_key(k) for k in signals if "reward" in k[-1] or k[:1] == key[:1])
        raise RewardTableError(
            f"group {group!r}: the reward table names {_fmt_key(key)!r}, which the env does not "
            f"write; signals under 'next' include {near or sorted(_fmt_key(k) for k in signals)}"
        )
    return signals[key]


def _check_per_agent(group: str, key: tuple[str, ...], shape: tuple[int, ...]) -> int:
    if len(shape) != 2 or shape[-1] != 1:
        hint = " (it is missing its trailing 1)" if len(shape) == 1 else ""
        raise RewardTableError(
            f"group {group!r}: {_fmt_key(key)!r} has per-step shape {list(shape)}{hint}; "
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
                f"for it; rewards it does write: {sorted(_fmt_key(k) for k in signals if k[-1] == 'reward')}"
            )
        key = _as_key(key)
        m = _check_per_agent(group, key, _signal_shape(group, key, signals))
        if m != n:
            raise RewardTableError(f"group {group!r}: own reward {_fmt_key(key)!r} has {m} agents, group has {n}")
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
            key = _as_key(key)
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
                f"group {group!r}: signal {_fmt_key(key)!r} has per-step shape {list(shape)}, missing "
                f"its trailing 1; expected [1] (one per env) or [{n}, 1] (one per agent)"
            )
        raise RewardTableError(
            f"group {group!r}: signal {_fmt_key(key)!r} has per-step shape {list(shape)}, which cannot "
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
                f"{sorted(_fmt_key(k) for k in signals if k[-1] == 'done')}; use done: root"
            )
        own_done = _as_key(own_done)
        m = _check_per_agent(group, own_done, _signal_shape(group, own_done, signals))
        if m != n:
            raise RewardTableError(f"group {group!r}: done {_fmt_key(own_done)!r} has {m} agents, group has {n}")
        return own_done, (_as_key(own_term) if own_term is not None else own_done), True
    if ("done",) not in signals:
        raise RewardTableError(f"group {group!r}: done 'root' needs a root 'done', which the env does not write")
    if signals[("done",)] != (1,):
        raise RewardTableError(
            f"group {group!r}: the root done has per-step shape {list(signals[('done',)])}, expected [1]"
        )
    term_key = ("terminated",) if ("terminated",) in signals else ("done",)
    return ("done",), term_key, False


class BoundRewardTable:
    """A :class:`RewardTable` validated against an env; call it on a batch to route rewards.

    Reads ``("next", ...)`` signals of any leading shape ``[*B]`` and writes, for every
    group, ``("next", group, "train_reward" | "train_done" | "train_terminated")`` of
    shape ``[*B, n_agents, 1]``. The env's raw entries are not modified.
    """

    def __init__(self, table: RewardTable, n_agents: dict[str, int], plans: dict) -> None:
        self.table = table
        self.n_agents = n_agents
        self._plans = plans

    @property
    def groups(self) -> list[str]:
        return list(self._plans)

    def __call__(self, td: TensorDictBase) -> TensorDictBase:
        nxt = td.get("next")
        for group, (terms, done_key, term_key, done_per_agent) in self._plans.items():
            n = self.n_agents[group]
            reward = None
            for term, keys, per_agent in terms:
                value = _term_value(nxt, term, keys, per_agent)
                value = value * term.weight if term.weight != 1.0 else value
                reward = value if reward is None else reward + value
            done = nxt.get(done_key)
            term = nxt.get(term_key)
            if not done_per_agent:  # root done [*B, 1]: one per env, broadcast to agents
                done = done.unsqueeze(-2)
                term = term.unsqueeze(-2)
            lead = done.shape[:-2]
            nxt.set((group, "train_reward"), reward.expand(*lead, n, 1))
            nxt.set((group, "train_done"), done.expand(*lead, n, 1))
            nxt.set((group, "train_terminated"), term.expand(*lead, n, 1))
        return td

    def __str__(self) -> str:
        lines = ["reward table (training reward <- env signals)"]
        width = max(len(g) for g in self._plans)
        for group, (terms, done_key, _, per_agent) in self._plans.items():
            formula = " + ".join(t.describe(group) for t, _, _ in terms)
            lines.append(
                f"  {group:<{width}}  [{self.n_agents[group]} agents]  reward <- {formula}"
            )
            lines.append(f"  {'':<{width}}  {'':<{len(str(self.n_agents[group])) + 9}}  done   <- {'own done (' + _fmt_key(done_key) + ')' if per_agent else 'root done'}")
        return "\n".join(lines)

    __repr__ = __str__


def _term_value(
    nxt: TensorDictBase, term: Term, keys: list[tuple[str, ...]], per_agent: bool
) -> torch.Tensor:
    """A term's value, shaped ``[*B, 1, 1]`` (one per env) or ``[*B, n, 1]`` (per agent)."""
    if term.reduce == "none":
        value = nxt.get(keys[0])
        return value if per_agent else value.unsqueeze(-2)
    values = [nxt.get(k) for k in keys]
    stacked = values[0] if len(values) == 1 else torch.cat(values, dim=-2)
    if term.reduce == "mean":
        return stacked.mean(dim=-2, keepdim=True)
    return stacked.sum(dim=-2, keepdim=True)

