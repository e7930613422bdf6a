"""Many seeds in one process (``train.seeds``): S runs on one env batch, one run directory per seed.

Each seed is the :class:`~marl_ppo.run.trainer.Trainer` of its single run (``train.seed=s``, built
as that run builds: the same initial networks, its own run directory, logger, evaluation and
checkpoints). What they share: one env of ``S x env.num_envs`` copies (VMAS or PettingZoo), seed ``s`` acting on
copies ``[s E, (s + 1) E)`` with its own policy (:func:`seed_policy`), and one update for all
(:mod:`marl_ppo.core.seeds`: stacked parameters, ``torch.vmap`` over the seed dim, per-seed
minibatch order, clip and Adam). After each update, each seed's parameters, statistics and Adam
moments are written into its trainer, which then logs, evaluates and checkpoints as a single run
does: ``eval``, ``plot``, ``suite merge`` read each directory as a single run's.

VMAS keeps one random stream per process (DESIGN.md trap 17), and the policies sample from the
global one: the seeds of a group are independent runs, but not the runs each seed gives alone. The
same list of seeds gives the same group again (bit for bit on CPU).

Written by hand: torchrl's collectors take one policy; :func:`seed_policy` is the policy that runs
each seed's actor networks on its own env copies, in one vmapped call.

>>> import tempfile
>>> from marl_ppo.config import load_config
>>> cfg = load_config(overrides=["env.num_envs=4", "env.max_steps=10", "train.frames_per_batch=40",
...     "train.total_frames=80", "train.num_epochs=1", "train.minibatch_size=20", "model.hidden=[16]",
...     "log.plot=false", "train.seeds=[0,1]", f"log.root={tempfile.mkdtemp()}", "log.name=demo"])
>>> group = SeedsTrainer(cfg)
>>> [(s["run_dir"].rpartition("/")[2], s["frames"]) for s in group.fit()]
[('demo-seed0', 80), ('demo-seed1', 80)]
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any

import torch
from tensordict import TensorDictBase
from tensordict.nn import (
    ProbabilisticTensorDictSequential,
    TensorDictModule,
    TensorDictModuleBase,
    TensorDictSequential,
)
from torch import nn

from marl_ppo.collect.collectors import make_collector
from marl_ppo.config import Config
from marl_ppo.core.seeds import SeedStack, SeedStep, seed_refusal, seeds_update
from marl_ppo.core.update import TrainingError
from marl_ppo.envs import make_env
from marl_ppo.models.recurrent import prime_env, state_spec
from marl_ppo.options import ConfigError
from marl_ppo.run.build import build, seed_everything
from marl_ppo.run.checkpoints import load_checkpoint, rng_state
from marl_ppo.run.directory import note
from marl_ppo.run.resume import restart_episodes
from marl_ppo.run.trainer import Trainer

__all__ = [
    "SeedNet",
    "SeedLoop",
    "seed_policy",
    "SeedsTrainer",
    "seed_config",
    "check_seeds",
    "resume_group",
    "GROUP_FILE",
]

GROUP_FILE = "seeds_group.json"  # in each seed's run directory: the group's seeds and run directories


def check_seeds(cfg: Config) -> None:
    """Refuses, in one line before any run directory exists, what many seeds in one process cannot run yet."""
    why = None
    if cfg.env.kind == "custom":
        why = "env.kind=custom (one batched env for all seeds: VMAS and PettingZoo for now)"
    elif cfg.train.collector.backend != "direct":
        why = f"train.collector.backend={cfg.train.collector.backend} (the seeds collect in this process)"
    elif cfg.opponents:
        why = "opponents (a pool or a frozen player per seed is not stacked yet)"
    elif cfg.train.compile:
        why = "train.compile=true (compiling the vmapped update is not measured yet)"
    elif cfg.log.video:
        why = "log.video=true"
    if why is not None:
        raise ConfigError(f"train.seeds={cfg.train.seeds}: many seeds in one process do not support {why}")


def seed_config(cfg: Config, seed: int) -> Config:
    """Seed ``seed``'s own config: a single run's (``train.seed``, no ``train.seeds``), named per seed."""
    name = f"{cfg.log.name}-seed{seed}" if cfg.log.name else None
    return dataclasses.replace(
        cfg,
        train=dataclasses.replace(cfg.train, seed=seed, seeds=[]),
        log=dataclasses.replace(cfg.log, name=name, progress=False),
    )


def _apart_from_seed(cfg: Config) -> Config:
    return dataclasses.replace(
        cfg, train=dataclasses.replace(cfg.train, seed=0, seeds=[]), log=dataclasses.replace(cfg.log, name=None)
    )


class SeedNet(nn.Module):
    """A template network run with every seed's stacked parameters, seed ``s`` on env copies ``[s E, (s + 1) E)``:
    one vmapped call for all seeds."""

    def __init__(self, net: nn.Module, params: TensorDictBase, seeds: int) -> None:
        super().__init__()
        self._net, self._params, self.seeds = (net,), (params,), seeds  # the template's: not registered twice

    def forward(self, x: torch.Tensor):
        def run(params, x):
            with params.to_module(self._net[0]):  # (torchrl's per-agent networks keep their TensorDictParams)
                return self._net[0](x)

        if self.seeds == 1:
            return run(self._params[0][0], x)
        out = torch.vmap(run)(self._params[0], x.reshape(self.seeds, -1, *x.shape[1:]))
        if isinstance(out, torch.Tensor):
            return out.reshape(-1, *out.shape[2:])
        return tuple(y.reshape(-1, *y.shape[2:]) for y in out)  # (loc, scale) of a continuous head


class SeedLoop(TensorDictModuleBase):
    """The template router's whole policy run seed by seed, seed ``s`` on env copies ``[s E, (s + 1) E)`` with its
    own tensors: the collection policy of a recurrent router (torch.vmap has no batching rule for GRU/LSTM)."""

    def __init__(self, stack: SeedStack) -> None:
        super().__init__()
        self._stack = (stack,)  # the template's modules: not registered twice
        self.in_keys, self.out_keys = list(stack.template.policy.in_keys), list(stack.template.policy.out_keys)

    def forward(self, td: TensorDictBase) -> TensorDictBase:
        stack = self._stack[0]
        n = td.shape[0] // stack.seeds
        outs = []
        for s in range(stack.seeds):
            with stack.seed(s) as router:
                outs.append(router.policy(td[s * n : (s + 1) * n].clone(False)))
        return td.update(torch.cat(outs))


def seed_policy(stack: SeedStack) -> TensorDictModuleBase:
    """The collection policy of all seeds: each group's actor with its network run by :class:`SeedNet` (the lean
    VMAS collector calls the network on plain tensors, and it sees one actor per group, as in a single run);
    a recurrent router's policy seed by seed (:class:`SeedLoop`)."""
    if stack.template.recurrent_keys:
        return SeedLoop(stack)
    actors = []
    for g in stack.template.groups:
        net, dist = stack.template.losses[g].actor_network.module
        seeded = TensorDictModule(
            SeedNet(net.module, stack.stacked_of(net.module), stack.seeds), in_keys=net.in_keys, out_keys=net.out_keys
        )
        actors.append(ProbabilisticTensorDictSequential(seeded, dist))
    return TensorDictSequential(*actors)


