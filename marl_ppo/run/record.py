"""One seed's run record: its directory, ``config.yaml``, logger, evaluation and checkpoints.

A :class:`~marl_ppo.run.trainer.Trainer` of S seeds keeps one :class:`SeedRecord` per seed, each
writing a single run's directory (``eval``, ``plot``, ``--resume`` and ``suite merge`` read it as
one), while the seeds share one loop, one env and one training state. The record holds what is
the seed's own: where it writes, what it last logged and evaluated, the snapshot of its last
completed iteration (what a signal checkpoints), and whether it failed.
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from marl_ppo.config import Config, to_container, to_yaml
from marl_ppo.core.state import TrainState
from marl_ppo.envs import EnvFactory
from marl_ppo.options import ConfigError
from marl_ppo.run.build import Parts
from marl_ppo.run.checkpoints import rng_state, usable_iterations, write_checkpoint
from marl_ppo.run.directory import claim_run_directory, note, write_summary
from marl_ppo.run.evaluation import Evaluator
from marl_ppo.run.logger import RunLogger
from marl_ppo.run.matches import Matches
from marl_ppo.run.pinned import pinned_configs
from marl_ppo.run.resume import resume_point, write_resume_log
from marl_ppo.run.seeds import stopped_seeds, write_group_file
from marl_ppo.run.signals import RunInterrupted
from marl_ppo.run.video import FrameRecorder

__all__ = ["SeedRecord", "SeedRecords", "CHECKPOINT_FORMAT"]

CHECKPOINT_FORMAT = 2  # 2: weights_only-loadable (RNG states as tensors/lists); 1: numpy RNG arrays


class SeedRecord:
    """Seed ``cfg.train.seed``'s run directory ``run_dir``, opened for writing.

    ``parts`` give the policy the evaluation plays (the template's, run with this seed's tensors by the
    trainer); ``state`` is the seeds' training state, into whose seed ``seed`` ``resume`` loads the
    directory's newest usable checkpoint (:func:`~marl_ppo.run.resume.resume_point`; ``resume_at``: of
    iteration ``<= resume_at``, where a group's seeds meet). :attr:`start` is the ``(iteration, frames)``
    the seed starts from.
    """

    writes = True  # it writes its directory (a rank r > 0 keeps a record that does not)

    def __init__(
        self,
        cfg: Config,
        run_dir: Path,
        parts: Parts,
        state: TrainState,
        seed: int = 0,
        *,
        resume: bool = False,
        resume_at: int | None = None,
        env_fn: EnvFactory | None = None,
    ) -> None:
        self.cfg, self.run_dir, self.ckpt_dir = cfg, run_dir, run_dir / "checkpoints"
        self.evaluator = Evaluator(
            cfg, parts.policy, list(parts.groups), episodes=cfg.log.eval_episodes, env_fn=env_fn, video=cfg.log.video
        )
        if cfg.log.video:  # before the run directory exists: an env that cannot draw fails here
            self.evaluator.check_video()
        self.matches = Matches(cfg, parts, cfg.log.eval_opponents, self.evaluator)  # log.eval_opponents
        self.pooled = bool(parts.pools)  # a pool seat plays greedy: sampled, it would draw its snapshots
        self.last_eval_iteration: int | None = None
        self.last_eval: dict[str, float] = {}
        self.eval_returns: dict[str, float] = {}  # the last evaluation's returns per group
        self.snapshot: dict[str, Any] | None = None  # the last completed iteration, for a signal
        self.saved_iteration: int | None = None
        self.failed = self._warned_no_episode = False
        self.config_yaml = to_yaml(cfg)
        self.resume = resume_point(run_dir, cfg, state, at_most=resume_at, seed=seed) if resume else None
        self.start = (0, 0)
        if self.resume is not None and self.resume.rng is not None:
            self.saved_iteration = state.iteration
            self.start = (state.iteration, state.frames)
        if self.resume is None:  # a new run: claimed (another run started together takes the next name)
            self.run_dir = run_dir = claim_run_directory(cfg, run_dir, self.config_yaml)
            self.ckpt_dir = run_dir / "checkpoints"
        elif not self.resume.finished:  # a finished run resumed keeps its record
            run_dir.mkdir(parents=True, exist_ok=True)
            (run_dir / "config.yaml").write_text(self.config_yaml)
        (run_dir / "reward_table.txt").write_text(str(parts.reward_table) + "\n")
        self.resume_notes = [] if not resume else write_resume_log(run_dir, self.resume.notes, state.iteration)
        for line in (n for n in self.resume_notes if n.startswith("changed ")):
            note(run_dir, line)
        self.logger = RunLogger(
            run_dir, cfg.log, cfg.run_name(), resume_step=state.frames if resume else None, config=to_container(cfg)
        )

    def evaluate(self, iteration: int, frames: int) -> dict[str, float]:
        """The seed's evaluation (:class:`~marl_ppo.run.evaluation.Evaluator`; the caller puts the seed's
        tensors in force), as the ``eval/...`` metrics it logs."""
        recorder = FrameRecorder() if self.cfg.log.video else None
        first = "greedy" if self.cfg.log.eval_deterministic else "sampled"
        if self.cfg.log.eval_both:
            modes = self.evaluator.both_modes(callback=recorder, sample=not self.pooled)
        else:
            modes = {first: self.evaluator(callback=recorder)}
        result = modes[first]
        if recorder is not None:
            video = recorder.save(self.run_dir / "videos" / f"eval_iter{iteration:05d}.gif")
            self.logger.log_file("eval/video", video, frames)
        if result.episodes == 0 and not self._warned_no_episode:  # nothing to log as a return
            self._warned_no_episode = True
            print(f"marl-ppo: evaluation at iteration {iteration}: {result.no_episode_message()}", file=sys.stderr)
        self.last_eval_iteration = iteration
        self.last_eval = {f"eval/{g}/episode_reward": r for g, r in result.returns.items()}
        self.last_eval["eval/episodes"] = result.episodes
        if self.cfg.log.eval_both:
            self.last_eval.update(Evaluator.mode_metrics(modes))
        self.last_eval.update(self.matches.metrics())
        self.eval_returns = dict(result.returns)
        return self.last_eval

    def checkpoint(self, state: TrainState, seed: int, episode_boundary: bool) -> dict[str, Any]:
        """Seed ``seed``'s training state and the run's records, as tensors and plain containers (``weights_only``
        loads it); ``episode_boundary``: whether the envs restart their episodes right after it."""
        return {
            "format": CHECKPOINT_FORMAT,
            **state.state_dict(seed),
            "episode_boundary": episode_boundary,
            "threads": torch.get_num_threads(),  # a resume with train.num_threads=0 (auto) takes the same
            "rng": rng_state(),
            "config": self.config_yaml,
        }

    def keep(self, checkpoint: dict[str, Any]) -> None:
        """Keeps ``checkpoint`` in memory: a signal during the next iteration writes it (a few MB, ~ms)."""
        self.snapshot = copy.deepcopy(checkpoint)

    def save(self, checkpoint: dict[str, Any] | None = None) -> Path:
        """Writes ``iter_XXXXX.pt`` and ``last.pt`` atomically (default: the kept snapshot); returns the first."""
        checkpoint = self.snapshot if checkpoint is None else checkpoint
        path = self.ckpt_dir / f"iter_{checkpoint['iteration']:05d}.pt"
        write_checkpoint(checkpoint, [path, self.ckpt_dir / "last.pt"])
        self.saved_iteration = checkpoint["iteration"]
        return path

    def finish(self, iteration: int, frames: int, fresh: dict[str, float], collector: str | None) -> dict[str, Any]:
        """Logs the final evaluation ``fresh`` and a pool's ladder, draws the plots, writes ``summary.json``."""
        fresh = {**fresh, **self.matches.ladder(self.run_dir)}
        self.logger.log(fresh, frames)
        final = {**self.last_eval, **fresh}
        if self.cfg.log.plot:
            from marl_ppo.run.plots import plot_runs

            for path in plot_runs([self.run_dir], self.run_dir / "plots"):
                self.logger.log_file(f"plots/{path.stem}", path, frames)
        summary = write_summary(self.run_dir, iteration, frames, final, collector)
        self.logger.log_summary(summary)
        self.close()
        return summary

    def fail(self, err: BaseException, reason: str | None = None) -> None:
        """The seed's run ends with ``err`` (``error.txt``), its checkpoints kept; the other seeds go on."""
        self.failed = True
        self.logger.error(err, reason=reason)
        self.close()

    def interrupted(self, signal_name: str, iteration: int) -> RunInterrupted:
        """The seed's run ends after ``signal_name`` at ``iteration`` (its checkpoint written): ``error.txt``
        says where it stopped and how to go on; returns the error to raise."""
        if self.snapshot is not None:
            where = f"at iteration {iteration}: checkpoint {self.ckpt_dir / 'last.pt'}"
        elif iteration:
            where = f"at iteration {iteration}, the checkpoint it had resumed from"
        else:
            where = "before its first iteration ended (no checkpoint: resuming starts the run afresh)"
        message = f"stopped by {signal_name} {where}; continue with marl-ppo train --resume {self.run_dir}"
        err = RunInterrupted(signal_name, message)
        self.fail(err, reason=message)
        return err

    def close(self) -> None:
        """Closes the loggers and the evaluation env (the collector closes the training env)."""
        self.logger.close()
        self.evaluator.close()


