"""The update modes: what the trainer runs on a collected batch, rows of one :class:`~marl_ppo.table.Table`.

An algorithm's row (:mod:`marl_ppo.algorithms`) names its mode; the mode's function has
:func:`~marl_ppo.core.update.ppo_update`'s signature ``(model, step, batch, *, num_epochs,
minibatch_size, should_stop, seq_len, generator, entropy_scale, **options) -> diagnostics``:

* ``joint``: every group's loss in one optimizer step (:func:`~marl_ppo.core.update.ppo_update`);
* ``sequential``: HAPPO's, the groups one after another (:func:`~marl_ppo.core.happo.happo_update`).

A mode of one's own is an :class:`UpdateMode` registered here, named by an algorithm's row.
:func:`update_fn` gives the trainer an algorithm's mode with the algorithm's options bound.

>>> from marl_ppo.algorithms import algorithm
>>> update_fn(algorithm("mappo")).__name__
'ppo_update'
>>> update_fn(algorithm("happo")).keywords
{'order': 'random', 'critic': 'after'}
>>> UPDATE_MODES.lookup("joined")
Traceback (most recent call last):
...
ValueError: unknown update mode 'joined' (did you mean 'joint'?); registered: ['joint', 'sequential']
"""

from __future__ import annotations

import dataclasses
import functools
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from marl_ppo.algorithms import Algorithm
from marl_ppo.core.happo import happo_update
from marl_ppo.core.update import ppo_update
from marl_ppo.table import Table

__all__ = ["UpdateMode", "UPDATE_MODES", "update_fn"]


@dataclass(frozen=True)
class UpdateMode:
    """One update mode: ``fn`` runs the update on a batch (see the module docstring)."""

    name: str
    fn: Callable[..., Any]


UPDATE_MODES: Table[UpdateMode] = Table(
    "update mode",
    [UpdateMode("joint", ppo_update), UpdateMode("sequential", happo_update)],
)


def update_fn(algorithm: Algorithm, loss_options: Any = None) -> Callable[..., Any]:
    """``algorithm``'s update mode, with its options bound: the ``loss`` section's (``loss_options``) field of
    the algorithm's name (``loss.happo``), or the defaults of its options type where that section has none.

    The function is the one its module holds when this is called (a test patching
    ``marl_ppo.core.update.ppo_update`` reaches the trainer, which calls this every iteration)."""
    fn = UPDATE_MODES.lookup(algorithm.update).fn
    module = sys.modules.get(getattr(fn, "__module__", None) or "")
    fn = getattr(module, getattr(fn, "__name__", ""), fn) if module is not None else fn
    if algorithm.options is None:
        return fn
    options = getattr(loss_options, algorithm.name, None)
    if not isinstance(options, algorithm.options):
        options = algorithm.options()
    return functools.partial(fn, **dataclasses.asdict(options))
