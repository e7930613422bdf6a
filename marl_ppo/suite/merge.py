"""Merging suites run on different machines: one marl-eval JSON, one plot and one report (:func:`merge_suites`);
from one suite's output folder, its results rebuilt (a report that failed, another protocol or score).

Each input is a suite's output folder (its ``marl_eval.json``) or a marl-eval JSON file. The inputs
must hold different runs of the same experiment: no run (environment, task, algorithm, seed) twice,
and, once merged, every task of an environment with the same algorithms / variants and the same
runs, with the same evaluation steps and metrics (what marl-eval's aggregation needs). Anything
else is refused with a message naming the task, the variants and the inputs they came from.

>>> run = {"step_1": {"step_count": 10, "return": [1.0]}, "absolute_metrics": {"return": [1.0]}}
>>> a = {"vmas": {"nav": {"mappo": {"seed_0": run}}}}
>>> b = {"vmas": {"nav": {"mappo": {"seed_1": run}}}}
>>> sorted(merge_marl_eval([("A", a), ("B", b)])["vmas"]["nav"]["mappo"])
['seed_0', 'seed_1']
>>> merge_marl_eval([("A", a), ("B", {"vmas": {"bal": {"ippo": {"seed_1": run}}}})])
Traceback (most recent call last):
...
marl_ppo.suite.spec.SuiteError: cannot merge: vmas/bal has algorithms ['ippo'] (from B) but vmas/nav has...
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from marl_ppo.suite._files import write_json
from marl_ppo.suite.marl_eval import validate_marl_eval
from marl_ppo.suite.results import Written, write_results
from marl_ppo.suite.scoring import PROTOCOLS, ScoreSpec, read_scoring
from marl_ppo.suite.spec import SuiteError

__all__ = ["merge_marl_eval", "merge_suites", "read_suite_json"]


def read_suite_json(source: str | Path) -> dict[str, Any]:
    """A suite output folder's ``marl_eval.json``, or a marl-eval JSON file."""
    path = Path(source)
    if path.is_dir():
        path = path / "marl_eval.json"
    if not path.is_file():
        raise SuiteError(f"{source}: no marl-eval JSON there (expected a suite's output folder or a .json file)")
    try:
        return json.loads(path.read_text())
    except ValueError as err:
        raise SuiteError(f"{path}: not valid JSON: {err}") from None


def _from(origin: Mapping[tuple, str], *prefix: str) -> str:
    names = sorted({src for key, src in origin.items() if key[: len(prefix)] == prefix})
    return ", ".join(names)


def merge_marl_eval(sources: Sequence[tuple[str, Mapping[str, Any]]]) -> dict[str, Any]:
    """The union of several marl-eval objects ``[(name, data), ...]``; refuses overlaps and mismatches."""
    merged: dict[str, Any] = {}
    origin: dict[tuple, str] = {}
    for name, data in sources:
        try:
            validate_marl_eval(data)
        except ValueError as err:
            raise SuiteError(f"{name}: {err}") from None
        for env, tasks in data.items():
            for task, algos in tasks.items():
                for algo, runs in algos.items():
                    for run, steps in runs.items():
                        key = (env, task, algo, run)
                        if key in origin:
                            raise SuiteError(f"cannot merge: {'/'.join(key)} is in both {origin[key]} and {name}")
                        origin[key] = name
                        merged.setdefault(env, {}).setdefault(task, {}).setdefault(algo, {})[run] = steps
    if len(sources) == 1:  # one suite's results rebuilt: nothing to match up
        return merged
    for env, tasks in merged.items():
        (ref_task, ref_algos), *_ = tasks.items()
        for task, algos in tasks.items():
            if sorted(algos) != sorted(ref_algos):
                raise SuiteError(
                    f"cannot merge: {env}/{task} has algorithms {sorted(algos)} (from {_from(origin, env, task)}) "
                    f"but {env}/{ref_task} has {sorted(ref_algos)} (from {_from(origin, env, ref_task)}); "
                    "merge suites that ran the same tasks and variants"
                )
        ref_algo, ref_runs = next(iter(ref_algos.items()))
        for task, algos in tasks.items():
            for algo, runs in algos.items():
                if sorted(runs) != sorted(ref_runs):
                    raise SuiteError(
                        f"cannot merge: {env}/{task}/{algo} has runs {sorted(runs)} "
                        f"(from {_from(origin, env, task, algo)}) but {env}/{ref_task}/{ref_algo} has "
                        f"{sorted(ref_runs)}; every task and variant needs the same seeds"
                    )
    try:
        validate_marl_eval(merged, same_shape=True)
    except ValueError as err:
        raise SuiteError(f"cannot merge: {err} (runs of different lengths or evaluation schedules)") from None
    return merged


