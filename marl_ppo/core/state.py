"""The training state: everything a run of 1..S seeds changes as it trains, held in one object.

:class:`TrainState` is where every piece of state of the core lives, and a seed's checkpoint is
its :meth:`~TrainState.state_dict` (plus the run's own records: RNG states, the config):

* the parameters and buffers of every seed (:attr:`TrainState.stack`, a
  :class:`~marl_ppo.core.seeds.SeedStack`: one router's own tensors, or S stacked): the networks,
  each group's value-normalisation statistics, each head's configured entropy coefficient;
* the optimizer's state (inside the :class:`~marl_ppo.core.aggregate.AggregatedStep`, one for all
  seeds) and the learning-rate schedule's (one: the seeds share their config);
* the entropy schedule: :attr:`TrainState.entropy_scale` is its value at the current iteration, which
  the update passes to the losses (``ppo_update(..., entropy_scale=)``); nothing sets it on the losses;
* ``generators``: each seed's ``torch.Generator`` the update draws its minibatch order from
  (``None``: the global torch RNG);
* the counters (iteration, frames per seed) and each seed's last collected returns per group;
* ``snapshots``: the frozen snapshots of each ``pool`` seat (:mod:`marl_ppo.opponents.pool`'s
  ``SnapshotNet``, read through the :class:`Snapshots` protocol: the core imports no opponents).

Nothing in the core keeps state anywhere else: the losses' per-call records
(:class:`~marl_ppo.core.losses.LossRecord`) live for one call, and no attribute is set on a
torchrl object from outside it. Seed ``s``'s :meth:`~TrainState.state_dict` is the one its single
run would write (the router's state dict, the optimizer's over the router's parameters), so every
seed's checkpoint loads as a single run's.

>>> import torch
>>> from marl_ppo.core.aggregate import AggregatedStep
>>> net = torch.nn.Linear(2, 1)
>>> step = AggregatedStep(net, lr=0.1)
>>> state = TrainState(net, step, torch.optim.lr_scheduler.LambdaLR(step.optimizer, lambda it: 1.0))
>>> sorted(state.state_dict())
['frames', 'iteration', 'last_returns', 'optimizer', 'router', 'scheduler']
>>> state.params()["weight"].shape
torch.Size([1, 2])
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import torch
from tensordict import TensorDict
from torch import nn

from marl_ppo.core.aggregate import AggregatedStep
from marl_ppo.core.seeds import SeedStack

__all__ = ["TrainState", "Snapshots"]


@runtime_checkable
class Snapshots(Protocol):
    """A pool seat's frozen snapshots as the training state saves and restores them."""

    def state(self) -> dict[str, Any]: ...

    def load(self, state: Mapping[str, Any]) -> None: ...


