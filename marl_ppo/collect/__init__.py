"""Collection: torchrl's collectors behind one batch layout, and the lean VMAS collector.

:mod:`~marl_ppo.collect.collectors` picks a backend from plain arguments and env factories (never the
run's config); :mod:`~marl_ppo.collect.lean_vmas` yields torchrl's batches for plain VMAS runs
without torchrl's per-step overhead.
"""
