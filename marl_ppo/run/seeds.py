"""Many seeds in one process (``train.seeds``): what S seeds of one :class:`~marl_ppo.run.trainer.Trainer` need.

The trainer runs 1..S seeds through one loop and one shape (``[S, ...]``); this module holds the
pieces a group of seeds adds around it:

* each seed's single-run config (:func:`seed_config`: ``train.seed=s``, its own run directory), and
  the check that a suite's seed configs differ in the seed alone (:func:`check_seeds`; what many
  seeds cannot run is refused when the config is read, :meth:`~marl_ppo.config.Config.seed_refusals`);
* the collection policy of stacked seeds (:func:`collection_policy`, :func:`seed_policy`): one env of
  ``S x env.num_envs`` copies, seed ``s`` acting on copies ``[s E, (s + 1) E)`` with its own networks,
  in one vmapped call;
* the group file in each seed's directory, through which ``--resume`` of any seed resumes the group
  and which names the seeds that stopped (:func:`write_group_file`, :func:`stopped_seeds`).

VMAS keeps one random stream per process (DESIGN.md trap 17), and the policies sample from the
global one: the seeds of a group are independent runs, but not the runs each seed gives alone. The
same list of seeds gives the same group again (bit for bit on CPU).

Written by hand: torchrl's collectors take one policy; :func:`seed_policy` is the policy that runs
each seed's actor networks on its own env copies.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from pathlib import Path

import torch
from tensordict import TensorDictBase
from tensordict.nn import (
    ProbabilisticTensorDictSequential,
    TensorDictModule,
    TensorDictModuleBase,
    TensorDictSequential,
)
from torch import nn

from marl_ppo.config import Config
from marl_ppo.core.seeds import SeedStack
from marl_ppo.opponents import opponent_policy
from marl_ppo.options import ConfigError
from marl_ppo.run.build import Parts
from marl_ppo.run.group_result import group_directory

__all__ = [
    "SeedNet",
    "SeedLoop",
    "seed_policy",
    "seed_config",
    "seed_configs",
    "check_seeds",
    "collection_policy",
    "group_run_dirs",
    "write_group_file",
    "stopped_seeds",
    "seed_group_dir",
    "GROUP_FILE",
]

GROUP_FILE = "seeds_group.json"  # in each seed's run directory: the group's seeds and run directories


def check_seeds(configs: Sequence[Config]) -> None:
    """Refuses seed ``configs`` (a suite's jobs) that differ in more than the seed and its name, and, read as one
    ``train.seeds`` config, what many seeds cannot run (:meth:`~marl_ppo.config.Config.seed_refusals`)."""
    differ = [c.train.seed for c in configs if _apart_from_seed(c) != _apart_from_seed(configs[0])]
    if differ:
        raise ConfigError(
            f"the configs of seeds {differ} differ from seed {configs[0].train.seed}'s in more than the seed"
        )
    seeds = [c.train.seed for c in configs]
    dataclasses.replace(configs[0], train=dataclasses.replace(configs[0].train, seed=0, seeds=seeds))  # validated


def seed_configs(cfg: Config) -> list[Config]:
    """The single-run config of each seed of ``cfg``: ``[cfg]`` itself without ``train.seeds``."""
    return [seed_config(cfg, s) for s in cfg.train.seeds] if cfg.train.seeds else [cfg]


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
    """The collection policy of a stack's seeds: each group's actor with its network run by :class:`SeedNet` (the
    lean VMAS collector calls the network on plain tensors, and it sees one actor per group, as in a single run);
    a router with a recurrent or any other trunk (:mod:`~marl_ppo.models.registry`) seed by seed (:class:`SeedLoop`).
    Stacked storage only: one seed's own tensors collect with the template's own policy."""
    nets = {g: stack.template.losses[g].actor_network.module for g in stack.template.groups}
    if stack.template.recurrent_keys or any(isinstance(net, TensorDictSequential) for net, _ in nets.values()):
        return SeedLoop(stack)
    actors = []
    for g, (net, dist) in nets.items():
        seeded = TensorDictModule(
            SeedNet(net.module, stack.stacked_of(net.module), stack.seeds), in_keys=net.in_keys, out_keys=net.out_keys
        )
        actors.append(ProbabilisticTensorDictSequential(seeded, dist))
    return TensorDictSequential(*actors)


def collection_policy(parts: Parts, stack: SeedStack) -> TensorDictModuleBase:
    """What acts in the env of ``parts`` for the seeds of ``stack``: the template's own policy where the stack
    stores one seed's own tensors, else :func:`seed_policy` followed by the frozen opponents' players (one
    player for every seed's copies)."""
    if not stack.stacked:
        return parts.policy
    return opponent_policy(seed_policy(stack), parts.opponents)


def group_run_dirs(run_dir: str | Path) -> list[Path]:
    """The run directories of the group of seeds that ``run_dir`` (any seed's directory) belongs to."""
    group = json.loads((Path(run_dir) / GROUP_FILE).read_text())
    return [Path(d) for d in group["run_dirs"]]


def seed_group_dir(cfg: Config, run_dirs: Sequence[Path], resume: bool) -> Path | None:
    """The directory of a group's result (:mod:`~marl_ppo.run.group_result`): a resumed group's own, named in its
    seeds' group file (``--resume`` gives the seeds' single-run configs, without ``train.seeds``), else a new one
    claimed beside the seeds' (``<log.name or task-algorithm>-seeds``) for a ``train.seeds`` run; ``None`` for
    seeds whose result their caller writes (a suite's group)."""
    group_file = Path(run_dirs[0]) / GROUP_FILE
    if resume and group_file.exists() and "group_dir" in (group := json.loads(group_file.read_text())):
        return Path(group["group_dir"])
    if not cfg.train.seeds:
        return None
    return group_directory(cfg.log.name or f"{cfg.env.task_name}-{cfg.loss.algorithm}", run_dirs)


def write_group_file(
    run_dirs: Sequence[Path], seeds: Sequence[int], group_dir: Path | None = None, stopped: Mapping[int, str] = {}
) -> None:
    """Each seed's directory names the whole group (``--resume`` of any of them resumes all) and the seeds that
    stopped on a non-finite loss (``stopped``, by seed index: a resumed group leaves them stopped)."""
    group = {"seeds": list(seeds), "run_dirs": [str(Path(d).resolve()) for d in run_dirs]}  # from any folder
    if group_dir is not None:
        group["group_dir"] = str(Path(group_dir).resolve())
    if stopped:
        group["stopped"] = {str(s): why for s, why in sorted(stopped.items())}
    for run_dir in run_dirs:
        (Path(run_dir) / GROUP_FILE).write_text(json.dumps(group, indent=2) + "\n")


def stopped_seeds(run_dir: str | Path) -> dict[int, str]:
    """The seeds of ``run_dir``'s group that stopped on a non-finite loss (by seed index), from its group file."""
    path = Path(run_dir) / GROUP_FILE
    if not path.exists():
        return {}
    return {int(s): why for s, why in json.loads(path.read_text()).get("stopped", {}).items()}
