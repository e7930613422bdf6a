"""One run on N processes (``train.ranks``, or ``torchrun``): joining them, starting them, and what rank r > 0 keeps.

``marl-ppo train CONFIG train.ranks=N`` starts N processes through torch's own launcher
(``python -m torch.distributed.run --standalone --nproc_per_node N -m marl_ppo train ...``), as
``torchrun --standalone --nproc_per_node N -m marl_ppo train CONFIG`` does; several machines start
``torchrun --nnodes M --rdzv-endpoint HOST:PORT ...`` on each (``docs/scaling_out.md``). Each process
joins the run (:func:`join`: ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``; gloo on CPU, NCCL on CUDA with
``cuda:LOCAL_RANK``) and runs the same :class:`~marl_ppo.run.trainer.Trainer` loop on its own env
copies; what the ranks agree on is :mod:`marl_ppo.core.ranks`'s.

Rank 0 owns the run directories (config, logs with the global frame count, checkpoints, evaluation,
summary). Rank r > 0 keeps a :class:`RankRecord` per seed: it writes nothing, and on ``--resume``
loads rank 0's checkpoint. A checkpoint holds rank 0's state; resuming is exact by a rule instead
of per-rank files: at every periodic checkpoint (and on resume) rank r restarts its envs' episodes
from ``seed + iteration + r * RANK_SEED_STRIDE`` and, for r > 0, its random streams from the same
seed (:func:`restart_envs`), so the resumed run repeats the uninterrupted one.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from marl_ppo.algorithms import algorithm
from marl_ppo.config import Config
from marl_ppo.core.aggregate import AggregatedStep
from marl_ppo.core.ranks import ONE, Ranks, current, use
from marl_ppo.core.state import TrainState
from marl_ppo.opponents.sources import parse_source
from marl_ppo.options import ConfigError
from marl_ppo.run.build import Parts, seed_everything
from marl_ppo.run.checkpoints import rng_state
from marl_ppo.run.record import SeedRecords
from marl_ppo.run.resume import EpisodeRestarts, resume_point
from marl_ppo.run.signals import RunInterrupted, StopSignals

__all__ = ["rank_refusals", "check_ranks", "join", "launch", "launch_command", "RankRecord", "open_records"]
__all__ += ["restart_envs", "stop_checks"]


def rank_refusals(cfg: Config) -> list[str]:
    """What ``train.ranks > 1`` cannot run with, each with its reason (refused before any process starts)."""
    why = []
    if cfg.train.collector.backend != "direct":
        why.append(f"train.collector.backend={cfg.train.collector.backend} (each rank steps its own copies itself)")
    pools = [g for g, text in cfg.opponents.items() if parse_source("", text).pool]
    if pools:
        why.append(f"opponents {pools} from a pool (each rank would keep its own snapshots and ratings)")
    if cfg.train.compile:
        why.append("train.compile=true (the advantages' statistics are all-reduced inside the loss)")
    if algorithm(cfg.loss.algorithm).sequential and cfg.loss.happo.order != "fixed":
        why.append(f"loss.happo.order={cfg.loss.happo.order} (each rank would draw its own order of the units; "
                   "set loss.happo.order=fixed)")  # fmt: skip
    return why


def check_ranks(cfg: Config) -> None:
    """Raises :class:`ConfigError` naming the first thing of ``cfg`` that ``train.ranks`` cannot run with."""
    why = rank_refusals(cfg) if cfg.train.ranks > 1 else []
    if why:
        raise ConfigError(f"train.ranks={cfg.train.ranks}: one run on many processes does not support {why[0]}")


def join(cfg: Config) -> tuple[Config, Ranks]:
    """This process's place in its run: with ``WORLD_SIZE`` > 1 (``torchrun``), the process group joined
    (gloo, or NCCL where ``train.device`` is CUDA, this rank's GPU made current) and ``train.ranks`` set to
    the world size (the config records it); else the run of one process, :data:`~marl_ppo.core.ranks.ONE`.
    The ranks become :func:`~marl_ppo.core.ranks.current`."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        if cfg.train.ranks > 1:
            raise ConfigError(
                f"train.ranks={cfg.train.ranks} runs on {cfg.train.ranks} processes: start it with marl-ppo train "
                f"(which starts them) or torchrun --nproc_per_node {cfg.train.ranks} -m marl_ppo train, not in one"
            )
        return cfg, use(ONE)
    if cfg.train.ranks not in (1, world):
        raise ConfigError(f"train.ranks={cfg.train.ranks}, but torchrun started {world} processes (WORLD_SIZE)")
    cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, ranks=world))
    check_ranks(cfg)
    local = int(os.environ.get("LOCAL_RANK", "0"))
    cuda = cfg.train.device.startswith("cuda")
    if cuda:
        torch.cuda.set_device(local)  # "cuda" is this rank's GPU
    if not dist.is_initialized():
        dist.init_process_group("nccl" if cuda else "gloo")
    device = f"cuda:{local}" if cuda else "cpu"
    if dist.get_rank() != 0:  # rank 0 speaks for the run (the summary scripts parse); errors still reach stderr
        sys.stdout = open(os.devnull, "w")
    return cfg, use(Ranks(dist.get_rank(), dist.get_world_size(), local, device))