class TrainState:
    """The seeds' parameters, their optimizer step and schedule, the update's generators and the counters.

    ``model``: a :class:`~marl_ppo.core.seeds.SeedStack` (a router: a stack of one seed). ``generator``:
    the update's generator, or one per seed. ``entropy_schedule``: iteration -> the scale of every
    entropy coefficient (``None``: as configured, always). A seed's checkpoint lists its Adam state
    by the router's trainable parameter names in a single run's optimizer order (:attr:`names`).
    """

    def __init__(
        self,
        model: nn.Module | SeedStack,
        step: AggregatedStep,
        scheduler: torch.optim.lr_scheduler.LRScheduler,
        generator: torch.Generator | Sequence[torch.Generator | None] | None = None,
        *,
        snapshots: Mapping[str, Snapshots] | None = None,
        entropy_schedule: Callable[[int], float] | None = None,
    ) -> None:
        self.stack = model if isinstance(model, SeedStack) else SeedStack([model])
        self.step, self.scheduler = step, scheduler
        generators = list(generator) if isinstance(generator, Sequence) else [generator]
        if len(generators) != self.seeds:
            raise ValueError(f"one generator per seed: {self.seeds} seed(s), {len(generators)} generator(s)")
        self.generators = generators
        self.iteration, self.frames = 0, 0
        self.returns: list[dict[str, float]] = [{} for _ in generators]  # each seed's last collected returns
        self.snapshots = dict(snapshots or {})  # by pool seat
        for seat, pool in self.snapshots.items():
            if not isinstance(pool, Snapshots):
                raise TypeError(f"snapshots[{seat!r}]: a {type(pool).__name__} has no state()/load(): not Snapshots")
        self.names = [n for n, p in self.router.named_parameters() if p.requires_grad]  # a single run's order
        self.entropy_schedule = entropy_schedule

    @property
    def entropy_scale(self) -> float | None:
        """The scale of every entropy coefficient for the update of the current iteration (``None``: 1)."""
        return None if self.entropy_schedule is None else self.entropy_schedule(self.iteration)

    @property
    def seeds(self) -> int:
        return self.stack.seeds

    @property
    def router(self) -> nn.Module:
        """The router (with S seeds: the template, holding seed 0's tensors between calls)."""
        return self.stack.template

    @property
    def generator(self) -> torch.Generator | None:
        """The first seed's generator (a single run's)."""
        return self.generators[0]

    @property
    def last_returns(self) -> dict[str, float]:
        """The first seed's last collected returns (a single run's)."""
        return self.returns[0]

    def params(self) -> TensorDict:
        """Every parameter and buffer as one (locked) TensorDict sharing their storage (stacked: ``[S]``)."""
        return self.stack.params if self.stack.stacked else TensorDict.from_module(self.router)

    def state_dict(self, seed: int = 0) -> dict[str, Any]:
        """Seed ``seed``'s state as its single run has it: tensors and plain containers only (a checkpoint
        loads it with ``weights_only=True``)."""
        out = {
            "router": self.stack.state_dict(seed),
            "optimizer": self._seed_optimizer(seed),
            "scheduler": self.scheduler.state_dict(),
            "iteration": self.iteration,
            "frames": self.frames,
            "last_returns": dict(self.returns[seed]),
        }
        if self.generators[seed] is not None:
            out["generator"] = self.generators[seed].get_state()
        if self.snapshots:
            out["pools"] = {g: pool.state() for g, pool in self.snapshots.items()}
        return out

    def load_state_dict(self, state: dict[str, Any], seed: int = 0) -> None:
        """Restores :meth:`state_dict`'s output for ``seed`` (the tensors are copied onto their devices)."""
        self.stack.load_state_dict(seed, state["router"])
        self.load_optimizer_states({seed: state["optimizer"]})
        self.scheduler.load_state_dict(state["scheduler"])
        self.iteration, self.frames = int(state["iteration"]), int(state["frames"])
        self.returns[seed] = dict(state.get("last_returns", {}))
        if self.generators[seed] is not None and "generator" in state:
            self.generators[seed].set_state(state["generator"])
        for g, pool in self.snapshots.items():
            pool.load(state["pools"][g])

    # -- each seed's optimizer state in its single run's form ----------------------------

    def _seed_optimizer(self, seed: int) -> dict[str, Any]:
        """Seed ``seed``'s Adam state as its single run's optimizer lists it (by :attr:`names`)."""
        state = {}
        for i, name in enumerate(self.names):
            own = self.step.optimizer.state.get(self.stack.stored(name))
            if own:
                state[i] = {k: (v if k == "step" else self.stack.slice_of(v, seed)).clone() for k, v in own.items()}
        groups = [
            {**g, "params": list(range(len(self.names)))} for g in self.step.optimizer.state_dict()["param_groups"]
        ]
        return {"state": state, "param_groups": groups}

    def load_optimizer_states(self, states: dict[int, dict[str, Any]]) -> None:
        """Single-run optimizer states (``{seed: optimizer state dict}``, listed by :attr:`names`) into the
        optimizer's part of those seeds: a resumed run continues each seed's moments (and the param groups'
        learning rates, which the schedule set)."""
        optimizer = self.step.optimizer
        for i, name in enumerate(self.names):
            p = self.stack.stored(name)
            for seed, single in states.items():
                own = single["state"].get(i)
                if not own:
                    continue
                if not optimizer.state.get(p):  # a fresh optimizer: moments of zeros, every seed's
                    optimizer.state[p] = {
                        k: (torch.zeros_like(v, device=p.device) if k == "step" else torch.zeros_like(p))
                        for k, v in own.items()
                    }
                mine = optimizer.state[p]
                with torch.no_grad():
                    for k, v in own.items():
                        (mine[k] if k == "step" else self.stack.slice_of(mine[k], seed)).copy_(v)
        for group, saved in zip(optimizer.param_groups, next(iter(states.values()))["param_groups"]):
            group.update({k: v for k, v in saved.items() if k != "params"})
