"""Callbacks: your own code at fixed points of a run (``Trainer(cfg, callbacks=[...])``).

A callback is any object with some of these methods; those it lacks are skipped. Each gets the
trainer first. Per iteration, in this order:

=============================================  ============================================
``on_batch_collected(trainer, batch)``         after collection, the reward table and the
                                               advantages: the batch the update trains on,
                                               ``[S, E, T]`` (seeds, env copies, steps; S = 1
                                               for one run) and its own (a run without this
                                               hook reuses the collector's buffer instead)
``on_evaluation_end(trainer, returns)``        after an evaluation (every ``log.eval_every``
                                               iterations, and the final one): ``{group: return}``
``on_update_end(trainer, stats)``              after the iteration is logged: ``stats`` is its
                                               metrics (``{"train/agents/loss_objective": ...}``)
``on_checkpoint(trainer, path)``               after a checkpoint write: its ``iter_*.pt``
``on_run_end(trainer, summary)``               once, with the summary (``summary.json``)
=============================================  ============================================

``trainer.iteration``, ``trainer.frames``, ``trainer.parts`` (env, router, optimizer step) and
``trainer.run_dir`` are there to read; ``trainer.stop()`` ends the run after the current
iteration as if it had reached ``train.total_frames`` (early stopping). A callback that raises
stops the run: the error names the callback and the hook (:class:`CallbackError`), ``error.txt``
holds it, and the last checkpoint is kept. Callbacks should not draw from the global RNGs if a run is
to stay reproducible.

>>> class Printer(Callback):
...     def on_update_end(self, trainer, stats):
...         print(f"iteration {trainer.iteration}: loss {stats['train/loss']:.3f}")
>>> Callbacks([Printer()]).names
['Printer']
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["Callback", "Callbacks", "CallbackError", "HOOKS"]

HOOKS = ("on_batch_collected", "on_update_end", "on_evaluation_end", "on_checkpoint", "on_run_end")


class CallbackError(RuntimeError):
    """A callback raised; the run stopped (its last checkpoint kept)."""


class Callback:
    """A base class with every hook doing nothing; override the ones you need."""

    def on_batch_collected(self, trainer, batch) -> None:
        """After collection, the reward table and the advantages."""

    def on_update_end(self, trainer, stats: dict[str, float]) -> None:
        """After the update and its logging; ``stats``: the iteration's metrics."""

    def on_evaluation_end(self, trainer, returns: dict[str, float]) -> None:
        """After each evaluation; ``returns``: mean deterministic return per group."""

    def on_checkpoint(self, trainer, path) -> None:
        """After each checkpoint write; ``path``: the ``iter_*.pt`` written."""

    def on_run_end(self, trainer, summary: dict[str, Any]) -> None:
        """Once, after the final evaluation, with the run's summary."""


def _name(callback: object) -> str:
    return getattr(callback, "name", None) or type(callback).__name__


class Callbacks:
    """Calls a hook on every callback in order; wraps a failure in :class:`CallbackError`."""

    def __init__(self, callbacks: Sequence[object] = ()) -> None:
        callbacks = list(callbacks)
        for cb in callbacks:
            if not any(callable(getattr(cb, hook, None)) for hook in HOOKS):
                raise TypeError(f"callback {_name(cb)!r} has none of the hooks {list(HOOKS)}")
        self.callbacks = callbacks

    @property
    def names(self) -> list[str]:
        return [_name(cb) for cb in self.callbacks]

    def has(self, hook: str) -> bool:
        """Whether a callback implements ``hook`` (:class:`Callback`'s own no-op does not count)."""
        return any(
            callable(getattr(cb, hook, None)) and getattr(type(cb), hook, None) is not getattr(Callback, hook)
            for cb in self.callbacks
        )

    def __call__(self, hook: str, trainer, *args: Any) -> None:
        for cb in self.callbacks:
            method = getattr(cb, hook, None)
            if method is None:
                continue
            try:
                method(trainer, *args)
            except Exception as err:
                raise CallbackError(
                    f"callback {_name(cb)!r} failed in {hook}: {type(err).__name__}: {err} "
                    "(the run stopped; its last checkpoint is kept)"
                ) from err
