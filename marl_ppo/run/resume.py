"""Resuming a run: which settings may change, which checkpoint, what it restores, and the notes saying so.

:func:`resume_point` compares the config a run is resumed with to the one it recorded
(``config.yaml``): a key of :data:`CHANGEABLE` takes effect from the resumed iteration, any other
change (the networks, the env and its seeds, the reward table) is refused before anything is
written, naming the key, the run's value and the new one. It then picks the newest usable
checkpoint (see :func:`~marl_ppo.run.checkpoints.choose_checkpoint`), loads it into the run's
:class:`~marl_ppo.core.state.TrainState`, and puts the config's settings in force over the
checkpoint's (learning rate, clip, coefficients, gamma, lambda); :func:`write_resume_log` records
what happened in ``resume.log`` and on stderr (see ``docs/runs.md``).
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from marl_ppo.config import Config, ConfigError, from_yaml, to_container
from marl_ppo.core.state import TrainState
from marl_ppo.run.checkpoints import choose_checkpoint, is_legacy_key, set_rng_state

__all__ = [
    "EpisodeRestarts",
    "ResumePoint",
    "resume_point",
    "network_mismatch",
    "write_resume_log",
    "restart_episodes",
    "CHANGEABLE",
    "CANNOT_RESTART",
    "changeable",
    "config_changes",
]

# The keys a resumed run may change: they take effect from the resumed iteration (a trailing dot: a
# whole section). Any other key would change what the checkpoints were trained on (the networks, the
# env and its seeds, the batch layout, the reward table) and is refused.
CHANGEABLE = (
    "train.total_frames", "train.lr", "train.lr_schedule", "train.num_epochs", "train.minibatch_size",
    "train.max_grad_norm", "train.num_threads", "train.compile", "train.device", "train.collector.",
    "loss.clip_epsilon", "loss.entropy_coeff", "loss.head_entropy_coeff", "loss.entropy_schedule",
    "loss.entropy_final_scale", "loss.critic_coeff", "loss.loss_critic_type", "loss.gamma", "loss.lmbda",
    "loss.normalize_advantage", "loss.group_weights", "loss.bundle_groups", "log.",
)  # fmt: skip


@dataclass
class ResumePoint:
    """What a resume found: the checkpoint's RNG states (``None``: no checkpoint, a fresh start) and notes.
    ``finished``: the run has done its ``train.total_frames`` and has its ``summary.json``, so nothing will
    run (no notes: nothing changed, its record stays as it is)."""

    rng: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)
    finished: bool = False


def network_mismatch(router: nn.Module, state: dict[str, Any]) -> str | None:
    """Why a checkpoint's networks do not fit ``router``'s, or ``None``."""
    own = router.state_dict()
    theirs = {k: v for k, v in state["router"].items() if not is_legacy_key(k)}
    missing, extra = sorted(set(own) - set(theirs)), sorted(set(theirs) - set(own))
    if missing or extra:
        return (
            f"its networks do not match this run's ({len(missing)} parameters missing, e.g. "
            f"{missing[:1]}; {len(extra)} unexpected, e.g. {extra[:1]}): written by another config?"
        )
    for k, v in own.items():
        if tuple(theirs[k].shape) != tuple(v.shape):
            return f"parameter {k!r} has shape {tuple(theirs[k].shape)} there, {tuple(v.shape)} in this run"
    return None


def _flat(tree: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(tree, dict):
        return {k: v for key, sub in tree.items() for k, v in _flat(sub, f"{prefix}{key}.").items()} or {
            prefix[:-1]: {}
        }
    return {prefix[:-1]: tree}


def config_changes(old: Config, new: Config) -> list[tuple[str, Any, Any]]:
    """``(key, old value, new value)`` for every dotted key whose value differs (``None``: absent)."""
    a, b = _flat(to_container(old)), _flat(to_container(new))
    return [(k, a.get(k), b.get(k)) for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]


def changeable(key: str) -> bool:
    """Whether a resumed run may change ``key`` (a key of :data:`CHANGEABLE` or in one of its sections)."""
    return any(key == c or key.startswith(c if c.endswith(".") else c + ".") for c in CHANGEABLE)


def _what(key: str) -> str:
    if key.startswith(("model.", "loss.algorithm", "loss.value_norm", "loss.popart_beta")):
        return "the networks"
    if key.startswith("reward_table"):
        return "the reward table"
    return "the env, its seeds or the batch layout"


def _check_changes(run_dir: Path, cfg: Config) -> list[tuple[str, Any, Any]]:
    """The changes from the run's recorded config; a :class:`ConfigError` for any that may not change."""
    recorded = run_dir / "config.yaml"
    if not recorded.exists():
        return []
    changes = config_changes(from_yaml(recorded.read_text()), cfg)
    refused = [(k, old, new) for k, old, new in changes if not changeable(k)]
    if refused:
        listing = "; ".join(f"{k}={new!r} (the run has {old!r}: it would change {_what(k)})" for k, old, new in refused)
        raise ConfigError(
            f"cannot resume {run_dir} with {listing}. A resumed run keeps what its checkpoints were trained on; "
            f"it may change {', '.join(c.rstrip('.') for c in CHANGEABLE)} (docs/runs.md). Start a new run instead"
        )
    return changes


