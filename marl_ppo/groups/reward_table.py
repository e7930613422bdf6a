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

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from tensordict.utils import NestedKey

from marl_ppo.groups.reward_binding import BoundRewardTable, bind_rows
from marl_ppo.groups.reward_terms import (
    DoneSource,
    GroupRow,
    RewardTableError,
    Term,
    as_key,
    in_group,
    own,
    signal,
    team,
)
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


_TERM_FIELDS = {"own", "team", "group", "key", "weight", "reduce"}


def _term_from_dict(group: str, spec: Any) -> Term:
    try:
        return _parse_term(group, spec)
    except RewardTableError as err:
        raise in_group(group, err) from None


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
            f"group {group!r}: unknown reward term field(s) {sorted(unknown)}; known fields are {sorted(_TERM_FIELDS)}"
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
            raise RewardTableError(
                f"a reward table maps each group to its row, got {type(mapping).__name__} {mapping!r}"
            )
        rows: dict[str, GroupRow] = {}
        for group, row in mapping.items():
            if row is None:
                raise RewardTableError(
                    f"group {group!r}: the row is empty (null); give a reward list such as [{{own: 1.0}}]"
                )
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

    def bind(self, groups: Mapping[str, GroupSpec], env: Any, untrained: Collection[str] = ()) -> "BoundRewardTable":
        """Validates the table against a multi-agent env's specs and returns the applicable table.

        ``untrained``: groups that do not learn (opponents): they need no row, and a row of theirs is
        dropped; the other rows may still read their rewards."""
        batch_ndim = len(env.batch_size)
        signals: dict[tuple[str, ...], tuple[int, ...]] = {}
        for spec in (env.full_reward_spec, env.full_done_spec, env.full_observation_spec):
            for key in spec.keys(include_nested=True, leaves_only=True):
                signals[as_key(key)] = tuple(spec[key].shape[batch_ndim:])
        return self.bind_shapes(
            {g: s.n_agents for g, s in groups.items()},
            signals,
            reward_keys={g: s.raw_reward_key for g, s in groups.items()},
            done_keys={g: (s.raw_done_key, s.raw_terminated_key) for g, s in groups.items()},
            untrained=untrained,
        )

    def bind_shapes(
        self,
        n_agents: Mapping[str, int],
        signals: Mapping[tuple[str, ...], tuple[int, ...]],
        reward_keys: Mapping[str, NestedKey | None] | None = None,
        done_keys: Mapping[str, tuple[NestedKey | None, NestedKey | None]] | None = None,
        untrained: Collection[str] = (),
    ) -> "BoundRewardTable":
        """Validates against plain shapes: ``n_agents`` per group and the per-step shape of each
        signal under ``"next"`` (env batch dims removed). Defaults: a group's reward is
        ``(group, "reward")`` and its done ``(group, "done")`` when those signals exist."""
        signals = {as_key(k): tuple(v) for k, v in signals.items()}
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
        unmapped = [g for g in n_agents if g not in self.rows and g not in untrained]
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
        rows = {g: row for g, row in self.rows.items() if g not in untrained}
        return BoundRewardTable(self, bind_rows(rows, n_agents, signals, reward_keys, done_keys), untrained=untrained)