class SeedsTrainer:
    """``train.seeds``: each seed's :class:`~marl_ppo.run.trainer.Trainer`, trained together.

    The seeds' run directories go under ``log.root``, each named as its single run would be
    (``<env>-<algorithm>-seed<s>``, or ``<log.name>-seed<s>``). The time each seed logs for
    collection and update (``time/collect_s``, ``time/update_s``) is the whole group's, so its
    ``time/fps`` is frames per second per seed. There is no progress bar.
    """

    def __init__(
        self, cfg: Config, *, configs: list[Config] | None = None, run_dirs: list | None = None, resume: bool = False
    ) -> None:
        """``cfg`` with ``train.seeds``; or each seed's own ``configs`` (single-run configs that differ only in
        ``train.seed`` and ``log.name``, as a suite plans them) with their ``run_dirs``. ``resume``: the group
        in ``run_dirs`` continues from its seeds' checkpoints (:func:`resume_group`)."""
        seeds = list(cfg.train.seeds) if configs is None else [c.train.seed for c in configs]
        configs = [seed_config(cfg, s) for s in seeds] if configs is None else list(configs)
        run_dirs = [None] * len(configs) if run_dirs is None else list(run_dirs)
        self.cfg = cfg = dataclasses.replace(configs[0], train=dataclasses.replace(configs[0].train, seeds=seeds))
        self._failed: set[int] = set()
        if len(seeds) == 1:  # one seed: its single run, exactly (nothing to stack)
            self.trainers, self.stack = [Trainer(configs[0], run_dir=run_dirs[0], resume=resume)], None
            return
        check_seeds(cfg)
        differ = [c.train.seed for c in configs if _apart_from_seed(c) != _apart_from_seed(configs[0])]
        if differ:
            raise ConfigError(f"the configs of seeds {differ} differ from seed {seeds[0]}'s in more than the seed")
        probe = build(configs[0])  # what the networks are, before any run directory exists
        probe.env.close()
        why = seed_refusal(probe.router)
        if why is not None:
            raise ConfigError(f"train.seeds={seeds}: many seeds in one process do not support {why} yet")
        self.trainers = [Trainer(c, run_dir=d, resume=resume) for c, d in zip(configs, run_dirs)]  # single runs'
        self.stack = SeedStack([t.parts.router for t in self.trainers])  # resumed: from their checkpoints
        self.step = SeedStep(
            self.stack, lr=cfg.train.lr, max_grad_norm=cfg.train.max_grad_norm, weights=cfg.loss.group_weights
        )
        self._names = [[n for n, p in t.parts.router.named_parameters() if p.requires_grad] for t in self.trainers]
        self.step.set_lr(self.trainers[0].scheduler.get_last_lr()[0])
        if resume:
            self.step.load_optimizer_states([t.parts.step.optimizer for t in self.trainers], self._names[0])
        group = {"seeds": seeds, "run_dirs": [str(t.run_dir) for t in self.trainers]}
        for trainer in self.trainers:  # --resume of any seed's directory resumes the group
            (trainer.run_dir / GROUP_FILE).write_text(json.dumps(group, indent=2) + "\n")
        for trainer in self.trainers:  # each trainer's own env: the seeds collect on the shared one
            trainer.parts.env.close()
        seed_everything(seeds[0])
        self.envs = cfg.env.num_envs
        self.env = make_env(cfg.env, seed=seeds[0], num_envs=len(seeds) * self.envs)
        prime_env(self.env, state_spec(self.stack.template.policy))  # a recurrent model's stored states
        self.policy = seed_policy(self.stack)

    @property
    def run_dirs(self) -> list[Path]:
        return [t.run_dir for t in self.trainers]

    def fit(self) -> list[dict[str, Any]]:
        """Trains every seed to ``train.total_frames``; returns their summaries (each also its ``summary.json``)."""
        cfg, seeds = self.cfg, len(self.trainers)
        remaining = cfg.train.total_frames - self.trainers[0].frames  # a resumed group: what is left
        if self.stack is None or remaining <= 0:  # one seed; or a group that ended: each completes its record
            return [trainer.fit() for trainer in self.trainers]
        collector = make_collector(
            self.env,
            self.policy,
            frames_per_batch=seeds * cfg.train.frames_per_batch,
            total_frames=seeds * remaining,
            device=cfg.train.device,
            backend="direct",
        )
        for trainer in self.trainers:
            trainer.collector_used = f"{collector.description}, {seeds} seeds in one process (train.seeds)"
            note(trainer.run_dir, f"collector: {trainer.collector_used}")
        first = self.trainers[0]
        if first.iteration:  # resumed at a checkpoint: the envs restart there, as the uninterrupted group's did
            rng = load_checkpoint(first.ckpt_dir / f"iter_{first.iteration:05d}.pt")["rng"]
            restart_episodes(collector, rng, cfg.train.seed + first.iteration)
        progress = _NoProgress()
        try:
            t0 = time.perf_counter()
            for batch in collector:
                t_collect, t1 = time.perf_counter() - t0, time.perf_counter()
                batch = self.trainers[0].parts.reward_table(batch)  # elementwise: every seed's copies at once
                batch = self.stack.compute_advantages(batch.reshape(seeds, self.envs, -1))
                stats = seeds_update(
                    self.stack,
                    self.step,
                    batch,
                    num_epochs=cfg.train.num_epochs,
                    minibatch_size=cfg.train.minibatch_size,
                    generators=[t.state.generator for t in self.trainers],
                    seq_len=cfg.model.seq_len,  # read only by a recurrent router, as ppo_update does
                )
                t_update = time.perf_counter() - t1
                for s, trainer in enumerate(self.trainers):
                    if s in self._failed:
                        continue
                    if not bool(self.step.alive[s]):  # a non-finite loss: this seed stops, its last good state kept
                        self._fail(s, trainer)
                        continue
                    self._to_trainer(s, trainer)
                    trainer.record(batch[s], stats[s], t_collect=t_collect, t_update=t_update, progress=progress)
                    self.stack.load_state_dict(s, trainer.parts.router.state_dict())  # its scheduled coefficients
                    if trainer.checkpoint_due() and trainer.frames < cfg.train.total_frames:
                        trainer.save()
                self.step.set_lr(first.scheduler.get_last_lr()[0])
                if first.checkpoint_due() and first.frames < cfg.train.total_frames:  # an episode boundary
                    restart_episodes(collector, rng_state(), cfg.train.seed + first.iteration)
                t0 = time.perf_counter()
        except BaseException as err:
            for s, trainer in enumerate(self.trainers):
                if s not in self._failed:
                    trainer.logger.error(err)
                    trainer.close()
            raise
        finally:
            collector.shutdown()
        return [t.finish() for s, t in enumerate(self.trainers) if s not in self._failed]

    def _fail(self, s: int, trainer: Trainer) -> None:
        """Seed ``s`` failed: its run ends with the error, its last checkpoint kept, as a single run's would."""
        self._failed.add(s)
        trainer.logger.error(TrainingError(self.step.failures[s]))
        trainer.close()

    def _to_trainer(self, s: int, trainer: Trainer) -> None:
        """Seed ``s``'s parameters, statistics and Adam moments into its own trainer (what it logs and saves)."""
        trainer.parts.router.load_state_dict(self.stack.state_dict(s))
        optimizer = trainer.parts.step.optimizer
        optimizer.load_state_dict(self.step.optimizer_state(s, self._names[s], optimizer))


def resume_group(run_dir: str | Path, overrides: list[str] = ()) -> SeedsTrainer:
    """The group of seeds that ``run_dir`` (any seed's directory) belongs to, resumed from its checkpoints."""
    from marl_ppo.config import load_config

    group = json.loads((Path(run_dir) / GROUP_FILE).read_text())
    dirs = [Path(d) for d in group["run_dirs"]]
    configs = [load_config(d / "config.yaml", list(overrides)) for d in dirs]
    return SeedsTrainer(configs[0], configs=configs, run_dirs=dirs, resume=True)


class _NoProgress:
    def update(self, *args, **kwargs) -> None:
        pass
