"""A run: the one place that reads the config, and everything around training.

:mod:`~marl_ppo.run.build` turns a :class:`~marl_ppo.config.Config` into built parts,
:mod:`~marl_ppo.run.trainer` runs the loop, :mod:`~marl_ppo.run.evaluation` is the one
evaluation (train, ``marl-ppo eval`` and suites), :mod:`~marl_ppo.run.checkpoints` writes and
chooses checkpoints, :mod:`~marl_ppo.run.logger`, :mod:`~marl_ppo.run.media`,
:mod:`~marl_ppo.run.video` and :mod:`~marl_ppo.run.plots` record it,
:mod:`~marl_ppo.run.callbacks` and :mod:`~marl_ppo.run.signals` let code and signals in.

Kept light: importing :mod:`marl_ppo.run.signals` (the CLI does) loads no torch.
"""
