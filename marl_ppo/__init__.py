"""marl_ppo: multi-agent PPO on torchrl, one PPO loss per agent group, one optimizer step.

The names below are imported on first use (PEP 562), so that ``import marl_ppo.cli`` and
``marl-ppo --help`` do not pay for torch, torchrl, VMAS and PettingZoo; ``from marl_ppo import
GroupRouter`` works as usual.
"""

from __future__ import annotations

from marl_ppo.lazy import lazy_exports

__version__ = "0.1.0"  # the one place the version is written (pyproject.toml reads it)

# public name -> module that defines it
_EXPORTS = {
    "AggregatedStep": "marl_ppo.core.aggregate",
    "total_loss": "marl_ppo.core.aggregate",
    "unique_parameters": "marl_ppo.core.aggregate",
    "GroupKeys": "marl_ppo.groups.specs",
    "GroupSpec": "marl_ppo.groups.specs",
    "GroupSpecError": "marl_ppo.groups.specs",
    "read_group_specs": "marl_ppo.groups.specs",
    "BoundRewardTable": "marl_ppo.groups.reward_binding",
    "RewardTable": "marl_ppo.groups.reward_table",
    "RewardTableError": "marl_ppo.groups.reward_terms",
    "own": "marl_ppo.groups.reward_terms",
    "signal": "marl_ppo.groups.reward_terms",
    "team": "marl_ppo.groups.reward_terms",
    "GroupRouter": "marl_ppo.core.router",
    # the loop by hand (a notebook): a config, its parts and state, the update, or the whole trainer
    "load_config": "marl_ppo.config",
    "build": "marl_ppo.run.build",
    "train_state": "marl_ppo.run.build",
    "SeedStack": "marl_ppo.core.seeds",
    "TrainState": "marl_ppo.core.state",
    "ppo_update": "marl_ppo.core.update",
    "Trainer": "marl_ppo.run.trainer",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
