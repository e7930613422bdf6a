"""The marl-eval / BenchMARL JSON format: run directories converted (:func:`to_marl_eval`),
checked (:func:`validate_marl_eval`) and written (:func:`write_marl_eval`)."""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional

from marl_ppo.suite._files import ABSOLUTE_FILE, JOB_FILE, RESULT_FILE, write_json


def _run_names(run_dir: Path) -> tuple[str, str, str, int]:
    """(environment, task, algorithm, seed) of a run: from the suite's job record, else config.yaml.

    A sweep variant's algorithm is ``<algorithm>[<variant>]`` (e.g. ``mappo[lr=0.001]``)."""
    job_file = run_dir / JOB_FILE
    if job_file.exists():
        job = json.loads(job_file.read_text())
        algorithm = f"{job['algorithm']}[{job['variant']}]" if job.get("variant") else job["algorithm"]
        return job["environment"], job["task"], algorithm, int(job["seed"])
    from marl_ppo.config import from_yaml

    cfg_file = run_dir / "config.yaml"
    if not cfg_file.exists():
        raise FileNotFoundError(f"{run_dir} is not a run directory (no {JOB_FILE} and no config.yaml)")
    cfg = from_yaml(cfg_file.read_text())
    return cfg.env.kind, cfg.env.scenario, cfg.loss.algorithm, cfg.train.seed


def _run_failed(run_dir: Path) -> Optional[str]:
    result = run_dir / RESULT_FILE
    if result.exists():
        rec = json.loads(result.read_text())
        if rec.get("status") != "ok":
            return rec.get("error") or "failed"
    if (run_dir / "error.txt").exists():
        return (run_dir / "error.txt").read_text().splitlines()[0]
    if not (run_dir / "summary.json").exists():
        return "no summary.json (the run did not finish)"
    return None


MATCH_METRICS = {"win_rate": "win_rate", "draw_rate": "draw_rate", "loss_rate": "loss_rate", "episode_reward": "return"}


def _eval_metrics(run_dir: Path) -> dict[str, dict[int, float]]:
    """``{json metric: {frames: value}}`` of a run's evaluations: ``<group>_return`` from
    ``eval/<group>/episode_reward``, and ``vs_<source>/<seat>/{win_rate,draw_rate,loss_rate,return}`` from
    ``log.eval_opponents``' matches (``eval/vs_<source>/<seat>/...``)."""
    from marl_ppo.run.logger import read_scalars

    out: dict[str, dict[int, float]] = {}
    for name, points in read_scalars(run_dir).items():
        parts = name.split("/")
        if parts[0] != "eval":
            continue
        if len(parts) == 3 and parts[2] == "episode_reward":
            out[f"{parts[1]}_return"] = dict(points)
        elif len(parts) == 4 and parts[1].startswith("vs_") and parts[3] in MATCH_METRICS:
            out[f"{parts[1]}/{parts[2]}/{MATCH_METRICS[parts[3]]}"] = dict(points)
    return out


def run_to_marl_eval(run_dir: str | Path) -> dict[str, Any]:
    """One run's ``{"step_<K>": {...}, ..., "absolute_metrics": {...}}`` from its logs.

    Evaluation points are the frames at which every group has an ``eval/<group>/episode_reward``
    scalar (the trainer logs them every ``log.eval_every`` iterations and once at the end; where two
    evaluations share a frame count the last one is kept, as :func:`read_scalars` does), and every
    ``log.eval_opponents`` match logged at all of them its rates. ``absolute_metrics`` is the suite's final evaluation
    (``absolute_metrics.json``); a metric it lacks (a run written before it played the matches) is the
    last logged evaluation's.
    """
    run_dir = Path(run_dir)
    evals = _eval_metrics(run_dir)
    groups = sorted(m[: -len("_return")] for m in evals if "/" not in m)
    if not groups:
        raise ValueError(f"{run_dir}: no evaluation scalars (eval/<group>/episode_reward) in logs/scalars")
    frames = sorted(set.intersection(*(set(evals[f"{g}_return"]) for g in groups)))
    # a match's rates are logged when it finished an episode: kept where they are at every evaluation
    matches = sorted(m for m in evals if "/" in m and set(frames) <= set(evals[m]))
    data: dict[str, Any] = {}
    for k, f in enumerate(frames, start=1):
        step: dict[str, Any] = {"step_count": int(f)}
        values = [evals[f"{g}_return"][f] for g in groups]
        step.update({f"{g}_return": [evals[f"{g}_return"][f]] for g in groups})
        step["return"] = [sum(values) / len(values)]  # BenchMARL's order: groups, then their mean
        step.update({m: [evals[m][f]] for m in matches})
        data[f"step_{k}"] = step
    last = data[f"step_{len(frames)}"]
    absolute = run_dir / ABSOLUTE_FILE
    final = json.loads(absolute.read_text())["metrics"] if absolute.exists() else {}
    # no final evaluation recorded (a plain run), or a metric it lacks: the last logged evaluation's
    data["absolute_metrics"] = {m: list(final.get(m, last[m])) for m in last if m != "step_count"}
    return data