def launch_command(ranks: int, argv: Sequence[str]) -> list[str]:
    """torch's launcher starting ``ranks`` processes of ``marl-ppo`` with ``argv`` on this machine."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes=1",
            f"--nproc_per_node={ranks}", "-m", "marl_ppo", *argv]  # fmt: skip


def launch(cfg: Config, argv: Sequence[str]) -> int | None:
    """Starts ``cfg``'s ``train.ranks`` processes (:func:`launch_command`) when this process is not one of them
    yet; returns the launcher's exit code, or ``None`` where this process trains (one rank, or under torchrun)."""
    if cfg.train.ranks == 1 or "WORLD_SIZE" in os.environ:
        return None
    check_ranks(cfg)
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}  # torchrun's default
    launcher = subprocess.Popen(launch_command(cfg.train.ranks, argv), env=env, stderr=subprocess.PIPE)
    relay = threading.Thread(target=relay_ranks_stderr, args=(launcher.stderr, sys.stderr), daemon=True)
    relay.start()
    got: list[int] = []

    def forward(signum, frame) -> None:  # kill, a scheduler: the launcher passes it to every rank (each then
        got.append(signum)  # stops with a checkpoint); Ctrl-C reaches them all from the terminal already
        if signum == signal.SIGTERM:
            launcher.send_signal(signum)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        code = launcher.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        relay.join(timeout=10)
    # stopped by a signal: the ranks said so (rank 0's line) and kept a checkpoint; the shell's code for it
    return 128 + got[0] if got else code


# what torch's launcher writes of its own: its log lines ("W1207 12:00:00.123000 123 torch/...") and the OMP banner
_LAUNCHER_LINE = re.compile(r"^([WIEF]\d{4} \d\d:\d\d:\d\d\.\d+ \d+ |\*{20,}\s*$|Setting OMP_NUM_THREADS)")


def relay_ranks_stderr(source, sink) -> None:
    """The ranks' stderr, which they share with torch's launcher (``source``, a binary pipe), less what the
    launcher says itself: its log lines, and from its first traceback on (its ``SignalException`` after a
    signal, its ``ChildFailedError`` block after a rank failed: each rank has said why in one line before,
    and our ranks print no traceback), but for a rank that died from a signal (it said nothing): the launcher's
    report of it, in one line. A progress bar's redrawn line (``\\r``) passes as it comes. Written by
    hand: the launcher has no option to keep its tracebacks to itself.

    >>> import io
    >>> out = io.StringIO()
    >>> said = b"stopped by SIGTERM\\nW1207 12:00:00.1 7 x\\nTraceback (most recent call last):\\n x\\n"
    >>> relay_ranks_stderr(io.BytesIO(said), out)
    >>> out.getvalue()
    'stopped by SIGTERM\\n'
    """
    quiet, pending, failure = False, b"", {}

    def write(text: bytes) -> None:
        nonlocal quiet
        line = text.decode(errors="replace")
        quiet = quiet or line.startswith("Traceback (most recent call last)")
        if quiet:  # a rank that died from a signal said nothing: the launcher's report of it, in one line
            field = re.match(r"^\s*(rank|exitcode|traceback)\s*: (.*)$", line)
            if field:
                failure[field.group(1)] = field.group(2).strip()
            if {"rank", "exitcode", "traceback"} <= set(failure) and failure["exitcode"].startswith("-"):
                sink.write(f"marl-ppo train: rank {failure['rank']} died: {failure['traceback']} "
                           f"(exitcode {failure['exitcode']})\n")  # fmt: skip
                sink.flush()
                failure.clear()
        elif not _LAUNCHER_LINE.match(line):
            sink.write(line)
            sink.flush()

    while chunk := source.read1(4096) if hasattr(source, "read1") else source.read(4096):
        *lines, pending = (pending + chunk).split(b"\n")
        for line in lines:
            write(line + b"\n")
        if b"\r" in pending:  # a progress bar redrawing its line
            done, _, pending = pending.rpartition(b"\r")
            write(done + b"\r")
    if pending:
        write(pending)


