"""The training state: everything a run changes as it trains, held in one object.

:class:`TrainState` is where every piece of state of the core lives, and the checkpoint is its
:meth:`~TrainState.state_dict` (plus the run's own records: RNG states, the config):

* the router's parameters and buffers (:meth:`TrainState.params`, tensordict's
  ``TensorDict.from_module``): the networks, each group's value-normalisation statistics, each
  head's entropy coefficient and its configured base;
* the optimizer's state (inside the :class:`~marl_ppo.core.aggregate.AggregatedStep`) and the
  learning-rate schedule's;
* ``generator``: the ``torch.Generator`` the update draws its minibatch order from (``None``: the
  global torch RNG);
* the counters (iteration, frames) and the last collected returns per group;
* ``pools``: the snapshot pools of ``pool`` seats (:mod:`marl_ppo.opponents.pool`), their stacked snapshots.

Nothing in the core keeps state anywhere else: the losses' per-call records
(:class:`~marl_ppo.core.losses.LossRecord`) live for one call, and no attribute is set on a
torchrl object from outside it.

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

from dataclasses import dataclass, field
from typing import Any

import torch
from tensordict import TensorDict
from torch import nn

from marl_ppo.core.aggregate import AggregatedStep

__all__ = ["TrainState"]


@dataclass
class TrainState:
    """The router, its optimizer step and schedule, the update's generator and the counters (see the module)."""

    router: nn.Module
    step: AggregatedStep
    scheduler: torch.optim.lr_scheduler.LRScheduler
    generator: torch.Generator | None = None
    iteration: int = 0
    frames: int = 0
    last_returns: dict[str, float] = field(default_factory=dict)
    pools: dict[str, Any] = field(default_factory=dict)  # snapshot pools by seat (opponents: pool)

    def params(self) -> TensorDict:
        """The router's parameters and buffers as one (locked) TensorDict, sharing their storage."""
        return TensorDict.from_module(self.router)

    def state_dict(self) -> dict[str, Any]:
        """Tensors and plain containers only (a checkpoint loads it with ``weights_only=True``)."""
        out = {
            "router": self.router.state_dict(),
            "optimizer": self.step.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "iteration": self.iteration,
            "frames": self.frames,
            "last_returns": dict(self.last_returns),
        }
        if self.generator is not None:
            out["generator"] = self.generator.get_state()
        if self.pools:
            out["pools"] = {g: pool.snapshots.state() for g, pool in self.pools.items()}
        return out

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores :meth:`state_dict`'s output (the router's tensors are copied onto its devices)."""
        self.router.load_state_dict(state["router"])
        self.step.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.iteration, self.frames = int(state["iteration"]), int(state["frames"])
        self.last_returns = dict(state.get("last_returns", {}))
        if self.generator is not None and "generator" in state:
            self.generator.set_state(state["generator"])
        for g, pool in self.pools.items():
            pool.snapshots.load(state["pools"][g])