def _put_config_in_force(state: TrainState, cfg: Config, fresh: dict[str, Any], seed: int) -> None:
    """Over a loaded checkpoint of seed ``seed``: the losses' settings (``fresh``: the router's as built from
    ``cfg``) and the learning rate of ``train.lr`` on the schedule's current step (what ``LambdaLR`` computes)."""
    with state.stack.seed(seed) as router:
        router.load_hyperparameters(fresh)
    scheduler, groups = state.scheduler, state.step.optimizer.param_groups
    scheduler.base_lrs = [float(cfg.train.lr) for _ in scheduler.base_lrs]
    for group, base, factor in zip(groups, scheduler.base_lrs, scheduler.lr_lambdas):
        group["initial_lr"] = base
        group["lr"] = base * factor(scheduler.last_epoch)
    scheduler._last_lr = [group["lr"] for group in groups]


def resume_point(
    run_dir: Path, cfg: Config, state: TrainState, at_most: int | None = None, seed: int = 0
) -> ResumePoint:
    """Loads the newest usable checkpoint of ``run_dir`` (``at_most``: of iteration ``<= at_most``) into
    seed ``seed`` of ``state`` with ``cfg``'s changeable settings
    in force; what was found and changed, and why (nothing for a finished run: see :class:`ResumePoint`).
    Refuses (:class:`ConfigError`, nothing written) a change that may not be made on resume, and fewer
    ``train.total_frames`` than the run has done."""
    ckpt_dir = run_dir / "checkpoints"
    if not (run_dir / "config.yaml").exists() and not ckpt_dir.exists():
        raise FileNotFoundError(f"cannot resume: {run_dir} holds no run (no config.yaml, no checkpoint)")
    changes = _check_changes(run_dir, cfg)
    choice = choose_checkpoint(ckpt_dir, lambda ckpt: network_mismatch(state.router, ckpt), at_most=at_most)
    notes = list(choice.notes)
    if choice.state is None:
        notes.append("no checkpoint: the run starts afresh in its directory (its logs are cleared)")
        return ResumePoint(None, notes)
    ckpt = choice.state
    with state.stack.seed(seed) as router:
        fresh = router.hyperparameters()
    state.load_state_dict(ckpt, seed=seed)
    if cfg.train.total_frames < state.frames:
        raise ConfigError(
            f"cannot resume {run_dir} with train.total_frames={cfg.train.total_frames}: the run has done "
            f"{state.frames} frames already (its checkpoint {choice.path.name}); "
            f"give train.total_frames >= {state.frames}"
        )
    _put_config_in_force(state, cfg, fresh, seed)
    if not cfg.train.num_threads and ckpt.get("threads", torch.get_num_threads()) != torch.get_num_threads():
        # auto picked another count on this machine: the run's own keeps its reductions bit for bit
        notes.append(f"train.num_threads=0 (auto): {ckpt['threads']} threads, as the run had")
        torch.set_num_threads(ckpt["threads"])
    if state.frames >= cfg.train.total_frames and (run_dir / "summary.json").exists():
        return ResumePoint(ckpt["rng"], [], finished=True)  # nothing will run: no change took effect
    notes.append(f"resumed from {choice.path.name} (iteration {state.iteration}, {state.frames} frames)")
    for key, old, new in changes:
        notes.append(
            f"changed {key}: {old!r} -> {new!r}, in force from frame {state.frames} "
            f"(iteration {state.iteration + 1} on)"
        )
    if cfg.train.collector.backend != "direct":
        notes.append(
            f"train.collector.backend={cfg.train.collector.backend}: the collector workers' random "
            "streams are not in checkpoints, so the run goes on as an uninterrupted one would in "
            "distribution, not bit for bit (backend direct resumes exactly)"
        )
    if state.generator is not None and "generator" not in ckpt:
        notes.append(
            "this checkpoint was written before runs kept the update's own generator (minibatch order): it "
            "starts again from train.seed, so the run goes on deterministically but not bit for bit"
        )
    if not ckpt.get("episode_boundary", False) and state.frames < cfg.train.total_frames:
        notes.append(
            "this checkpoint was written at a signal or at the end of a run, not at a periodic checkpoint: "
            "the envs restart their episodes here, which an uninterrupted run would not have done, so the "
            "run goes on deterministically but not bit for bit as an uninterrupted run would"
        )
    return ResumePoint(ckpt["rng"], notes)


