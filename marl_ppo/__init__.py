"""marl_ppo: multi-agent PPO on torchrl, one PPO loss per agent group, one optimizer step.

The names below are imported on first use (PEP 562), so that ``import marl_ppo.cli`` and
``marl-ppo --help`` do not pay for torch, torchrl, VMAS and PettingZoo; ``from marl_ppo import
GroupRouter`` works as usual.
"""

from __future__ import annotations

from marl_ppo.lazy import lazy_exports, names_by_module

__version__ = "0.1.0"  # the one place the version is written (pyproject.toml reads it)

# module -> the public names it defines
_EXPORTS = names_by_module(
    {
        "marl_ppo.core.aggregate": "AggregatedStep total_loss unique_parameters",
        "marl_ppo.groups.specs": "GroupKeys GroupSpec GroupSpecError read_group_specs",
        "marl_ppo.groups.reward_binding": "BoundRewardTable",
        "marl_ppo.groups.reward_table": "RewardTable",
        "marl_ppo.groups.reward_terms": "RewardTableError own signal team",
        "marl_ppo.core.router": "GroupRouter",
        # the loop by hand (a notebook): a config, its parts and state, the update, or the whole trainer
        "marl_ppo.config": "load_config",
        "marl_ppo.run.build": "build train_state",
        "marl_ppo.core.seeds": "SeedStack",
        "marl_ppo.core.state": "TrainState",
        "marl_ppo.core.update": "ppo_update",
        "marl_ppo.run.trainer": "Trainer",
    }
)

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
