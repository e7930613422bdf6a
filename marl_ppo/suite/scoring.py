"""What each task of a suite is scored on (:func:`add_scores`): the ``score`` metric written beside the other
metrics of every run in the marl-eval JSON, which the report and marl-eval normalise and aggregate.

A task's ``score:`` in the suite file names it: a group (``red``: its ``red_return``), several groups
(``[listener, speaker]``: the sum of their returns), or one metric of the JSON (``vs_random/red/win_rate``:
an ``eval_opponents`` rate). Without it the defaults are: one group, its return; several groups, the sum of
their returns. A competitive task is refused until named, since any default would misreport it: one whose
groups play opponents (``opponents``, ``log.eval_opponents``: refused at planning, before any run) or one
whose groups' returns sum to 0 at every evaluation (zero-sum, as VMAS simple_tag: found in the results, so
that task is left out of the aggregates and the report says why).

>>> run = {"step_1": {"step_count": 10, "a_return": [1.0], "b_return": [2.0], "return": [1.5]},
...        "absolute_metrics": {"a_return": [1.0, 3.0], "b_return": [2.0, 2.0], "return": [1.5, 2.5]}}
>>> data = {"vmas": {"t": {"mappo": {"seed_0": run}}}}
>>> add_scores(data, {})
({'vmas/t': ['a_return', 'b_return']}, {})
>>> run["step_1"]["score"], run["absolute_metrics"]["score"]
([3.0], [3.0, 5.0])
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping, Optional

import numpy as np

from marl_ppo.suite._files import write_json

__all__ = [
    "SCORE",
    "PROTOCOLS",
    "ScoreSpec",
    "parse_score",
    "competitive_reason",
    "add_scores",
    "read_scoring",
    "write_scoring",
]

SCORE = "score"
# how the report normalises a task's score: marl-eval's min-max over every logged evaluation (the default), a
# min-max over the final evaluations only, or the reference scores (random, expert) the suite file gives
PROTOCOLS = ("marl-eval", "final", "reference")
SCORING_FILE = "scoring.json"
ScoreSpec = tuple[str, ...]  # group names, or one metric of the JSON ("vs_random/red/win_rate"); (): the default


class ScoreError(ValueError):
    """A score that cannot be given: a competitive task not named, a name the results do not have."""


def parse_score(raw: Any, where: str) -> ScoreSpec:
    """A task's ``score:``: a group or metric name, or a list of group names (their returns summed).

    >>> parse_score(["red", "blue"], "score"), parse_score("vs_random/red/win_rate", "score")
    (('red', 'blue'), ('vs_random/red/win_rate',))
    >>> parse_score(["red", "vs_random/red/win_rate"], "score")
    Traceback (most recent call last):
    ...
    ValueError: score: a metric (a name with '/') is scored alone, got ['red', 'vs_random/red/win_rate']
    """
    if raw is None:
        return ()
    names = [raw] if isinstance(raw, str) else raw
    if not isinstance(names, list) or not names or not all(isinstance(n, str) and n.strip() for n in names):
        raise ValueError(
            f"{where} must be a group name, a list of group names or a metric such as vs_random/red/win_rate; "
            f"got {raw!r}"
        )
    if len(names) > 1 and any("/" in n for n in names):
        raise ValueError(f"{where}: a metric (a name with '/') is scored alone, got {names}")
    return tuple(n.strip() for n in names)


def competitive_reason(cfg: Any) -> Optional[str]:
    """Why a task's config makes it competitive (its groups play opponents), or ``None``."""
    why = []
    if cfg.opponents:
        why.append("groups played by opponents: " + ", ".join(f"{g}: {s}" for g, s in cfg.opponents.items()))
    if cfg.log.eval_opponents:
        why.append(f"log.eval_opponents {list(cfg.log.eval_opponents)}")
    return "; ".join(why) or None


def metric_names(spec: ScoreSpec) -> list[str]:
    """The JSON metrics a spec sums: ``<group>_return`` for a group, the metric itself for a name with '/'."""
    return [n if "/" in n else f"{n}_return" for n in spec]


def _groups(metrics: set[str]) -> list[str]:
    return sorted(m[: -len("_return")] for m in metrics if m.endswith("_return") and "/" not in m)


