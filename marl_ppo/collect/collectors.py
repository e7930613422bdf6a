"""Collection backends: torchrl 0.14.1's own collectors, one batch layout for all of them.

:func:`make_collector` takes the env (or, for worker backends, one picklable env factory per
worker) and plain arguments; the run's config is read above, in :mod:`marl_ppo.run.build`.
``backend`` picks the collector:

* ``direct``: one :class:`torchrl.collectors.Collector` stepping the run's env in this process, or,
  for a plain VMAS env and policy, :class:`~marl_ppo.collect.lean_vmas.LeanVmasCollector`, which yields
  the same batches without torchrl's per-step overhead (about 1.4x faster collection);
* ``process``: ``Collector(..., backend="process")`` (a :class:`~torchrl.collectors.MultiSyncCollector`):
  one worker process per env factory;
* ``ray``: ``Collector(..., backend="ray")`` (a :class:`~torchrl.collectors.distributed.RayCollector`):
  the same workers as Ray actors, on the cluster at ``RAY_ADDRESS`` (or the one this process is
  connected to, or a local one it starts and stops).

Every backend yields a batch ``[envs, T]`` (envs × time), as the direct collector does:
the workers' batches are stacked (``cat_results="stack"``: ``[workers, envs, T]``) and the worker dim is
flattened into the env dim. Concatenating along time instead (``cat_results=-1``) would join two
workers' envs end to end with no done between them, and GAE would carry advantages across the seam.
Policy weights go to the workers once before the first batch and after every update
(:meth:`FlatCollector.update_policy_weights_`).

Every collector says what it is (``description``); where the lean VMAS path declined the env,
``declined`` says why (the run records both).

``reuse_batch`` (``direct`` with torchrl's ``Collector``, on the CPU): the batch is torchrl's
preallocated buffer (``return_same_td=True``) instead of its clone, so its tensors are overwritten
by the next collection. A batch is then valid until the next one is drawn; each is a shallow copy,
so keys a consumer adds (advantages) are its own and never reach the buffer. The clone of a batch
is what it saves: about a tenth of MAgent2 battle's collection with 8 copies, 28 % with 128 copies
and 16 000 frames, and half the peak memory there (docs/performance.md). The trainer asks for it
when no callback reads the batch (:mod:`marl_ppo.run.callbacks`).

>>> from marl_ppo import GroupRouter, read_group_specs
>>> from marl_ppo.envs import EnvConfig, make_env
>>> env = make_env(EnvConfig(num_envs=4, max_steps=10))
>>> router = GroupRouter.from_specs(read_group_specs(env), hidden=(16,))
>>> collector = make_collector(env, router.policy, frames_per_batch=40, total_frames=80)
>>> [tuple(b.batch_size) for b in collector], collector.description
([(4, 10), (4, 10)], 'lean VMAS collector (direct, in this process)')
>>> collector.shutdown()
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, Literal, Protocol

import torch
from tensordict import TensorDictBase
from torchrl.collectors import BaseCollector, Collector
from torchrl.envs import EnvBase

from marl_ppo.collect.lean_vmas import lean_vmas_collector, lean_vmas_refusal

__all__ = ["BatchCollector", "FlatCollector", "make_collector", "Backend"]

Backend = Literal["direct", "process", "ray"]


class BatchCollector(Protocol):
    """What the trainer needs of a collector: ``[envs, T]`` batches, weights sync, restart, shutdown."""

    description: str
    declined: str | None  # why the lean VMAS path declined the env, where it did

    def __iter__(self) -> Iterator[TensorDictBase]: ...

    def update_policy_weights_(self) -> None: ...

    def restart(self, seed: int) -> bool: ...

    def shutdown(self) -> None: ...


class FlatCollector:
    """Wraps a torchrl collector; yields batches ``[envs, T]`` whatever the backend.

    ``stacked``: the collector yields ``[workers, envs_per_worker, T]`` (flattened to ``[envs, T]``).
    ``reused``: the collector yields its own buffer each time (``return_same_td``); each batch is
    then a shallow copy of it, so that keys added downstream stay out of the next batch.
    """

    def __init__(
        self,
        collector: BaseCollector,
        *,
        stacked: bool,
        description: str,
        declined: str | None = None,
        reused: bool = False,
    ) -> None:
        self.collector = collector
        self.stacked = stacked
        self.description = description
        self.declined = declined
        self.reused = reused

    def __iter__(self) -> Iterator[TensorDictBase]:
        for batch in self.collector:
            batch = batch.flatten(0, 1) if self.stacked else batch
            yield batch.copy() if self.reused else batch  # copy(): new tensordicts, the same tensors

    def update_policy_weights_(self) -> None:
        """Sends the policy's current weights to the workers (a no-op for ``direct``)."""
        self.collector.update_policy_weights_()

    def shutdown(self) -> None:
        self.collector.shutdown()

    def restart(self, seed: int) -> bool:
        """Reseeds every env from ``seed`` and resets it (a checkpoint's episode boundary).

        Returns ``False`` where it cannot: torchrl's ``RayCollector`` has neither ``set_seed``
        nor ``reset`` (its envs go on with their episodes). An env without ``_set_seed`` is only
        reset (its new episodes come from whatever RNG it draws from).
        """
        if not (hasattr(self.collector, "set_seed") and hasattr(self.collector, "reset")):
            return False
        try:
            self.collector.set_seed(seed)
        except NotImplementedError:  # an env without _set_seed (a custom env may have none)
            pass
        self.collector.reset()
        return True


