"""The trainer: collect, route rewards, advantages per group, PPO epochs with one aggregated step.

One loop and one shape for one seed or many in one process (``train.seeds``):
:func:`~marl_ppo.run.build.build` wires the program once for every seed (one env of S x E copies),
:func:`~marl_ppo.run.build.train_state` stacks their states, :class:`Trainer` runs the loop, and each seed logs,
evaluates and checkpoints into its own run directory (:class:`~marl_ppo.run.record.SeedRecord`);
the update is the algorithm's update mode (:mod:`marl_ppo.algorithms`; the joint step,
:func:`~marl_ppo.core.update.ppo_update`), the same for every S. On N processes (``train.ranks``, torchrun)
each rank runs the same loop on its own env copies and rank 0 writes the run (:mod:`marl_ppo.run.ranks`).

>>> from marl_ppo.config import load_config
>>> cfg = load_config(overrides=["env.num_envs=4", "env.max_steps=10", "train.frames_per_batch=40",
...     "train.total_frames=80", "train.num_epochs=1", "train.minibatch_size=20", "model.hidden=[16]",
...     "log.progress=false", "log.plot=false"])
>>> import tempfile; tmp = tempfile.mkdtemp()
>>> summary = Trainer(cfg, run_dir=tmp).fit()
>>> summary["iteration"], summary["frames"]
(2, 80)
>>> import dataclasses
>>> group = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, seeds=[0, 1]),
...     log=dataclasses.replace(cfg.log, root=tmp, name="demo"))
>>> [(s["run_dir"].rpartition("/")[2], s["frames"]) for s in Trainer(group).fit()]
[('demo-seed0', 80), ('demo-seed1', 80)]
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Sequence

from tensordict import TensorDictBase

from marl_ppo.algorithms import algorithm
from marl_ppo.config import Config
from marl_ppo.core.update import StopRequested, TrainingError
from marl_ppo.core.update_modes import update_fn
from marl_ppo.envs import EnvFactory
from marl_ppo.options import ConfigError
from marl_ppo.run.build import build, build_collector, record_factory, train_state
from marl_ppo.run.callbacks import Callbacks
from marl_ppo.run.directory import collector_text, finished_summary, run_directory, start_notes
from marl_ppo.run.frozen_images import checked_first_batch
from marl_ppo.run.group_result import write_group_result
from marl_ppo.run.metrics import episode_returns, iteration_metrics
from marl_ppo.run.payoff import check_payoff
from marl_ppo.run.ranks import join, open_records, restart_envs, stop_checks
from marl_ppo.run.record import CHECKPOINT_FORMAT
from marl_ppo.run.resume import EpisodeRestarts
from marl_ppo.run.seeds import (
    check_seeds,
    collection_policy,
    seed_configs,
    seed_group_dir,
)  # fmt: skip
from marl_ppo.run.signals import RunInterrupted, StopSignals

__all__ = ["episode_returns", "Trainer", "TrainingError", "RunInterrupted", "CHECKPOINT_FORMAT"]


class Trainer:
    """Runs a config into run directories: resolved config, reward table, logs, checkpoints, plots.

    ``cfg`` trains one seed (``train.seed``) into ``run_dir``, or, with ``train.seeds``, S seeds in one
    process, each into its own directory (``<log.name or run name>-seed<s>``) as its single run would
    write it, and the group's result across them into :attr:`group_dir` (:mod:`~marl_ppo.run.group_result`);
    ``configs`` and ``run_dirs`` give each seed's config and directory instead (a suite's jobs). The seeds
    share one env of ``S x env.num_envs`` copies, one collector, one update and one :attr:`state`
    (:class:`~marl_ppo.core.state.TrainState`). :meth:`fit` returns the summary, or the seeds' summaries.

    Everything is built and validated (config, devices, env, reward table) before a run directory
    is created. ``resume=True`` continues the run in ``run_dir`` (each seed's, for a group) from its
    newest usable checkpoint exactly (``docs/runs.md``); a directory without one starts afresh.
    ``env_fn`` (a notebook's own env factory) builds the env instead of ``cfg.env``, ``players`` (``{group:
    act}``, a notebook's scripted opponents) play those groups; ``config.yaml`` names both where it can
    (for ``marl-ppo eval`` and ``--resume``). ``callbacks`` run your code at fixed points of the run
    (:mod:`marl_ppo.run.callbacks`; with S seeds, the per-seed hooks once per seed). Under torchrun
    (``train.ranks``) every rank runs this loop on its own env copies; rank 0 writes the run and runs the
    callbacks (:mod:`~marl_ppo.run.ranks`)."""

    def __init__(
        self,
        cfg: Config,
        run_dir: str | Path | None = None,
        *,
        resume: bool = False,
        env_fn: EnvFactory | None = None,
        players: Mapping[str, Callable] | None = None,
        callbacks: Sequence[object] = (),
        configs: Sequence[Config] | None = None,
        run_dirs: Sequence[str | Path | None] | None = None,
    ) -> None:
        cfg, self.ranks = join(record_factory(cfg, env_fn, players))  # torchrun's processes, or one
        self.env_fn, self.callbacks = env_fn, Callbacks(callbacks if self.ranks.main else ())  # rank 0's
        self.grouped = configs is not None or bool(cfg.train.seeds)
        configs = list(configs) if configs is not None else seed_configs(cfg)
        self.seeds = [c.train.seed for c in configs]
        if run_dirs is None and run_dir is not None and self.grouped:
            raise ConfigError(f"train.seeds={self.seeds}: each seed has its own directory; give run_dirs, not run_dir")
        run_dirs = list(run_dirs) if run_dirs is not None else [run_dir] * len(configs)
        check_seeds(configs)  # what S seeds cannot run, before anything is built
        self.cfg = configs[0]
        self.cfg.check_machine()  # before a run directory exists
        planned = [run_directory(c, d, resume or not self.ranks.main) for c, d in zip(configs, run_dirs)]
        self.parts = parts = build(self.cfg, self.seeds, env_fn=env_fn, players=players)  # one env, S x E copies
        self.state = state = train_state(self.cfg, parts)
        check_payoff(self.cfg, parts)
        self.records = open_records(self.ranks, configs, planned, parts, state, resume=resume, env_fn=env_fn)
        self.cfg = self.records[0].cfg  # its frozen opponents pinned into its directory
        self.env, self.policy = parts.env, collection_policy(parts, state.stack)  # seed s on copies [s E, (s+1) E)
        self.group_dir = seed_group_dir(cfg, self.run_dirs, resume) if self.ranks.main else None  # resumed too
        if self.grouped and self.ranks.main:
            self.records.write_group(self.seeds, self.group_dir)
        self.collector_used: str | None = None  # the collector's description, once fit() built it
        self._stop_requested, self._restart = False, EpisodeRestarts()

    @property
    def iteration(self) -> int:
        return self.state.iteration

    @property
    def frames(self) -> int:
        """Frames collected per seed (by every rank)."""
        return self.state.frames

    @property
    def scheduler(self):
        return self.state.scheduler

    @property
    def run_dirs(self) -> list[Path]:
        return self.records.run_dirs

    @property
    def run_dir(self) -> Path:
        """The (first seed's) run directory."""
        return self.records[0].run_dir

    @property
    def resume_notes(self) -> list[str]:
        return self.records[0].resume_notes

    # -- the loop -----------------------------------------------------------------------

    def fit(self) -> dict[str, Any] | list[dict[str, Any]]:
        """Trains to ``train.total_frames``; returns the summary (also ``summary.json``), or the seeds' summaries.

        Raises :class:`RunInterrupted` after SIGINT/SIGTERM to any rank (a checkpoint of every seed's last
        completed iteration written, the loggers closed, ``error.txt`` saying why)."""
        cfg, state = self.cfg, self.state
        remaining = cfg.train.total_frames - state.frames
        if remaining <= 0 or self._stop_requested:  # finished or stopped: each seed completes or keeps its record
            return self._result([self._completed(s) for s in range(len(self.records))])
        batch = cfg.train.frames_per_batch * self.ranks.world  # each rank's frames_per_batch
        remaining = -(-remaining // batch) * cfg.train.frames_per_batch  # this rank's, in whole batches
        reuse = dict(reuse_batch=not self.callbacks.has("on_batch_collected"))  # a batch no callback reads: not cloned
        collector = build_collector(cfg, self.env, self.policy, total_frames=remaining, seeds=state.seeds, **reuse)
        self.collector_used = collector_text(collector, self.env, self.seeds if self.grouped else (), self.ranks.world)
        for record in (r for r in self.records if r.writes):  # rank 0's
            start_notes(record.run_dir, self.collector_used, cfg.train)
        resumed = self.records[0].resume
        if resumed is not None and resumed.rng is not None:
            restart_envs(self._restart, collector, resumed.rng, cfg.train.seed + self.iteration, self.ranks)
        progress = self.records[0].logger.progress(cfg.train.total_frames, state.frames, enabled=cfg.log.progress)
        try:
            with StopSignals() as stop:
                should_stop, in_update = stop_checks(stop, self.ranks, state.step)  # a signal to any rank
                t0 = time.perf_counter()
                for batch in checked_first_batch(collector, self.parts.groups, enabled=cfg.env.image.check_changes):
                    if should_stop():
                        raise StopRequested
                    self._iterate(batch, time.perf_counter() - t0, should_stop=in_update, progress=progress)
                    collector.update_policy_weights_()
                    if should_stop():
                        raise StopRequested
                    if self.checkpoint_due() and state.frames < cfg.train.total_frames:
                        for s in self.records.live():
                            self._save(s)
                        rng = self.records[self.records.live()[0]].snapshot["rng"]
                        restart_envs(self._restart, collector, rng, cfg.train.seed + self.iteration, self.ranks)
                    if self.ranks.any(self._stop_requested):  # after this checkpoint (whose callbacks may ask it)
                        break
                    t0 = time.perf_counter()
        except StopRequested:
            err = self.records.interrupted(stop.requested, self.state, self._save)
            raise err from None
        except BaseException as err:
            self.records.fail_all(err)
            raise
        finally:
            progress.close()
            collector.shutdown()
        try:
            return self.finish()
        except BaseException as err:
            self.records.fail_all(err)
            raise

    def _iterate(self, batch: TensorDictBase, t_collect: float, *, should_stop, progress) -> None:
        """One iteration on a collected batch: rewards, advantages, update, then each seed's record."""
        cfg, parts, state = self.cfg, self.parts, self.state
        t1 = time.perf_counter()
        batch = parts.reward_table(batch)  # elementwise: every seed's env copies at once
        batch = state.stack.compute_advantages(state.stack.split(batch))  # [S, E, T]
        self.callbacks("on_batch_collected", self, batch)
        update = update_fn(algorithm(cfg.loss.algorithm), cfg.loss)  # the algorithm's update mode, its options bound
        stats = update(
            state.stack,
            state.step,
            batch,
            num_epochs=cfg.train.num_epochs,
            minibatch_size=cfg.train.minibatch_size,
            should_stop=should_stop,
            seq_len=cfg.model.seq_len,
            generator=state.generators,
            entropy_scale=state.entropy_scale,
        )
        self._record(batch, stats, t_collect=t_collect, t_update=time.perf_counter() - t1, progress=progress)

    def _record(self, batch: TensorDictBase, stats: TensorDictBase, *, t_collect: float, t_update: float, progress):
        """What follows an update: the schedule and counters, then each seed's metrics, evaluation and snapshot."""
        cfg, parts, state = self.cfg, self.parts, self.state
        lr, entropy_scale = state.scheduler.get_last_lr()[0], state.entropy_scale  # what this update used
        state.scheduler.step()
        state.iteration += 1
        frames = batch.numel() // state.seeds * self.ranks.world  # the run's frames: every rank's
        state.frames += frames
        pool_metrics = parts.after_update(state.iteration, batch)  # a pool's ratings and snapshot of this iteration
        for s in self.records.live():
            record = self.records[s]
            if not bool(state.step.alive[s]):  # a non-finite loss: this seed stops, its last good state kept
                self.records.stop(s, TrainingError(state.step.failures[s]))
                continue
            own, own_stats = batch[s], stats[s]
            state.returns[s] = episode_returns(own, list(parts.groups)) or state.returns[s]
            with state.stack.seed(s) as router:
                metrics = iteration_metrics(
                    own, own_stats, state.returns[s], router, t_collect=t_collect, t_update=t_update,
                    iteration=state.iteration, groups=parts.groups, entropy_scale=entropy_scale,
                )  # fmt: skip
                metrics.update(pool_metrics, **{"train/lr": lr})
                if cfg.log.eval_every and state.iteration % cfg.log.eval_every == 0:
                    metrics.update(record.evaluate(state.iteration, state.frames))
            if record.last_eval_iteration == state.iteration:
                self.callbacks("on_evaluation_end", self, record.eval_returns)
            record.logger.log(metrics, state.frames)
            self.callbacks("on_update_end", self, metrics)
            record.keep(record.checkpoint(state, s, self.checkpoint_due()))
        progress.update(frames, {g: state.returns[0].get(g) for g in parts.groups})

    def stop(self) -> None:
        """Ends the run after the current iteration, as when ``train.total_frames`` is reached
        (final checkpoint, evaluation, plots, summary): for a callback's early stopping. Before
        :meth:`fit`, on a resumed run without a summary: :meth:`fit` completes its record, untrained."""
        self._stop_requested = True

    def finish(self) -> dict[str, Any] | list[dict[str, Any]]:
        """Each seed's final checkpoint, evaluation, plots and summary."""
        return self._result([self._finish_seed(s) for s in self.records.live()])

    def _finish_seed(self, s: int) -> dict[str, Any]:
        record, state = self.records[s], self.state
        if record.saved_iteration != state.iteration:
            self._save(s)
        fresh = {}  # the last iteration's evaluation unless it has just been done
        if record.last_eval_iteration != state.iteration:
            with state.stack.seed(s):
                fresh = dict(record.evaluate(state.iteration, state.frames))
            self.callbacks("on_evaluation_end", self, record.eval_returns)
        with state.stack.seed(s):  # a pool's ladder plays this seed's policy
            summary = record.finish(state.iteration, state.frames, fresh, self.collector_used)
        self.callbacks("on_run_end", self, summary)
        return summary

    def _completed(self, s: int) -> dict[str, Any]:
        """A seed that has nothing left to train: its record completed, or kept as it is when it has a summary."""
        record = self.records[s]
        if not (record.run_dir / "summary.json").exists():
            return self._finish_seed(s)  # ended (or stopped) after its last checkpoint, before its summary
        record.close()
        return finished_summary(record.run_dir, self.frames, self.cfg.train.total_frames)

    def _result(self, summaries: list[dict[str, Any]]) -> dict[str, Any] | list[dict[str, Any]]:
        if self.group_dir is not None:  # train.seeds: the group's summary and figures across its seeds
            self.group_summary = write_group_result(self.group_dir, self.run_dirs, self.seeds, self.cfg.log.plot)
        return summaries if self.grouped else summaries[0]

    def close(self) -> None:
        """Closes every seed's loggers and evaluation env (the collector closes the training env)."""
        self.records.close()

    # -- checkpoints --------------------------------------------------------------------

    def checkpoint_due(self) -> bool:
        every = self.cfg.log.checkpoint_every
        return bool(every) and self.iteration % every == 0

    def _save(self, s: int) -> None:
        """Writes seed ``s``'s last completed iteration (``iter_XXXXX.pt`` and ``last.pt``)."""
        self.callbacks("on_checkpoint", self, self.records[s].save())
