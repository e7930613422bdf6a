"""Collection backends: torchrl 0.14.1's own collectors, one batch layout for all of them.

``train.collector.backend`` picks the collector:

* ``direct``: one :class:`torchrl.collectors.Collector` stepping the run's env in this process, or,
  for a plain VMAS env and policy, :class:`~marl_ppo.collect.lean_vmas.LeanVmasCollector`, which yields
  the same batches without torchrl's per-step overhead (about 1.4x faster collection);
* ``process``: ``Collector(..., backend="process")`` (a :class:`~torchrl.collectors.MultiSyncCollector`):
  ``num_collectors`` worker processes, each with its own env of ``env.num_envs / num_collectors``
  vectorized envs;
* ``ray``: ``Collector(..., backend="ray")`` (a :class:`~torchrl.collectors.distributed.RayCollector`):
  the same workers as Ray actors, on the cluster at ``RAY_ADDRESS`` (or the one this process is
  connected to, or a local one it starts and stops).

Every backend yields a batch ``[env.num_envs, T]`` (envs × time), as the direct collector does:
the workers' batches are stacked (``cat_results="stack"``: ``[workers, envs, T]``) and the worker dim is
flattened into the env dim. Concatenating along time instead (``cat_results=-1``) would join two
workers' envs end to end with no done between them, and GAE would carry advantages across the seam.
Policy weights go to the workers once before the first batch and after every update
(:meth:`FlatCollector.update_policy_weights_`).

>>> from marl_ppo.config import load_config
>>> from marl_ppo.run.build import build
>>> cfg = load_config(overrides=["env.num_envs=4", "env.max_steps=10", "train.frames_per_batch=40", "train.minibatch_size=40",
...     "train.total_frames=80", "model.hidden=[16]"])
>>> parts = build(cfg)
>>> collector = make_collector(cfg, parts.env, parts.router.policy, total_frames=80)
>>> [tuple(b.batch_size) for b in collector]
[(4, 10), (4, 10)]
>>> collector.shutdown()
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Iterator

from tensordict import TensorDictBase
from torchrl.collectors import BaseCollector, Collector
from torchrl.envs import EnvBase

from marl_ppo.config import Config, EnvConfig
from marl_ppo.collect.lean_vmas import LeanVmasCollector, lean_vmas_collector

__all__ = ["FlatCollector", "make_collector", "worker_env_fns", "WORKER_SEED_STRIDE"]

WORKER_SEED_STRIDE = 10_007  # worker i's env seed: train.seed + i * stride (worker 0: the direct run's seed)


def _make_worker_env(env_cfg: EnvConfig, seed: int, num_envs: int, state: Any = None) -> EnvBase:
    from marl_ppo.envs import make_env
    from marl_ppo.models.recurrent import prime_env

    return prime_env(make_env(env_cfg, seed=seed, num_envs=num_envs), state)


def worker_env_fns(cfg: Config, state: Any = None) -> list[Callable[[], EnvBase]]:
    """One picklable env factory per collector worker, each with its share of ``env.num_envs``.

    ``state``: the policy's recurrent state entries (:func:`~marl_ppo.models.recurrent.state_spec`).
    """
    n = cfg.train.collector.num_collectors  # Config checked that it divides env.num_envs
    return [functools.partial(_make_worker_env, cfg.env, cfg.train.seed + i * WORKER_SEED_STRIDE, cfg.env.num_envs // n,
                              state)
            for i in range(n)]


class FlatCollector:
    """Wraps a torchrl collector; yields batches ``[envs, T]`` whatever the backend.

    ``stacked``: the collector yields ``[workers, envs_per_worker, T]`` (flattened to ``[envs, T]``).
    """

    def __init__(self, collector: BaseCollector, *, stacked: bool) -> None:
        self.collector = collector
        self.stacked = stacked

    def __iter__(self) -> Iterator[TensorDictBase]:
        for batch in self.collector:
            yield batch.flatten(0, 1) if self.stacked else batch

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


def make_collector(cfg: Config, env: EnvBase, policy: Any, *, total_frames: int,
                   lean: bool = True) -> FlatCollector | LeanVmasCollector:
    """The collector of ``train.collector``: ``env`` for ``direct``, env factories for the workers otherwise.

    ``total_frames`` must be finite for ``ray`` (torchrl's ``RayCollector`` yields nothing with -1).
    With ``lean`` (the default), ``direct`` on an env and policy that
    :func:`~marl_ppo.collect.lean_vmas.lean_vmas_collector` takes gets that collector: the same batches
    (keys, shapes, values, episode ends, restarts) as torchrl's ``Collector``, faster.
    """
    ccfg = cfg.train.collector
    common: dict[str, Any] = dict(frames_per_batch=cfg.train.frames_per_batch, total_frames=total_frames,
                                  device=cfg.train.device)
    if ccfg.backend == "direct":
        if lean:
            collector = lean_vmas_collector(env, policy, **common)
            if collector is not None:
                return collector
        return FlatCollector(Collector(env, policy, auto_register_policy_transforms=False, **common), stacked=False)
    if total_frames <= 0:
        raise ValueError(f"backend {ccfg.backend!r} needs a finite total_frames, got {total_frames}")
    from marl_ppo.models.recurrent import state_spec

    env_fns = worker_env_fns(cfg, state_spec(policy))
    if ccfg.backend == "process":
        collector = Collector(env_fns, policy, backend="process", sync=True, cat_results="stack",
                              auto_register_policy_transforms=False, **common)
    else:
        collector = Collector(env_fns, policy, backend="ray", sync=True,
                              remote_configs={"num_cpus": 1, "memory": None},
                              collector_kwargs={"auto_register_policy_transforms": False}, **common)
    flat = FlatCollector(collector, stacked=True)
    flat.update_policy_weights_()  # before the first batch: the workers start from this policy
    return flat
