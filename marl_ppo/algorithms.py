"""The algorithms: one table line each, read by the options, the router and the trainer.

An algorithm is what ``loss.algorithm`` names: the PPO loss each group trains with, what its
critic sees, and the update mode the trainer runs on a collected batch. Nothing else in the
package branches on an algorithm's name. Adding one is a line here (or a
:func:`register_algorithm` call), plus a file for a new loss or update mode:

* ``loss``: a torchrl PPO loss class (``"module:Class"``, imported on first use so the options load
  no torch); the router mixes in its per-head entropy coefficients and diagnostics
  (:mod:`marl_ppo.core.losses`) and gives it ``loss_kwargs`` besides the config's;
* ``critic``: ``centralised`` (a group critic sees the group's joint observation: MAPPO;
  ``model.critic=global`` needs it) or ``decentralised`` (each agent's own: IPPO);
* ``update``: the update mode, ``"module:function"`` with
  :func:`~marl_ppo.core.update.ppo_update`'s signature ``(model, step, batch, *, num_epochs,
  minibatch_size, should_stop, seq_len, generator, entropy_scale) -> diagnostics``. The joint step
  (every group's loss in one optimizer step) is the default; HAPPO's sequential mode
  (:func:`~marl_ppo.core.happo.happo_update`: the groups one after another) is another;
* ``sequential``: the update mode steps the groups one at a time, so each group keeps its own loss
  call (no bundles);
* ``update_options``: the ``loss`` section's field holding the update mode's own options (``happo``:
  ``loss.happo``), given to the update function as keyword arguments.

>>> algorithm("mappo").critic, algorithm("ippo").critic, algorithm("happo").sequential
('centralised', 'decentralised', True)
>>> algorithm("trpo")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
ValueError: unknown algorithm 'trpo'; registered algorithms: ['clip_ppo', 'happo', 'ippo', ...]
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["Algorithm", "ALGORITHMS", "algorithm", "register_algorithm", "JOINT_UPDATE"]

JOINT_UPDATE = "marl_ppo.core.update:ppo_update"  # every group's loss in one optimizer step


def _resolve(target: str | Callable) -> Any:
    if not isinstance(target, str):
        return target
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


@dataclass(frozen=True)
class Algorithm:
    """One algorithm (see the module docstring)."""

    name: str
    loss: str | type
    critic: Literal["centralised", "decentralised"]
    update: str | Callable[..., Any] = JOINT_UPDATE
    loss_kwargs: dict[str, Any] = field(default_factory=dict)
    sequential: bool = False
    update_options: str | None = None

    @property
    def centralised(self) -> bool:
        return self.critic == "centralised"

    def loss_class(self) -> type:
        return _resolve(self.loss)

    def update_fn(self, loss_options: Any = None) -> Callable[..., Any]:
        """The update mode's function (looked up when called for, so a patched module attribute is found),
        with its own options from ``loss_options`` (the config's ``loss`` section) bound."""
        fn = _resolve(self.update)
        if self.update_options is None or loss_options is None:
            return fn
        return functools.partial(fn, **dataclasses.asdict(getattr(loss_options, self.update_options)))


ALGORITHMS: dict[str, Algorithm] = {
    "mappo": Algorithm("mappo", "torchrl.objectives.multiagent:MAPPOLoss", "centralised"),
    "ippo": Algorithm("ippo", "torchrl.objectives.multiagent:IPPOLoss", "decentralised"),
    # torchrl's single-agent loss on a group: its advantage standardised over every dim but the agents'
    "clip_ppo": Algorithm(
        "clip_ppo",
        "torchrl.objectives:ClipPPOLoss",
        "decentralised",
        loss_kwargs={"normalize_advantage_exclude_dims": (-2,)},
    ),
    # the groups updated one after another, each surrogate weighted by the ratios of those before it
    "happo": Algorithm(
        "happo",
        "torchrl.objectives.multiagent:MAPPOLoss",
        "centralised",
        update="marl_ppo.core.happo:happo_update",
        sequential=True,
        update_options="happo",
    ),
}


def algorithm(name: str) -> Algorithm:
    """The registered algorithm ``name``; a ``ValueError`` listing the algorithms for any other."""
    try:
        return ALGORITHMS[name]
    except KeyError:
        raise ValueError(f"unknown algorithm {name!r}; registered algorithms: {sorted(ALGORITHMS)}") from None


def register_algorithm(entry: Algorithm) -> Algorithm:
    """Adds ``entry`` to the table (``loss.algorithm=<entry.name>`` then trains with it); returns it. A name
    already taken by another entry is refused."""
    if entry.name in ALGORITHMS and ALGORITHMS[entry.name] != entry:
        raise ValueError(f"algorithm {entry.name!r} is registered already ({ALGORITHMS[entry.name]})")
    ALGORITHMS[entry.name] = entry
    return entry
