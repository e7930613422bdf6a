"""The trainer: collect, route rewards, advantages per group, PPO epochs with one aggregated step.

Reads top to bottom: :func:`~marl_ppo.run.build.build` wires the parts from a :class:`~marl_ppo.config.Config`;
:class:`Trainer` runs the loop, logs, evaluates and checkpoints; :func:`~marl_ppo.core.update.ppo_update` is the update.

>>> from marl_ppo.config import load_config
>>> cfg = load_config(overrides=["env.num_envs=4", "env.max_steps=10", "train.frames_per_batch=40",
...     "train.total_frames=80", "train.num_epochs=1", "train.minibatch_size=20", "model.hidden=[16]",
...     "log.progress=false", "log.plot=false"])
>>> import tempfile; tmp = tempfile.mkdtemp()
>>> summary = Trainer(cfg, run_dir=tmp).fit()
>>> summary["iteration"], summary["frames"]
(2, 80)
"""

from __future__ import annotations

import copy
import sys
import time
from pathlib import Path
from typing import Any, Sequence

import torch
from tensordict import TensorDictBase

from marl_ppo.collect.collectors import BatchCollector
from marl_ppo.config import Config, to_container, to_yaml
from marl_ppo.core.update import StopRequested, TrainingError, ppo_update
from marl_ppo.envs import EnvFactory
from marl_ppo.run.build import build, build_collector, record_factory, train_state
from marl_ppo.run.callbacks import Callbacks
from marl_ppo.run.checkpoints import rng_state, write_checkpoint
from marl_ppo.run.directory import finished_summary, note, record_collector, run_directory, write_summary
from marl_ppo.run.evaluation import Evaluator
from marl_ppo.run.logger import RunLogger
from marl_ppo.run.matches import Matches
from marl_ppo.run.metrics import episode_returns, iteration_metrics
from marl_ppo.run.resume import restart_episodes, resume_point, write_resume_log
from marl_ppo.run.signals import RunInterrupted, StopSignals
from marl_ppo.run.video import FrameRecorder

__all__ = ["episode_returns", "Trainer", "TrainingError", "RunInterrupted"]

CHECKPOINT_FORMAT = 2  # 2: weights_only-loadable (RNG states as tensors/lists); 1: numpy RNG arrays