def to_marl_eval(run_dirs: Iterable[str | Path], *, skip_failed: bool = True) -> dict[str, Any]:
    """The marl-eval / BenchMARL JSON object for several run directories.

    Failed or unfinished runs are left out with a warning (``skip_failed=False``: an error).
    Two runs with the same environment, task, algorithm and seed are an error.
    """
    out: dict[str, Any] = {}
    where: dict[tuple, Path] = {}
    for run_dir in map(Path, run_dirs):
        why = _run_failed(run_dir)
        if why is not None:
            if not skip_failed:
                raise ValueError(f"{run_dir}: run failed: {why}")
            warnings.warn(f"left out of the marl-eval JSON: {run_dir} ({why})", stacklevel=2)
            continue
        env, task, algo, seed = _run_names(run_dir)
        key = (env, task, algo, seed)
        if key in where:
            raise ValueError(f"{run_dir} and {where[key]} are both {env}/{task}/{algo}/seed_{seed}")
        where[key] = run_dir
        out.setdefault(env, {}).setdefault(task, {}).setdefault(algo, {})[f"seed_{seed}"] = run_to_marl_eval(run_dir)
    return out


def write_marl_eval(data: Mapping[str, Any], path: str | Path) -> Path:
    """Checks ``data`` with :func:`validate_marl_eval` and writes it as JSON (strict: no NaN)."""
    validate_marl_eval(data)
    path = Path(path)
    write_json(path, data)
    return path


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def validate_marl_eval(obj: Any, *, same_shape: bool = False) -> None:
    """Checks the marl-eval layout; raises :class:`ValueError` naming the first bad path.

    ``{env: {task: {algorithm: {run: {"step_<K>": {"step_count": int, metric: [numbers]},
    ..., "absolute_metrics": {metric: [numbers]}}}}}}``: names are non-empty strings (algorithm
    names without commas, as marl-eval requires), every run has at least one ``step_<K>`` and an
    ``absolute_metrics``, the steps' ``step_count`` grows with K, every step of a run has the same
    metrics and ``absolute_metrics`` has those metrics too, every metric is a non-empty list of
    finite numbers. ``same_shape=True`` also checks what marl-eval's aggregation needs across an
    environment: the same algorithms in every task, the same number of runs, the same steps and metrics.

    >>> run = {"step_1": {"step_count": 6000, "return": [1.0]}, "absolute_metrics": {"return": [1.5, 1.3]}}
    >>> validate_marl_eval({"vmas": {"navigation": {"mappo": {"seed_0": run}}}})
    >>> del run["absolute_metrics"]
    >>> validate_marl_eval({"vmas": {"navigation": {"mappo": {"seed_0": run}}}})
    Traceback (most recent call last):
    ...
    ValueError: marl-eval JSON: at vmas/navigation/mappo/seed_0: missing 'absolute_metrics' (the final evaluation)
    """

    def fail(path: list[str], problem: str) -> None:
        raise ValueError(f"marl-eval JSON: at {'/'.join(path) or '<root>'}: {problem}")

    def mapping(value: Any, path: list[str], what: str) -> Mapping:
        if not isinstance(value, Mapping):
            fail(path, f"expected a mapping of {what}, got {type(value).__name__}")
        if not value:
            fail(path, f"expected at least one {what}, got an empty mapping")
        for k in value:
            if not isinstance(k, str) or not k:
                fail(path, f"{what} names must be non-empty strings, got {k!r}")
        return value

    def metric_list(value: Any, path: list[str]) -> None:
        if not isinstance(value, list) or not value:
            fail(path, f"a metric must be a non-empty list of numbers, got {value!r}")
        for i, x in enumerate(value):
            if not _is_number(x):
                fail(path + [f"[{i}]"], f"expected a finite number, got {x!r}")

    shapes: dict[str, list[tuple[list[str], tuple]]] = {}
    for env, tasks in mapping(obj, [], "environment").items():
        for task, algos in mapping(tasks, [env], "task").items():
            for algo, runs in mapping(algos, [env, task], "algorithm").items():
                if "," in algo:
                    fail([env, task, algo], "algorithm names must not contain ',' (marl-eval splits on it)")
                for run, steps in mapping(runs, [env, task, algo], "run").items():
                    path = [env, task, algo, run]
                    mapping(steps, path, "step")
                    step_keys = []
                    for key in steps:
                        if key == "absolute_metrics":
                            continue
                        num = key[len("step_") :] if key.startswith("step_") else ""
                        if not num.isdigit():
                            fail(path + [key], "a run holds only 'step_<K>' entries and 'absolute_metrics'")
                        step_keys.append((int(num), key))
                    if not step_keys:
                        fail(path, "a run needs at least one 'step_<K>' entry")
                    if "absolute_metrics" not in steps:
                        fail(path, "missing 'absolute_metrics' (the final evaluation)")
                    metrics: Optional[set] = None
                    last_count = -1
                    for _, key in sorted(step_keys):
                        step = mapping(steps[key], path + [key], "metric")
                        if "step_count" not in step:
                            fail(path + [key], "missing 'step_count'")
                        count = step["step_count"]
                        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
                            fail(path + [key, "step_count"], f"expected a non-negative integer, got {count!r}")
                        if count <= last_count:
                            fail(path + [key, "step_count"], f"{count} does not grow (previous step: {last_count})")
                        last_count = count
                        names = set(step) - {"step_count"}
                        if not names:
                            fail(path + [key], "no metrics besides 'step_count'")
                        if metrics is None:
                            metrics = names
                        elif names != metrics:
                            fail(
                                path + [key],
                                f"metrics {sorted(names)} differ from the run's first step {sorted(metrics)}",
                            )
                        for m in sorted(names):
                            metric_list(step[m], path + [key, m])
                    absolute = mapping(steps["absolute_metrics"], path + ["absolute_metrics"], "metric")
                    if "step_count" in absolute:
                        fail(path + ["absolute_metrics", "step_count"], "absolute_metrics has no step_count")
                    if set(absolute) != metrics:
                        fail(
                            path + ["absolute_metrics"],
                            f"metrics {sorted(absolute)} differ from the steps' metrics {sorted(metrics or ())}",
                        )
                    for m in sorted(absolute):
                        metric_list(absolute[m], path + ["absolute_metrics", m])
                    shapes.setdefault(env, []).append(
                        (path, (tuple(sorted(k for _, k in step_keys)), tuple(sorted(metrics or ()))))
                    )
    if same_shape:
        for env, tasks in obj.items():
            algo_sets = {task: sorted(algos) for task, algos in tasks.items()}
            first_task, first_algos = next(iter(algo_sets.items()))
            for task, algos in algo_sets.items():
                if algos != first_algos:
                    fail([env, task], f"algorithms {algos} differ from {env}/{first_task}'s {first_algos}")
            n_runs = {(t, a): len(r) for t, algos in tasks.items() for a, r in algos.items()}
            (ref_key, ref_n) = next(iter(n_runs.items()))
            for (t, a), n in n_runs.items():
                if n != ref_n:
                    fail([env, t, a], f"{n} runs, but {'/'.join(ref_key)} has {ref_n}")
            ref_path, ref_shape = shapes[env][0]
            for path, shape in shapes[env]:
                if shape != ref_shape:
                    fail(path, f"steps/metrics {shape} differ from {'/'.join(ref_path)}'s {ref_shape}")