def _entries(runs: Mapping[str, Mapping[str, Any]]):
    for steps in runs.values():
        for entry in steps.values():
            yield entry


def _zero_sum(task: Mapping[str, Any], groups: list[str]) -> bool:
    """Whether the groups' mean returns sum to 0 (to rounding) at every evaluation of every run."""
    for runs in task.values():
        for entry in _entries(runs):
            values = [float(np.mean(entry[f"{g}_return"])) for g in groups]
            if abs(sum(values)) > 1e-6 * max(1.0, *map(abs, values)):
                return False
    return True


def _spec_for(task: Mapping[str, Any], name: str, spec: ScoreSpec) -> list[str]:
    """The metrics of ``task`` its score sums; :class:`ScoreError` when it cannot be scored."""
    first = next(iter(next(iter(task.values())).values()))
    metrics = set(first["absolute_metrics"])
    groups = _groups(metrics)
    if spec:
        wanted = metric_names(spec)
        missing = [m for m in wanted if m not in metrics]
        if missing:
            have = [*groups, *sorted(m for m in metrics if "/" in m)]
            raise ScoreError(f"{name}: score {list(spec)} names {missing}, which its results lack; it has {have}")
        return wanted
    example = next((m for m in sorted(metrics) if m.endswith("/win_rate")), groups[0] if groups else "GROUP")
    hint = f"name what it is scored on in the suite file (the task's score: e.g. {example})"
    if any("/" in m for m in metrics):  # eval_opponents results: a competitive task (planning refuses it unnamed)
        raise ScoreError(f"{name}: competitive (its runs play log.eval_opponents): {hint}")
    if len(groups) > 1 and _zero_sum(task, groups):
        raise ScoreError(f"{name}: its groups' returns ({', '.join(groups)}) sum to 0 at every evaluation: {hint}")
    if not groups:
        raise ScoreError(f"{name}: no <group>_return metric in its results; {hint}")
    return [f"{g}_return" for g in groups]


def _summed(entry: Mapping[str, list], names: list[str]) -> list[float]:
    """The metrics' values summed per episode (lists of one length), else their means summed (one value)."""
    lists = [entry[m] for m in names]
    if len({len(v) for v in lists}) == 1:
        return [float(sum(vals)) for vals in zip(*lists)]
    return [float(sum(np.mean(v) for v in lists))]


def add_scores(data: dict[str, Any], specs: Mapping[str, ScoreSpec]) -> tuple[dict[str, list[str]], dict[str, str]]:
    """Writes the ``score`` metric into every step and ``absolute_metrics`` of every run of ``data`` (in place),
    per task ``"<env>/<task>"`` as ``specs`` name it (absent: the defaults); a ``score`` already there is
    kept. Returns ``({"<env>/<task>": the metrics summed}, {"<env>/<task>": why})``: the second for the tasks
    it could not score (left without ``score``)."""
    scored: dict[str, list[str]] = {}
    problems: dict[str, str] = {}
    for env, tasks in data.items():
        for task, algos in tasks.items():
            key = f"{env}/{task}"
            first = next(iter(next(iter(algos.values())).values()))
            if SCORE in first["absolute_metrics"] and not specs.get(key):
                scored[key] = [SCORE]  # scored before (a merged suite's part: its scoring.json says on what)
                continue
            try:
                names = _spec_for(algos, key, tuple(specs.get(key, ())))
            except ScoreError as err:
                problems[key] = str(err)
                for runs in algos.values():
                    for entry in _entries(runs):
                        entry.pop(SCORE, None)
                continue
            scored[key] = names
            for runs in algos.values():
                for entry in _entries(runs):
                    entry[SCORE] = _summed(entry, names)
    return scored, problems


def write_scoring(out_dir: Path, scoring: Mapping[str, Any]) -> None:
    """``scoring.json``: the protocol, each task's score and reference scores, for ``suite merge`` to rebuild
    the report with."""
    write_json(out_dir / SCORING_FILE, dict(scoring))


def read_scoring(source: Path) -> dict[str, Any]:
    """A suite output folder's ``scoring.json`` (``{}`` when there is none)."""
    path = (source if source.is_dir() else source.parent) / SCORING_FILE
    return json.loads(path.read_text()) if path.is_file() else {}