class Trainer:
    """Runs a config into a run directory: resolved config, reward table, logs, checkpoints, plots.

    Everything is built and validated (config, devices, env, reward table) before the run
    directory is created. ``resume=True`` continues the run in ``run_dir`` from its newest usable
    checkpoint (see ``docs/runs.md``): counters, parameters, optimizer, schedules and RNG states
    carry on, the logs drop what was written after the checkpoint, and the envs restart their
    episodes from a seed of the iteration, as the uninterrupted run does at every periodic
    checkpoint, so that the resumed run reproduces it exactly. A run directory without a
    checkpoint resumes as a fresh start.

    ``env_fn`` (a notebook's own env factory) builds the env instead of ``cfg.env``; the run's
    ``config.yaml`` names it as ``env.factory`` where it can, for ``marl-ppo eval`` and ``--resume``.
    ``callbacks`` run your code at fixed points of the run (:mod:`marl_ppo.run.callbacks`).
    Everything the run changes as it trains is :attr:`state` (:class:`~marl_ppo.core.state.TrainState`).
    """

    def __init__(
        self,
        cfg: Config,
        run_dir: str | Path | None = None,
        *,
        resume: bool = False,
        env_fn: EnvFactory | None = None,
        callbacks: Sequence[object] = (),
    ) -> None:
        cfg = record_factory(cfg, env_fn)
        self.cfg, self.env_fn, self.callbacks = cfg, env_fn, Callbacks(callbacks)
        cfg.check_machine()  # before the run directory exists
        self.run_dir = run_directory(cfg, run_dir, resume)
        self.parts = build(cfg, env_fn=env_fn)  # a bad env, table or model fails before the run directory exists
        self.state = train_state(cfg, self.parts)
        self.ckpt_dir = self.run_dir / "checkpoints"
        self.evaluator = Evaluator(
            cfg, self.parts.policy, list(self.parts.groups), episodes=cfg.log.eval_episodes, env_fn=env_fn
        )
        self.matches = Matches(cfg, self.parts, cfg.log.eval_opponents, self.evaluator)  # log.eval_opponents
        self._last_eval_iteration: int | None = None
        self._last_eval: dict[str, float] = {}
        self._snapshot: dict[str, Any] | None = None  # the last completed iteration, for a signal
        self._saved_iteration: int | None = None
        self._stop_requested = self._warned_unseeded = self._warned_no_episode = False
        self.collector_used: str | None = None  # the collector's description, once fit() built it
        self._config_yaml = to_yaml(cfg)
        self._resume = resume_point(self.run_dir, cfg, self.state) if resume else None
        if self._resume is not None and self._resume.rng is not None:
            self._saved_iteration = self.state.iteration
            schedule_entropy(cfg, self.parts.router, self.iteration)  # this iteration's, from the config in force
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if self._resume is None or not self._resume.finished:  # a finished run resumed keeps its record
            (self.run_dir / "config.yaml").write_text(self._config_yaml)
        (self.run_dir / "reward_table.txt").write_text(str(self.parts.reward_table) + "\n")
        self.resume_notes = (
            [] if not resume else write_resume_log(self.run_dir, self._resume.notes, self.state.iteration)
        )
        for line in (n for n in self.resume_notes if n.startswith("changed ")):
            note(self.run_dir, line)
        self.logger = RunLogger(
            self.run_dir, cfg.log, cfg.run_name(), resume_step=self.frames if resume else None, config=to_container(cfg)
        )

    @property
    def iteration(self) -> int:
        return self.state.iteration

    @property
    def frames(self) -> int:
        return self.state.frames

    @property
    def scheduler(self) -> torch.optim.lr_scheduler.LRScheduler:
        return self.state.scheduler

    # -- the loop -----------------------------------------------------------------------

    def fit(self) -> dict[str, Any]:
        """Trains to ``train.total_frames``; returns the summary (also ``summary.json``).

        Raises :class:`RunInterrupted` after SIGINT/SIGTERM (a checkpoint of the last completed
        iteration written, the loggers closed, ``error.txt`` saying why).
        """
        cfg, parts = self.cfg, self.parts
        remaining = cfg.train.total_frames - self.frames
        if (remaining <= 0 or self._stop_requested) and not (self.run_dir / "summary.json").exists():
            return self.finish()  # ended (or stopped) after its last checkpoint, before its summary: completed
        if remaining <= 0 or self._stop_requested:  # finished, or stopped before fit with its record: kept
            self.close()
            return finished_summary(self.run_dir, self.frames, cfg.train.total_frames)
        collector = build_collector(cfg, parts.env, parts.policy, total_frames=remaining)
        self.collector_used = record_collector(self.run_dir, collector, parts.env)
        if self._resume is not None and self._resume.rng is not None:
            self._restart_episodes(collector, self._resume.rng)  # as the uninterrupted run did after this checkpoint
        progress = self.logger.progress(cfg.train.total_frames, self.frames, enabled=cfg.log.progress)
        try:
            with StopSignals() as stop:
                t0 = time.perf_counter()
                for batch in collector:
                    if stop.requested:
                        raise StopRequested
                    self._iterate(
                        batch,
                        time.perf_counter() - t0,
                        should_stop=lambda: stop.requested is not None,
                        progress=progress,
                    )
                    collector.update_policy_weights_()
                    if stop.requested:
                        raise StopRequested
                    if self.checkpoint_due() and self.frames < cfg.train.total_frames:
                        self.save()
                        self._restart_episodes(collector, self._snapshot["rng"])
                    if self._stop_requested:  # after this iteration's checkpoint (whose callbacks may ask it)
                        break
                    t0 = time.perf_counter()
        except StopRequested:
            err = self._interrupted(stop.requested)
            self.logger.error(err, reason=str(err))
            self.close()
            raise err from None
        except BaseException as err:
            self.logger.error(err)
            self.close()
            raise
        finally:
            progress.close()
            collector.shutdown()
        try:
            return self.finish()
        except BaseException as err:
            self.logger.error(err)
            self.close()
            raise

    def _iterate(self, batch: TensorDictBase, t_collect: float, *, should_stop, progress) -> None:
        """One iteration on a collected batch: rewards, advantages, update, log, evaluate, snapshot."""
        cfg, parts, state = self.cfg, self.parts, self.state
        t1 = time.perf_counter()
        batch = parts.reward_table(batch)
        parts.router.compute_advantages(batch)
        self.callbacks("on_batch_collected", self, batch)
        stats = ppo_update(
            parts.router,
            parts.step,
            batch,
            num_epochs=cfg.train.num_epochs,
            minibatch_size=cfg.train.minibatch_size,
            should_stop=should_stop,
            seq_len=cfg.model.seq_len,
            generator=state.generator,
        )
        self.record(batch, stats, t_collect=t_collect, t_update=time.perf_counter() - t1, progress=progress)

    def record(
        self, batch: TensorDictBase, stats: TensorDictBase, *, t_collect: float, t_update: float, progress
    ) -> None:
        """What follows an update (also a seed's of many in one process): schedules, counters, metrics, evaluation."""
        cfg, parts, state = self.cfg, self.parts, self.state
        lr = state.scheduler.get_last_lr()[0]  # the rate this update used
        state.scheduler.step()
        state.iteration += 1
        state.frames += batch.numel()
        pool_metrics = parts.after_update(state.iteration, batch)  # a pool's ratings and snapshot of this iteration
        state.last_returns = episode_returns(batch, list(parts.groups)) or state.last_returns
        metrics = iteration_metrics(
            batch,
            stats,
            state.last_returns,
            parts.router,
            t_collect=t_collect,
            t_update=t_update,
            iteration=state.iteration,
            groups=parts.groups,
        )
        metrics.update(pool_metrics, **{"train/lr": lr})
        schedule_entropy(cfg, parts.router, state.iteration)  # the next update's, as a resume at this point sets it
        if cfg.log.eval_every and state.iteration % cfg.log.eval_every == 0:
            metrics.update(self._evaluate())
        self.logger.log(metrics, state.frames)
        self.callbacks("on_update_end", self, metrics)
        progress.update(batch.numel(), {g: state.last_returns.get(g) for g in parts.groups})
        # kept in memory: a signal during the next iteration checkpoints this one (a few MB, ~ms)
        self._snapshot = copy.deepcopy(self._checkpoint())

    def _evaluate(self) -> dict[str, float]:
        """The run's evaluation (:class:`~marl_ppo.run.evaluation.Evaluator`), logged as ``eval/...``."""
        recorder = FrameRecorder() if self.cfg.log.video else None
        result = self.evaluator(callback=recorder)
        if recorder is not None:
            video = recorder.save(self.run_dir / "videos" / f"eval_iter{self.iteration:05d}.gif")
            self.logger.log_file("eval/video", video, self.frames)
        if result.episodes == 0 and not self._warned_no_episode:  # nothing to log as a return
            self._warned_no_episode = True
            print(f"marl-ppo: evaluation at iteration {self.iteration}: {result.no_episode_message()}", file=sys.stderr)
        self._last_eval_iteration = self.iteration
        self._last_eval = {f"eval/{g}/episode_reward": r for g, r in result.returns.items()}
        self._last_eval["eval/episodes"] = result.episodes
        self._last_eval.update(self.matches.metrics())
        self.callbacks("on_evaluation_end", self, result.returns)
        return self._last_eval

    def stop(self) -> None:
        """Ends the run after the current iteration, as when ``train.total_frames`` is reached
        (final checkpoint, evaluation, plots, summary): for a callback's early stopping. Before
        :meth:`fit`, on a resumed run without a summary: :meth:`fit` completes its record, untrained."""
        self._stop_requested = True

    def finish(self) -> dict[str, Any]:
        """The final checkpoint, evaluation, plots and summary."""
        if self._saved_iteration != self.iteration:
            self.save()
        # the last iteration's evaluation unless it has just been done, and a pool's payoff matrix and ratings
        fresh = {} if self._last_eval_iteration == self.iteration else dict(self._evaluate())
        fresh.update(self.matches.ladder(self.run_dir))
        self.logger.log(fresh, self.frames)
        final = {**self._last_eval, **fresh}
        if self.cfg.log.plot:
            from marl_ppo.run.plots import plot_runs

            for path in plot_runs([self.run_dir], self.run_dir / "plots"):
                self.logger.log_file(f"plots/{path.stem}", path, self.frames)
        summary = write_summary(self.run_dir, self.iteration, self.frames, final, self.collector_used)
        self.logger.log_summary(summary)
        self.close()
        self.callbacks("on_run_end", self, summary)
        return summary

    def close(self) -> None:
        """Closes the loggers and the evaluation env (the collector closes the training env)."""
        self.logger.close()
        self.evaluator.close()

    # -- checkpoints --------------------------------------------------------------------

    def checkpoint_due(self) -> bool:
        every = self.cfg.log.checkpoint_every
        return bool(every) and self.iteration % every == 0

    def _checkpoint(self) -> dict[str, Any]:
        """The training state and the run's records, as tensors and plain containers (``weights_only`` loads it)."""
        return {
            "format": CHECKPOINT_FORMAT,
            **self.state.state_dict(),
            # whether the uninterrupted run restarts its episodes right after this checkpoint
            "episode_boundary": self.checkpoint_due(),
            "rng": rng_state(),
            "config": self._config_yaml,
        }

    def save(self, checkpoint: dict[str, Any] | None = None) -> None:
        """Writes ``iter_XXXXX.pt`` and ``last.pt`` atomically (default: the last completed iteration's)."""
        checkpoint = self._snapshot if checkpoint is None else checkpoint
        path = self.ckpt_dir / f"iter_{checkpoint['iteration']:05d}.pt"
        write_checkpoint(checkpoint, [path, self.ckpt_dir / "last.pt"])
        self._saved_iteration = checkpoint["iteration"]
        self.callbacks("on_checkpoint", self, path)

    def _restart_episodes(self, collector: BatchCollector, rng: dict[str, Any]) -> None:
        """The envs' episode boundary of a periodic checkpoint (:func:`~marl_ppo.run.resume.restart_episodes`)."""
        if not restart_episodes(collector, rng, self.cfg.train.seed + self.iteration) and not self._warned_unseeded:
            self._warned_unseeded = True
            print(
                "marl-ppo: this collector cannot restart its envs at checkpoints (torchrl's RayCollector): "
                "a resumed run will not repeat this one exactly",
                file=sys.stderr,
            )

    def _interrupted(self, signal_name: str) -> RunInterrupted:
        """Checkpoints the last completed iteration (rolling back a half-done update) after a signal."""
        if self._snapshot is not None:
            if self._saved_iteration != self._snapshot["iteration"]:
                self.save()
            self.state.load_state_dict(self._snapshot)  # the trainer in memory matches its checkpoint
            where = f"at iteration {self.iteration}: checkpoint {self.ckpt_dir / 'last.pt'}"
        elif self.iteration:
            where = f"at iteration {self.iteration}, the checkpoint it had resumed from"
        else:
            where = "before its first iteration ended (no checkpoint: resuming starts the run afresh)"
        return RunInterrupted(
            signal_name, f"stopped by {signal_name} {where}; continue with marl-ppo train --resume {self.run_dir}"
        )


def schedule_entropy(cfg: Config, router, iteration: int) -> None:
    """``loss.entropy_schedule=linear``: every head's entropy coefficient at ``iteration``."""
    if cfg.loss.entropy_schedule == "linear":
        progress = min(iteration / cfg.train.iterations, 1.0)
        router.set_entropy_scale(1.0 - (1.0 - cfg.loss.entropy_final_scale) * progress)