def _scoring(sources: Sequence[str | Path], protocol: Optional[str]) -> dict[str, Any]:
    """The parts' ``scoring.json`` joined: their protocol (``protocol`` overrides; parts that differ are
    refused without it), what each task was scored on, the reference scores and the interval."""
    parts = [read_scoring(Path(s)) for s in sources]
    found = {p["protocol"] for p in parts if "protocol" in p}
    if protocol is None and len(found) > 1:
        raise SuiteError(f"cannot merge: the parts were reported with protocols {sorted(found)}; choose: --protocol")
    chosen = protocol or (found.pop() if found else "marl-eval")
    if chosen not in PROTOCOLS:
        raise SuiteError(f"--protocol must be one of {list(PROTOCOLS)}, got {chosen!r}")
    joined: dict[str, Any] = {"protocol": chosen, "scored_on": {}, "references": {}, "ci": None}
    for p in parts:
        joined["scored_on"].update(p.get("scored_on", {}))
        joined["references"].update({t: tuple(r) for t, r in p.get("references", {}).items()})
        joined["ci"] = joined["ci"] or p.get("ci")
    return joined


def _holds_other_results(out: Path, sources: Sequence[str | Path]) -> str | None:
    """What results ``out`` holds that are not these sources' own (``None``: nothing, one of the sources, whose
    results a merge rebuilds, or an earlier merge of the same sources)."""
    if not (out / "marl_eval.json").exists():
        return None
    folders = {(Path(s).parent if Path(s).suffix == ".json" else Path(s)).resolve() for s in sources}
    if out.resolve() in folders:
        return None
    record = out / "merged_from.json"
    if record.exists() and set(json.loads(record.read_text()).get("sources", [])) == {
        str(Path(s).resolve()) for s in sources
    }:
        return None
    runs = " and its runs/ hold other runs" if (out / "runs").is_dir() else ""
    return f"already holds a suite's results ({out / 'marl_eval.json'}{runs})"


def merge_suites(
    sources: Sequence[str | Path],
    out: str | Path,
    *,
    plot: bool = True,
    ci: Optional[str] = None,
    title: Optional[str] = None,
    protocol: Optional[str] = None,
    scores: Optional[Mapping[str, ScoreSpec]] = None,
    force: bool = False,
) -> Written:
    """Merges suite outputs (or rebuilds one's) into ``out``: ``marl_eval.json``, ``scoring.json``,
    ``returns.png`` and ``report.md`` (:func:`~marl_ppo.suite.results.write_results`). ``protocol``, ``ci``:
    the parts' unless given; ``scores``: ``{"<env>/<task>": score}`` for tasks to score anew (a task its suite
    could not score: a competitive one). An ``out`` that already holds other results (another suite's output, or
    a merge of other sources) is refused unless ``force``: nothing is replaced without being asked."""
    if not sources:
        raise SuiteError("merge needs at least one suite output")
    if not force and (why := _holds_other_results(Path(out), sources)):
        raise SuiteError(f"--out {out} {why}: merging would replace them; give another --out, or --force")
    merged = merge_marl_eval([(str(s), read_suite_json(s)) for s in sources])
    scoring = _scoring(sources, protocol)
    unknown = sorted(set(scores or {}) - {f"{e}/{t}" for e, tasks in merged.items() for t in tasks})
    if unknown:
        tasks = sorted(f"{e}/{t}" for e, ts in merged.items() for t in ts)
        raise SuiteError(f"--score names {unknown}, which the results do not have; they have {tasks}")
    out = Path(out)
    written = write_results(
        merged,
        out,
        specs=dict(scores or {}),
        protocol=scoring["protocol"],
        references=scoring["references"],
        ci=ci or scoring["ci"] or "auto",
        plot=plot,
        title=title,
        scored_before=scoring["scored_on"],
    )
    write_json(out / "merged_from.json", {"sources": [str(Path(s).resolve()) for s in sources]})
    return written