class RankRecord:
    """Seed ``seed``'s record on rank r > 0: the same interface as :class:`~marl_ppo.run.record.SeedRecord`,
    nothing written (rank 0 writes the run); ``resume`` loads rank 0's checkpoint from ``run_dir``."""

    writes = False

    def __init__(self, cfg: Config, run_dir: Path, parts: Parts, state: TrainState, seed: int = 0, *,
                 resume: bool = False, resume_at: int | None = None, env_fn=None) -> None:  # fmt: skip
        self.cfg, self.run_dir, self.logger = cfg, Path(run_dir), _Silent()
        self.last_eval_iteration: int | None = None
        self.last_eval: dict[str, float] = {}
        self.eval_returns: dict[str, float] = {}
        self.snapshot: dict[str, Any] | None = None
        self.saved_iteration: int | None = None
        self.failed = False
        self.resume = resume_point(self.run_dir, cfg, state, at_most=resume_at, seed=seed) if resume else None
        self.start = (0, 0)
        if self.resume is not None and self.resume.rng is not None:
            self.saved_iteration, self.start = state.iteration, (state.iteration, state.frames)
        self.resume_notes: list[str] = []

    def evaluate(self, iteration: int, frames: int) -> dict[str, float]:
        self.last_eval_iteration = iteration  # rank 0 evaluates
        return {}

    def checkpoint(self, state: TrainState, seed: int, episode_boundary: bool) -> dict[str, Any]:
        return {**state.state_dict(seed), "rng": rng_state()}  # what a signal rolls this rank back to

    def keep(self, checkpoint: dict[str, Any]) -> None:
        self.snapshot = checkpoint

    def save(self, checkpoint: dict[str, Any] | None = None) -> None:
        self.saved_iteration = (checkpoint or self.snapshot)["iteration"]  # rank 0 writes it

    def finish(self, iteration: int, frames: int, fresh: dict[str, float], collector: str | None) -> dict[str, Any]:
        return {"iteration": iteration, "frames": frames, "run_dir": str(self.run_dir), "rank": current().rank}

    def fail(self, err: BaseException, reason: str | None = None) -> None:
        self.failed = True

    def interrupted(self, signal_name: str, iteration: int) -> RunInterrupted:
        self.failed = True
        return RunInterrupted(signal_name, f"rank {current().rank} stopped by {signal_name} at iteration {iteration}")

    def close(self) -> None:
        pass


def stop_checks(stop: StopSignals, ranks: Ranks, step: AggregatedStep) -> tuple[Callable[[], bool], Callable[[], bool]]:
    """Whether to stop, as every rank agrees: between iterations (a small all-reduce), and after each step of the
    update (read from the step's own all-reduce, which carries every rank's signal flags: no collective of its own).
    One process: whether it got a signal, at both."""
    step.agree = stop.flags
    return (lambda: stop.agree(ranks.max) is not None), (lambda: stop.adopt(step.agreed) is not None)


def restart_envs(restarts: EpisodeRestarts, collector, rng: dict[str, Any], seed: int, ranks: Ranks) -> None:
    """The episode restart of a periodic checkpoint (or a resume) on this rank: its envs from its own seed for
    ``seed`` (:meth:`~marl_ppo.core.ranks.Ranks.seed`), its random streams ``rng`` (rank 0: the checkpoint's),
    or, on rank r > 0, from that seed too: the rule that makes a resumed ranks run exact."""
    own = ranks.seed(seed)
    restarts(collector, rng, own)
    if not ranks.main:
        seed_everything(own)


class _Silent:
    """The logger of a rank that does not log (its progress bar off too)."""

    def progress(self, total: int, initial: int, enabled: bool) -> _Silent:
        return self

    def __getattr__(self, name: str):
        return lambda *args, **kwargs: None


def open_records(ranks: Ranks, configs, planned, parts: Parts, state: TrainState, *, resume: bool,
                 env_fn=None) -> SeedRecords:  # fmt: skip
    """Every seed's record: rank 0's own (:meth:`SeedRecords.open`, which claims new directories), then, on the
    other ranks, a :class:`RankRecord` of each directory rank 0 opened; the trainable parameters from rank 0."""
    records = SeedRecords.open(configs, planned, parts, state, resume=resume, env_fn=env_fn) if ranks.main else None
    dirs = json.loads(ranks.broadcast_text(json.dumps([str(d) for d in records.run_dirs] if ranks.main else [])))
    if not ranks.main:
        records = SeedRecords.open(configs, [Path(d) for d in dirs], parts, state, resume=resume, record=RankRecord)
    ranks.broadcast_(state.stack.trainable)  # equal already (one seed, one checkpoint): made sure of
    if not ranks.main:  # its own streams (building the router reseeded them with the run's seed)
        seed_everything(ranks.seed(configs[0].train.seed))
    return records
