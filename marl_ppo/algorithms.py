"""The algorithms: rows of one :class:`~marl_ppo.table.Table`, read by the options, the router and the trainer.

An algorithm is what ``loss.algorithm`` names: the PPO loss each group trains with, what its
critic sees, and the update mode the trainer runs on a collected batch. Nothing else in the
package branches on an algorithm's name. Adding one is a row here (or a
:func:`register_algorithm` call), plus a file for a new loss or update mode:

* ``loss``: a torchrl PPO loss class (``"module:Class"`` of torchrl, imported on first use so the
  options load no torch); the router mixes in its per-head entropy coefficients and diagnostics
  (:mod:`marl_ppo.core.losses`) and gives it ``loss_kwargs`` besides the config's;
* ``critic``: ``centralised`` (a group critic sees the group's joint observation: MAPPO;
  ``model.critic=global`` needs it) or ``decentralised`` (each agent's own: IPPO);
* ``update``: the name of an update mode, a row of
  :data:`~marl_ppo.core.update_modes.UPDATE_MODES`: ``joint`` (every group's loss in one optimizer
  step, :func:`~marl_ppo.core.update.ppo_update`) or ``sequential`` (HAPPO's: the groups one after
  another, :func:`~marl_ppo.core.happo.happo_update`); a mode of one's own is a row registered there;
* ``sequential``: the update mode steps the groups one at a time, so each group keeps its own loss
  call (no bundles);
* ``options``: the algorithm's own options, a dataclass beside its row (HAPPO's
  :class:`HappoOptions`), read from the ``loss`` section's field of the algorithm's name
  (``loss.happo``) and given to the update mode as keyword arguments.

>>> algorithm("mappo").critic, algorithm("ippo").critic, algorithm("happo").sequential
('centralised', 'decentralised', True)
>>> algorithm("happo").update, algorithm("happo").options().order
('sequential', 'random')
>>> algorithm("mapo")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
ValueError: unknown algorithm 'mapo' (did you mean 'mappo' or 'happo'?); registered: ['clip_ppo', 'happo', ...]
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from marl_ppo.options import choice
from marl_ppo.table import Table, resolve

__all__ = ["Algorithm", "ALGORITHMS", "HappoOptions", "algorithm", "register_algorithm"]


@dataclass(frozen=True)
class Algorithm:
    """One algorithm (see the module docstring)."""

    name: str
    loss: str | type
    critic: Literal["centralised", "decentralised"]
    update: str = "joint"
    loss_kwargs: dict[str, Any] = field(default_factory=dict)
    sequential: bool = False
    options: type | None = None

    @property
    def centralised(self) -> bool:
        return self.critic == "centralised"

    def loss_class(self) -> type:
        return resolve(self.loss)


@dataclass
class HappoOptions:
    """HAPPO's sequential update (``loss.algorithm=happo``, ``docs/algorithms.md``).

    Attributes:
        order: ``random`` (a new order of the groups each iteration, drawn from the update's generator)
            or ``fixed`` (the env's order of the groups; what ``train.seeds`` needs: one order for all seeds).
        critic: ``after`` (every critic trained once, after all the policies: HARL's way) or
            ``with_actor`` (each group's critic stepped with its policy).
    """

    order: str = "random"
    critic: str = "after"

    def __post_init__(self) -> None:
        choice("loss.happo.order", self.order, ("random", "fixed"))
        choice("loss.happo.critic", self.critic, ("after", "with_actor"))


ALGORITHMS: Table[Algorithm] = Table(
    "algorithm",
    [
        Algorithm("mappo", "torchrl.objectives.multiagent:MAPPOLoss", "centralised"),
        Algorithm("ippo", "torchrl.objectives.multiagent:IPPOLoss", "decentralised"),
        # torchrl's single-agent loss on a group: its advantage standardised over every dim but the agents'
        Algorithm(
            "clip_ppo",
            "torchrl.objectives:ClipPPOLoss",
            "decentralised",
            loss_kwargs={"normalize_advantage_exclude_dims": (-2,)},
        ),
        # the groups updated one after another, each surrogate weighted by the ratios of those before it
        Algorithm(
            "happo",
            "torchrl.objectives.multiagent:MAPPOLoss",
            "centralised",
            update="sequential",
            sequential=True,
            options=HappoOptions,
        ),
    ],
)


def algorithm(name: str) -> Algorithm:
    """The registered algorithm ``name``; a ``ValueError`` with the closest names and every registered one
    for any other."""
    return ALGORITHMS.lookup(name)


def register_algorithm(entry: Algorithm) -> Algorithm:
    """Adds ``entry`` to the table (``loss.algorithm=<entry.name>`` then trains with it); returns it. A name
    already taken by another entry is refused."""
    return ALGORITHMS.register(entry)