def write_resume_log(run_dir: Path, notes: list[str], iteration: int) -> list[str]:
    """Says on stderr and in ``resume.log`` which checkpoint was used and why others were skipped; returns
    the notes written.

    The ``error.txt`` that ended the previous session moves into ``resume.log`` whole; evaluation
    videos of iterations after the checkpoint go (they will be made again).
    """
    notes = list(notes)
    previous = run_dir / "error.txt"
    previous_text = previous.read_text() if previous.exists() else None
    if previous_text is not None:  # the error that ended the previous session; this one starts clean
        first = previous_text.splitlines()[:1]
        notes.append(f"the previous session ended with: {first[0] if first else '(empty error.txt)'}")
    for video in (run_dir / "videos").glob("eval_iter*.gif"):  # evaluations that will run again
        if int(video.stem.removeprefix("eval_iter")) > iteration:
            video.unlink()
    if not notes:  # a finished run resumed: nothing ran, nothing to record
        return notes
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    with open(run_dir / "resume.log", "a") as f:
        for note in notes:
            f.write(f"{stamp} {note}\n")
        if previous_text is not None:  # kept whole here, then error.txt goes
            f.write("".join(f"    {line}\n" for line in previous_text.splitlines()))
    if previous_text is not None:
        previous.unlink()
    for note in notes:
        print(f"marl-ppo resume: {note}", file=sys.stderr)
    return notes


CANNOT_RESTART = (
    "this collector cannot restart its envs at checkpoints (torchrl's RayCollector): "
    "a resumed run will not repeat this one exactly"
)


def restart_episodes(collector, rng: dict[str, Any], seed: int) -> bool:
    """Reseeds the training envs from ``seed`` and resets them, then restores ``rng``; ``False`` where the
    collector cannot restart its envs (torchrl's ``RayCollector``).

    Done at every periodic checkpoint of a run (``seed``: ``train.seed`` + the iteration) and when a
    run resumes from one, so that the resumed run sees the same envs and random streams as the
    uninterrupted run. The envs' own streams come from the seed (VMAS keeps one for all its envs,
    PettingZoo one per env); the global torch/numpy/python states are the checkpoint's. With worker
    collectors (``train.collector.backend`` ``process``/``ray``) the workers' own random streams are
    not in the checkpoint: a resumed run is then not bit-exact (its resume notes say so).
    """
    set_rng_state(rng)  # an env drawing its resets from the global RNG draws the same in both runs
    restarted = collector.restart(seed)
    set_rng_state(rng)
    return restarted


class EpisodeRestarts:
    """:func:`restart_episodes` at each periodic checkpoint (and on resume), saying once on stderr when the env
    cannot be restarted (:data:`CANNOT_RESTART`)."""

    def __init__(self) -> None:
        self.warned = False

    def __call__(self, collector, rng: dict[str, Any], seed: int) -> None:
        if not restart_episodes(collector, rng, seed) and not self.warned:
            self.warned = True
            print(f"marl-ppo: {CANNOT_RESTART}", file=sys.stderr)
