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
import json
import sys
import time
from pathlib import Path
from typing import Any, Sequence

import torch
from tensordict import TensorDictBase

from marl_ppo.collect.collectors import BatchCollector
from marl_ppo.config import Config, to_container, to_yaml
from marl_ppo.core.update import StopRequested, TrainingError, ppo_update
from marl_ppo.envs import EnvFactory, eval_num_envs, make_env
from marl_ppo.models.recurrent import prime_env, state_spec
from marl_ppo.run.build import build, build_collector, record_factory
from marl_ppo.run.callbacks import Callbacks
from marl_ppo.run.checkpoints import (
    choose_checkpoint,
    preserved_rng,
    rng_state,
    set_rng_state,
    write_checkpoint,
)
from marl_ppo.run.evaluation import evaluate
from marl_ppo.run.logger import RunLogger
from marl_ppo.run.signals import RunInterrupted, StopSignals
from marl_ppo.run.video import FrameRecorder

__all__ = ["episode_returns", "Trainer", "TrainingError", "RunInterrupted"]

CHECKPOINT_FORMAT = 2  # 2: weights_only-loadable (RNG states as tensors/lists); 1: numpy RNG arrays


def episode_returns(batch: TensorDictBase, groups: list[str]) -> dict[str, float]:
    """Mean return of the episodes that ended in ``batch``, per group (mean over the group's agents)."""
    nxt = batch.get("next")
    done = nxt.get("done").squeeze(-1)
    out = {}
    if not done.any():
        return out
    for g in groups:
        ep = nxt.get((g, "episode_reward")).mean(dim=(-2, -1))
        out[g] = ep[done].mean().item()
    return out


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
    """

    def __init__(self, cfg: Config, run_dir: str | Path | None = None, *, resume: bool = False,
                 env_fn: EnvFactory | None = None, callbacks: Sequence[object] = ()) -> None:
        cfg = record_factory(cfg, env_fn)
        self.cfg = cfg
        self.env_fn = env_fn
        self.callbacks = Callbacks(callbacks)
        cfg.check_devices()
        self.run_dir = _run_dir(cfg, run_dir, resume)
        self.parts = build(cfg, env_fn=env_fn)  # a bad env, table or model fails before the run directory exists
        self.ckpt_dir = self.run_dir / "checkpoints"
        self.iteration = 0
        self.frames = 0
        self._last_returns: dict[str, float] = {}
        self._last_eval_iteration: int | None = None
        self._last_eval: dict[str, float] = {}
        self._resume_rng: dict[str, Any] | None = None  # restored after the envs restart (fit)
        self._snapshot: dict[str, Any] | None = None  # the last completed iteration, for a signal
        self._saved_iteration: int | None = None
        self._stop_requested = False
        self._warned_unseeded = False
        iterations = cfg.train.iterations
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.parts.step.optimizer,
            (lambda it: max(1.0 - it / iterations, 0.0)) if cfg.train.lr_schedule == "linear" else (lambda it: 1.0),
        )
        self.resume_notes: list[str] = []
        self.collector_used: str | None = None  # the collector's description, once fit() built it
        self._config_yaml = to_yaml(cfg)
        if resume:
            self._resume()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / "config.yaml").write_text(self._config_yaml)
        (self.run_dir / "reward_table.txt").write_text(str(self.parts.reward_table) + "\n")
        if resume:
            self._write_resume_log()
        self.logger = RunLogger(self.run_dir, cfg.log, cfg.run_name(), resume_step=self.frames if resume else None,
                                config=to_container(cfg))

    # -- the loop -----------------------------------------------------------------------

    def fit(self) -> dict[str, Any]:
        """Trains to ``train.total_frames``; returns the summary (also ``summary.json``).

        Raises :class:`RunInterrupted` after SIGINT/SIGTERM (a checkpoint of the last completed
        iteration written, the loggers closed, ``error.txt`` saying why).
        """
        cfg, parts = self.cfg, self.parts
        groups = list(parts.groups)
        remaining = cfg.train.total_frames - self.frames
        if remaining <= 0:
            self.close()
            return self._summary({})
        collector = build_collector(cfg, parts.env, parts.router.policy, total_frames=remaining)
        self.collector_used = collector.description
        declined = getattr(collector, "declined", None)
        if declined:
            self.collector_used += f"; the lean VMAS collector declined: {declined}"
        self._note(f"collector: {self.collector_used}")
        if self._resume_rng is not None:  # as the uninterrupted run did right after this checkpoint
            self._restart_episodes(collector, self._resume_rng)
        progress = self.logger.progress(cfg.train.total_frames, self.frames, enabled=cfg.log.progress)
        try:
            with StopSignals() as stop:
                t0 = time.perf_counter()
                for batch in collector:
                    if stop.requested:
                        raise StopRequested
                    t_collect = time.perf_counter() - t0
                    self._iterate(batch, groups, t_collect, should_stop=lambda: stop.requested is not None,
                                  progress=progress)
                    collector.update_policy_weights_()
                    if stop.requested:
                        raise StopRequested
                    if self._stop_requested:
                        break
                    if self._checkpoint_due() and self.frames < cfg.train.total_frames:
                        self._write(self._snapshot)
                        self._restart_episodes(collector, self._snapshot["rng"])
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
            return self._finish()
        except BaseException as err:
            self.logger.error(err)
            self.close()
            raise

    def stop(self) -> None:
        """Ends the run after the current iteration, as when ``train.total_frames`` is reached
        (final checkpoint, evaluation, plots, summary): for a callback's early stopping."""
        self._stop_requested = True

    def _finish(self) -> dict[str, Any]:
        """The final checkpoint, evaluation, plots and summary."""
        if self._saved_iteration != self.iteration:
            self._write(self._snapshot)
        if self._last_eval_iteration == self.iteration:  # the last iteration has just been evaluated
            final = self._last_eval
        else:
            final = self._evaluate()
            self.logger.log(final, self.frames)
        if self.cfg.log.plot:
            from marl_ppo.run.plots import plot_runs

            for path in plot_runs([self.run_dir], self.run_dir / "plots"):
                self.logger.log_file(f"plots/{path.stem}", path, self.frames)
        summary = self._summary(final)
        self.logger.log_summary(summary)
        self.close()
        self.callbacks("on_run_end", self, summary)
        return summary

    def _iterate(self, batch: TensorDictBase, groups: list[str], t_collect: float, *, should_stop, progress) -> None:
        """One iteration on a collected batch: rewards, advantages, update, log, evaluate, snapshot."""
        cfg, parts = self.cfg, self.parts
        t1 = time.perf_counter()
        batch = parts.reward_table(batch)
        parts.router.compute_advantages(batch)
        self.callbacks("on_batch_collected", self, batch)
        stats = ppo_update(parts.router, parts.step, batch, num_epochs=cfg.train.num_epochs,
                           minibatch_size=cfg.train.minibatch_size, should_stop=should_stop,
                           seq_len=cfg.model.seq_len)
        lr = self.scheduler.get_last_lr()[0]  # the rate this update used
        self.scheduler.step()
        self._schedule_entropy()
        t_update = time.perf_counter() - t1
        self.iteration += 1
        self.frames += batch.numel()
        self._last_returns = episode_returns(batch, groups) or self._last_returns
        metrics = self._metrics(batch, stats, self._last_returns, t_collect, t_update)
        metrics["train/lr"] = lr
        if cfg.log.eval_every and self.iteration % cfg.log.eval_every == 0:
            metrics.update(self._evaluate())
        self.logger.log(metrics, self.frames)
        self.callbacks("on_update_end", self, metrics)
        progress.update(batch.numel(), {g: self._last_returns.get(g) for g in groups})
        # kept in memory: a signal during the next iteration checkpoints this one (a few MB, ~ms)
        self._snapshot = copy.deepcopy(self._state())

    def _checkpoint_due(self) -> bool:
        every = self.cfg.log.checkpoint_every
        return bool(every) and self.iteration % every == 0

    def _restart_episodes(self, collector: BatchCollector, rng: dict[str, Any]) -> None:
        """Reseeds the training envs from the iteration and resets them, then restores ``rng``.

        Done at every periodic checkpoint of a run and when a run resumes from one, so that the
        resumed run sees the same envs and random streams as the uninterrupted run. The envs'
        own streams come from the seed (VMAS keeps one for all its envs, PettingZoo one per env);
        the global torch/numpy/python states are the checkpoint's. With worker collectors
        (``train.collector.backend`` ``process``/``ray``) the workers' own random streams are not
        in the checkpoint: a resumed run is then not bit-exact (its resume notes say so).
        """
        set_rng_state(rng)  # an env drawing its resets from the global RNG draws the same in both runs
        if not collector.restart(self.cfg.train.seed + self.iteration) and not self._warned_unseeded:
            self._warned_unseeded = True
            print("marl-ppo: this collector cannot restart its envs at checkpoints (torchrl's RayCollector): "
                  "a resumed run will not repeat this one exactly", file=sys.stderr)
        set_rng_state(rng)

    def _interrupted(self, signal_name: str) -> RunInterrupted:
        """Checkpoints the last completed iteration (rolling back a half-done update) after a signal."""
        if self._snapshot is not None:
            if self._saved_iteration != self._snapshot["iteration"]:
                self._write(self._snapshot)
            self._load_state(self._snapshot)  # the trainer in memory matches its checkpoint
            where = f"at iteration {self.iteration}: checkpoint {self.ckpt_dir / 'last.pt'}"
        elif self.iteration:
            where = f"at iteration {self.iteration}, the checkpoint it had resumed from"
        else:
            where = "before its first iteration ended (no checkpoint: resuming starts the run afresh)"
        return RunInterrupted(signal_name, f"stopped by {signal_name} {where}; continue with "
                                           f"marl-ppo train --resume {self.run_dir}")

    def close(self) -> None:
        """Closes the loggers and the evaluation env (the collector closes the training env)."""
        self.logger.close()
        env = self.__dict__.pop("_eval_env", None)
        if env is not None and not env.is_closed:
            env.close()

    def _schedule_entropy(self) -> None:
        loss = self.cfg.loss
        if loss.entropy_schedule == "linear":
            progress = min(self.iteration / self.cfg.train.iterations, 1.0)
            self.parts.router.set_entropy_scale(1.0 - (1.0 - loss.entropy_final_scale) * progress)

    def _metrics(self, batch, stats: TensorDictBase, returns, t_collect: float, t_update: float) -> dict[str, float]:
        metrics: dict[str, float] = {}
        for key, value in stats.items(include_nested=True, leaves_only=True):
            key = (key,) if isinstance(key, str) else key
            metrics["train/" + "/".join(key)] = value.item()
        for g, r in returns.items():
            metrics[f"collect/{g}/episode_reward"] = r
        for g in self.parts.groups:
            metrics[f"collect/{g}/train_reward"] = batch.get(("next", g, "train_reward")).mean().item()
        for g, loss in self.parts.router.losses.items():
            for head, coeff in zip(self.parts.router.heads[g], loss.head_entropy_coeffs.tolist()):
                metrics[f"train/{g}/{head.label}/entropy_coeff"] = coeff
        metrics["time/collect_s"] = t_collect
        metrics["time/update_s"] = t_update
        metrics["time/fps"] = batch.numel() / (t_collect + t_update)
        metrics["time/iteration"] = self.iteration
        return metrics

    def _evaluate(self) -> dict[str, float]:
        """Deterministic evaluation on the same seeded episodes every time; training's RNG untouched."""
        cfg = self.cfg
        eval_seed = cfg.train.seed + 10_000
        recorder = FrameRecorder() if cfg.log.video else None
        with preserved_rng():  # also VMAS's stream, which its training envs share with this one
            if not hasattr(self, "_eval_env"):
                n = eval_num_envs(cfg.env, cfg.log.eval_episodes)
                # on the policy's device, as the collector puts the training env
                self._eval_env = prime_env(make_env(cfg.env, seed=eval_seed, num_envs=n, env_fn=self.env_fn),
                                           state_spec(self.parts.router.policy)).to(cfg.train.device)
            self._eval_env.set_seed(eval_seed)
            result = evaluate(self.parts.router.policy, self._eval_env, cfg.env.max_steps, list(self.parts.groups),
                              episodes=cfg.log.eval_episodes, callback=recorder)
        if recorder is not None:
            video = recorder.save(self.run_dir / "videos" / f"eval_iter{self.iteration:05d}.gif")
            self.logger.log_file("eval/video", video, self.frames)
        self._last_eval_iteration = self.iteration
        self._last_eval = {f"eval/{g}/episode_reward": r for g, r in result.returns.items()}
        self._last_eval["eval/episodes"] = result.episodes
        self.callbacks("on_evaluation_end", self, result.returns)
        return self._last_eval

    def _note(self, text: str) -> None:
        """One dated line in the run's notes (``run.log``): what the run got that its config does not say."""
        with open(self.run_dir / "run.log", "a") as f:
            f.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {text}\n")

    def _summary(self, final: dict[str, float]) -> dict[str, Any]:
        summary = {"iteration": self.iteration, "frames": self.frames, "run_dir": str(self.run_dir), **final}
        if self.collector_used is not None:
            summary["collector"] = self.collector_used
        (self.run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
        return summary

    # -- checkpoints --------------------------------------------------------------------

    def _state(self) -> dict[str, Any]:
        """Everything a resumed run needs, as tensors and plain containers (``weights_only`` loads it)."""
        return {
            "format": CHECKPOINT_FORMAT,
            "router": self.parts.router.state_dict(),
            "optimizer": self.parts.step.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "iteration": self.iteration,
            "frames": self.frames,
            # whether the uninterrupted run restarts its episodes right after this checkpoint
            "episode_boundary": self._checkpoint_due(),
            "last_returns": dict(self._last_returns),
            "rng": rng_state(),
            "config": self._config_yaml,
        }

    def _write(self, state: dict[str, Any]) -> None:
        """Writes ``iter_XXXXX.pt`` and ``last.pt`` atomically; a failed write names the file."""
        path = self.ckpt_dir / f"iter_{state['iteration']:05d}.pt"
        write_checkpoint(state, [path, self.ckpt_dir / "last.pt"])
        self._saved_iteration = state["iteration"]
        self.callbacks("on_checkpoint", self, path)

    def _load_state(self, state: dict[str, Any]) -> None:
        self.parts.router.load_state_dict(state["router"])  # copies onto each module's device
        self.parts.step.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.iteration, self.frames = int(state["iteration"]), int(state["frames"])
        self._last_returns = dict(state.get("last_returns", {}))

    def _resume(self) -> None:
        """Loads the newest usable checkpoint (see :func:`~marl_ppo.run.checkpoints.choose_checkpoint`)."""
        if not (self.run_dir / "config.yaml").exists() and not self.ckpt_dir.exists():
            raise FileNotFoundError(f"cannot resume: {self.run_dir} holds no run (no config.yaml, no checkpoint)")
        choice = choose_checkpoint(self.ckpt_dir, self._mismatch)
        self.resume_notes = list(choice.notes)
        if choice.state is None:
            self.resume_notes.append("no checkpoint: the run starts afresh in its directory (its logs are cleared)")
            return
        state = choice.state
        self._load_state(state)
        self._resume_rng = state["rng"]
        self._saved_iteration = self.iteration
        self.resume_notes.append(f"resumed from {choice.path.name} (iteration {self.iteration}, {self.frames} frames)")
        if self.cfg.train.collector.backend != "direct":
            self.resume_notes.append(
                f"train.collector.backend={self.cfg.train.collector.backend}: the collector workers' random "
                "streams are not in checkpoints, so the run goes on as an uninterrupted one would in "
                "distribution, not bit for bit (backend direct resumes exactly)"
            )
        if not state.get("episode_boundary", False) and self.frames < self.cfg.train.total_frames:
            self.resume_notes.append(
                "this checkpoint was written at a signal or at the end of a run, not at a periodic checkpoint: "
                "the envs restart their episodes here, which an uninterrupted run would not have done, so the "
                "run goes on deterministically but not bit for bit as an uninterrupted run would"
            )

    def _mismatch(self, state: dict[str, Any]) -> str | None:
        """Why a checkpoint's networks do not fit this run's, or ``None``."""
        own, theirs = self.parts.router.state_dict(), state["router"]
        missing, extra = sorted(set(own) - set(theirs)), sorted(set(theirs) - set(own))
        if missing or extra:
            return (f"its networks do not match this run's ({len(missing)} parameters missing, e.g. "
                    f"{missing[:1]}; {len(extra)} unexpected, e.g. {extra[:1]}): written by another config?")
        for k, v in own.items():
            if tuple(theirs[k].shape) != tuple(v.shape):
                return f"parameter {k!r} has shape {tuple(theirs[k].shape)} there, {tuple(v.shape)} in this run"
        return None

    def _write_resume_log(self) -> None:
        """Says on stderr and in ``resume.log`` which checkpoint was used and why others were skipped."""
        previous = self.run_dir / "error.txt"
        previous_text = previous.read_text() if previous.exists() else None
        if previous_text is not None:  # the error that ended the previous session; this one starts clean
            first = previous_text.splitlines()[:1]
            self.resume_notes.append(f"the previous session ended with: {first[0] if first else '(empty error.txt)'}")
        for video in (self.run_dir / "videos").glob("eval_iter*.gif"):  # evaluations that will run again
            if int(video.stem.removeprefix("eval_iter")) > self.iteration:
                video.unlink()
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        with open(self.run_dir / "resume.log", "a") as f:
            for note in self.resume_notes:
                f.write(f"{stamp} {note}\n")
            if previous_text is not None:  # kept whole here, then error.txt goes
                f.write("".join(f"    {line}\n" for line in previous_text.splitlines()))
        if previous_text is not None:
            previous.unlink()
        for note in self.resume_notes:
            print(f"marl-ppo resume: {note}", file=sys.stderr)


def _run_dir(cfg: Config, run_dir: str | Path | None, resume: bool) -> Path:
    """The run's directory. A new run never writes into another run's directory: the default name
    gets the next free ``-2``, ``-3``... suffix, and an explicit directory holding a run is refused."""
    if run_dir is not None:
        run_dir = Path(run_dir)
        if not resume and (run_dir / "config.yaml").exists():
            raise FileExistsError(
                f"{run_dir} already holds a run; resume it (marl-ppo train --resume {run_dir}) "
                "or choose another directory"
            )
        return run_dir
    base = Path(cfg.log.root) / cfg.run_name()
    if resume:
        return base
    path, n = base, 1
    while (path / "config.yaml").exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    return path
