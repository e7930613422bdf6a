"""The collect layer's options: which collector backend, how many workers.

:class:`CollectorConfig` is the ``train.collector`` section of a run's config; :mod:`marl_ppo.run.build`
reads it into :func:`~marl_ppo.collect.collectors.make_collector`'s arguments.

>>> CollectorConfig(backend="process", num_collectors=2).num_collectors
2
"""

from __future__ import annotations

from dataclasses import dataclass

from marl_ppo.options import ConfigError, choice

__all__ = ["CollectorConfig"]


@dataclass
class CollectorConfig:
    """How experience is collected (torchrl's collectors; see ``marl_ppo/collect/collectors.py``).

    Attributes:
        backend: ``direct`` (one collector in this process), ``process`` (``num_collectors``
            worker processes, torchrl's ``MultiSyncCollector``) or ``ray`` (``num_collectors``
            Ray actors, torchrl's ``RayCollector``, on the cluster at ``RAY_ADDRESS`` or a local one).
        num_collectors: workers for ``process`` and ``ray``; ``env.num_envs`` and
            ``train.frames_per_batch`` are split evenly between them (1 for ``direct``).
    """

    backend: str = "direct"
    num_collectors: int = 1

    def __post_init__(self) -> None:
        choice("train.collector.backend", self.backend, ("direct", "process", "ray"))
        if self.num_collectors < 1:
            raise ConfigError(f"train.collector.num_collectors must be >= 1, got {self.num_collectors}")
        if self.backend == "direct" and self.num_collectors != 1:
            raise ConfigError(
                f"train.collector.num_collectors must be 1 with backend 'direct', "
                f"got {self.num_collectors} (use backend 'process' or 'ray')"
            )