def common_iteration(run_dirs: Sequence[Path]) -> int | None:
    """The newest iteration at which every seed of a group has a checkpoint that loads (a seed whose newest
    checkpoints are corrupt stands behind the others: the group resumes from where all of them are);
    ``None`` where a seed has no checkpoint (it starts afresh, and so must the others: stacking refuses)."""
    found = [usable_iterations(Path(d) / "checkpoints") for d in run_dirs]
    if not all(found):
        return None
    common = set.intersection(*found)
    if not common:
        raise ConfigError(
            "the seeds' checkpoints share no iteration ("
            + "; ".join(f"{d}: {sorted(f)}" for d, f in zip(run_dirs, found))
            + "): resume each seed's directory as a single run instead"
        )
    return max(common)


class SeedRecords(list):
    """Every seed's :class:`SeedRecord`, in seed order: opened together (:meth:`open`), failed and closed together.
    :attr:`stopped`: the seeds that stopped on a non-finite loss (by index, why), kept in the group file."""

    @classmethod
    def open(cls, configs, planned, parts: Parts, state: TrainState, *, resume: bool, env_fn=None,
             record: type = SeedRecord) -> SeedRecords:  # fmt: skip
        """Each seed's record of ``planned`` (its directory), its frozen opponents pinned into a new directory;
        with ``resume``, every seed still training from the newest iteration all of them have a checkpoint of,
        and each seed that had stopped from its own last checkpoint, stopped again (its slot of ``state`` finite,
        its ``alive`` false, nothing written to its directory but the resume's notes). ``record``: the type of
        each seed's record (a rank that writes nothing keeps :class:`~marl_ppo.run.ranks.RankRecord`)."""
        configs = pinned_configs(configs, planned) if not resume and record.writes else configs  # opponents copied in
        stopped = stopped_seeds(planned[0]) if resume else {}
        meet = common_iteration([d for s, d in enumerate(planned) if s not in stopped]) if resume else None
        order = sorted(range(len(planned)), key=lambda s: s not in stopped)  # stopped first: the others set counters
        opened = {
            s: record(configs[s], planned[s], parts, state, s, resume=resume,
                          resume_at=None if s in stopped else meet, env_fn=env_fn)
            for s in order
        }  # fmt: skip
        records = cls(opened[s] for s in range(len(planned)))
        records.stopped, records.group = dict(stopped), None
        for s in stopped:
            records[s].failed = True
            records[s].close()
            state.step.alive[s] = False
        live = records.live()
        behind = [s for s in live if records[s].start != records[live[0]].start]
        if behind:
            raise ConfigError(
                f"the seeds' checkpoints are at different iterations (seed indices {behind} differ from seed index "
                f"{live[0]}'s iteration {records[live[0]].start[0]}): resume each seed's directory as a single run "
                "instead"
            )
        return records

    def write_group(self, seeds: Sequence[int], group_dir: Path | None) -> None:
        """The group file in each seed's directory (:func:`~marl_ppo.run.seeds.write_group_file`), now and after
        each seed that stops."""
        self.group = (list(seeds), group_dir)
        write_group_file(self.run_dirs, seeds, group_dir, self.stopped)

    def stop(self, s: int, err: BaseException) -> None:
        """Seed ``s`` stops on ``err`` (a non-finite loss): its record fails, the group file says so."""
        self[s].fail(err)
        self.stopped[s] = str(err)
        if self.group is not None:
            self.write_group(*self.group)

    @property
    def run_dirs(self) -> list[Path]:
        return [record.run_dir for record in self]

    def live(self) -> list[int]:
        """The indices of the seeds still training (a seed whose loss went non-finite has failed)."""
        return [s for s, record in enumerate(self) if not record.failed]

    def fail_all(self, err: BaseException, reason: str | None = None) -> None:
        for s in self.live():
            self[s].fail(err, reason)

    def close(self) -> None:
        """Closes every seed's loggers and evaluation env."""
        for record in self:
            record.close()

    def interrupted(self, signal_name: str, state: TrainState, save: Callable[[int], None]) -> RunInterrupted:
        """After a signal: every live seed's last completed iteration checkpointed (``save(s)``, rolling back a
        half-done update in ``state``), its record closed with ``error.txt``; returns the error to raise."""
        errors = []
        for s in self.live():
            record = self[s]
            if record.snapshot is not None:
                if record.saved_iteration != record.snapshot["iteration"]:
                    save(s)
                state.load_state_dict(record.snapshot, seed=s)  # the state in memory matches its checkpoint
            errors.append(record.interrupted(signal_name, state.iteration))
        return errors[0]