def make_collector(
    env: EnvBase | None,
    policy: Any,
    *,
    frames_per_batch: int,
    total_frames: int,
    device: str | torch.device | None = None,
    backend: Backend = "direct",
    env_fns: Sequence[Callable[[], EnvBase]] = (),
    lean: bool = True,
    reuse_batch: bool = False,
) -> BatchCollector:
    """The collector of ``backend``: ``env`` for ``direct``, one env factory per worker (``env_fns``) otherwise.

    ``total_frames`` must be finite for ``ray`` (torchrl's ``RayCollector`` yields nothing with -1).
    With ``lean`` (the default), ``direct`` on an env and policy that
    :func:`~marl_ppo.collect.lean_vmas.lean_vmas_collector` takes gets that collector: the same batches
    (keys, shapes, values, episode ends, restarts) as torchrl's ``Collector``, faster.
    ``reuse_batch``: torchrl's ``Collector`` (``direct``) yields its buffer, not a clone (the module's
    docstring); the lean VMAS collector's batches are fresh either way.
    """
    common: dict[str, Any] = dict(frames_per_batch=frames_per_batch, total_frames=total_frames, device=device)
    if backend == "direct":
        declined = "lean=False"
        if lean:
            lean_collector = lean_vmas_collector(env, policy, **common)
            if lean_collector is not None:
                return lean_collector
            declined = lean_vmas_refusal(env, policy, frames_per_batch=frames_per_batch, device=device)
        # on CUDA, torchrl's return_same_td also runs the collection on a stream of its own entered
        # inside its generator (left current while the batch is used): kept to the CPU, where it is measured
        on_cpu = all(torch.device(d).type == "cpu" for d in (device or "cpu", env.device or "cpu"))
        reuse_batch = reuse_batch and on_cpu
        return FlatCollector(
            Collector(env, policy, auto_register_policy_transforms=False, return_same_td=reuse_batch, **common),
            stacked=False,
            description="torchrl Collector (direct, in this process" + (", its buffer reused)" if reuse_batch else ")"),
            declined=declined,
            reused=reuse_batch,
        )
    if backend not in ("process", "ray"):
        raise ValueError(f"unknown collector backend {backend!r}; use 'direct', 'process' or 'ray'")
    if total_frames <= 0:
        raise ValueError(f"backend {backend!r} needs a finite total_frames, got {total_frames}")
    if not env_fns:
        raise ValueError(f"backend {backend!r} needs env_fns: one picklable env factory per worker")
    if backend == "process":
        collector = Collector(
            list(env_fns),
            policy,
            backend="process",
            sync=True,
            cat_results="stack",
            auto_register_policy_transforms=False,
            **common,
        )
        description = f"torchrl MultiSyncCollector ({len(env_fns)} worker processes)"
    else:
        _patient_ray_weight_sync()
        collector = Collector(
            list(env_fns),
            policy,
            backend="ray",
            sync=True,
            remote_configs={"num_cpus": 1, "memory": None},
            collector_kwargs={"auto_register_policy_transforms": False},
            **common,
        )
        description = f"torchrl RayCollector ({len(env_fns)} Ray actors)"
    flat = FlatCollector(collector, stacked=True, description=description)
    flat.update_policy_weights_()  # before the first batch: the workers start from this policy
    return flat


def _patient_ray_weight_sync() -> None:
    """torchrl 0.14.1's Ray weight sync waits a hard-coded 60 s (``_DIST_TIMEOUT``; its docstring says 300 s) for
    its workers to connect, and that wait includes starting a Ray worker process that imports torch: on a loaded
    2-core machine it timed out (``DistStoreError: wait timeout after 60000ms``; 70 s with four CPU hogs). Ten
    minutes, a bound on a hang, not on a slow start."""
    from datetime import timedelta

    from torchrl.weight_update import _ray as ray_sync

    ray_sync._DIST_TIMEOUT = max(ray_sync._DIST_TIMEOUT, timedelta(minutes=10))
