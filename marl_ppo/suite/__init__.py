"""Benchmark suites: tasks × sweep variants × seeds, run here (one after another or in worker
processes), on a Ray cluster or as a SLURM job array, with results in the marl-eval JSON format
(the one BenchMARL writes) and an aggregate plot; suites run apart merge into one.

A suite is a YAML file::

    name: vmas_small                    # optional, for titles
    tasks:                              # each: a train config file, or a mapping
      - ../navigation.yaml              #   paths are relative to the suite file (then to the cwd)
      - config: ../balance.yaml
        name: balance                   #   task name in the results (default: env.scenario)
        overrides: [env.kwargs.n_agents=3]
        score: agents                   #   what it is scored on: a group, [groups] (summed), or a metric
                                        #   such as vs_random/red/win_rate (default: see suite/scoring.py)
        reference: {random: -1.0, expert: 1.0}   # for protocol: reference
    seeds: [0, 1, 2]
    overrides:                          # for every run: a list of key=value, or a mapping
      - train.total_frames=60000
    sweep:                              # optional: a grid over any config keys, crossed with tasks and seeds
      train.lr: [1.0e-3, 3.0e-4]        #   variants named lr=0.001, lr=0.0003 (results: mappo[lr=0.001])
      loss.algorithm: [mappo, ippo]
    workers: 2                          # processes at once (1: one after another, in this process)
    out: runs/suites/vmas_small         # relative to the cwd
    threads: 1                          # torch threads per worker process (default 1 when workers > 1)
    absolute_eval_factor: 10            # final evaluation over factor × log.eval_episodes episodes
    slurm: {partition: gpu, time: 60, cpus: 1, gpus: 0}   # the slurm launcher's resources (SlurmSpec)
    protocol: marl-eval                 # the report's normalisation: marl-eval (default), final or reference

Overrides apply in this order: the task's config file, the suite's ``overrides``, the task's
``overrides``, the sweep variant's values, then the command line's ``--override``; ``train.seed``
comes from ``seeds``. A variant's name (:mod:`marl_ppo.suite.sweep`) lists its resolved values by
short key; the results call its algorithm ``<algorithm>[<variant>]``.
Unknown keys (in the suite or in a task) raise :class:`SuiteError` naming the key and the allowed ones;
config keys are checked by :func:`marl_ppo.config.load_config` before anything runs.

Run it::

    python -m marl_ppo.suite configs/suites/vmas_small.yaml [--workers N] [--out DIR] [--override k=v ...]
    marl-ppo suite configs/suites/tiny.yaml --launcher ray [--ray-address ADDR]   # one Ray task per run
    marl-ppo suite configs/suites/tiny.yaml --launcher slurm                      # a submitit job array
    marl-ppo suite merge OUT1 OUT2 --out MERGED                                   # suites run apart
    marl-ppo train -m configs/navigation.yaml train.lr=1e-3,3e-4 train.seed=0,1   # a grid from the CLI
    python examples/benchmarks/suite.py configs/suites/tiny.yaml --workers 2 --out /tmp/tiny

Each run gets its own run directory ``<out>/runs/<task>-<algorithm>[-<variant>]-seed<N>/`` (the trainer's usual
contents plus ``suite_job.json``, ``suite_result.json``, ``absolute_metrics.json`` and, for worker
processes, ``worker.log``). A failing run is reported (its ``error.txt`` and the summary table) and
the other runs go on. A run directory whose ``suite_result.json`` says ``ok`` for the same job is
kept, not run again (``--rerun`` forces it). At the end the suite writes:

* ``<out>/marl_eval.json`` (:func:`to_marl_eval`), checked by :func:`validate_marl_eval`::

      {environment: {task: {algorithm: {"seed_<N>": {
          "step_<K>": {"step_count": <frames>, "return": [...], "<group>_return": [...], "score": [...]},
          ...,
          "absolute_metrics": {"return": [...], "<group>_return": [...], "score": [...]}}}}}}

  as BenchMARL's ``JsonWriter`` (``benchmarl/experiment/logger.py``) and marl-eval's README lay it
  out: environment ``vmas``/``pettingzoo``, task the scenario, algorithm ``mappo``/``ippo``/
  ``clip_ppo``, run ``seed_<N>``; ``step_<K>`` is the K-th evaluation (1-based, in frame order);
  ``<group>_return`` is the group's evaluation return (mean over its agents) and ``return`` the
  mean over groups; with ``log.eval_opponents``, ``vs_<source>/<seat>/{win_rate,draw_rate,loss_rate,return}``;
  ``score`` is what the task is scored on (:mod:`marl_ppo.suite.scoring`: absent where the task could not be
  scored, and the report says why), the metric marl-eval normalises: ``data_process_pipeline(data,
  ["score"])``. The per-step lists hold one value, the mean over ``log.eval_episodes`` episodes,
  because that is what the trainer logs (marl-eval accepts one element or one per episode).
  ``absolute_metrics`` is a final deterministic evaluation of the final policy over
  ``absolute_eval_factor × log.eval_episodes`` episodes, one value per episode (marl-eval's
  "10 times the evaluation episodes"); BenchMARL instead keeps the best value seen (one element).
* ``<out>/returns.png`` (:func:`plot_suite`): one panel per task, the mean evaluation score vs frames
  over seeds with a 95% bootstrap band (``--ci t``: Student's t) and the final evaluation's point;
* ``<out>/report.md`` and ``report.json`` (:mod:`marl_ppo.suite.report`): the final scores per task with
  the plot's interval, and rliable's aggregates per environment under the suite's ``protocol``
  (:mod:`marl_ppo.suite.normalise`; marl-eval's by default), naming what it could not compute and why;
  ``scoring.json`` keeps the protocol and scores for ``suite merge``, which rebuilds all of them.

``to_marl_eval`` also reads plain ``marl-ppo train`` run directories (names from ``config.yaml``).
"""

# Everything importable from the former single module marl_ppo/suite.py stays importable here.
from marl_ppo.suite._files import ABSOLUTE_FILE, JOB_FILE, LOG_FILE, RESULT_FILE  # noqa: F401
from marl_ppo.suite.cli import build_parser, main  # noqa: F401
from marl_ppo.suite.jobs import RunResult, final_evaluation
from marl_ppo.suite.marl_eval import run_to_marl_eval, to_marl_eval, validate_marl_eval, write_marl_eval
from marl_ppo.suite.merge import merge_marl_eval, merge_suites
from marl_ppo.suite.plot import confidence_band, plot_suite, suite_curves  # noqa: F401
from marl_ppo.suite.runner import JSON_NAME, PLOT_NAME, SuiteResult, run_suite  # noqa: F401
from marl_ppo.suite.spec import SUITE_KEYS, TASK_KEYS, Job, SlurmSpec, Suite, SuiteError, TaskSpec, plan  # noqa: F401

__all__ = [
    "SuiteError",
    "TaskSpec",
    "Suite",
    "Job",
    "RunResult",
    "SuiteResult",
    "plan",
    "run_suite",
    "final_evaluation",
    "run_to_marl_eval",
    "to_marl_eval",
    "write_marl_eval",
    "validate_marl_eval",
    "plot_suite",
    "suite_curves",
    "merge_marl_eval",
    "merge_suites",
    "SlurmSpec",
    "main",
]
