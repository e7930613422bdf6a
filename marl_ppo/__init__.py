"""marl_ppo: multi-agent PPO on torchrl, one PPO loss per agent group, one optimizer step."""
from marl_ppo.aggregate import AggregatedStep, total_loss, unique_parameters
from marl_ppo.groups import GroupKeys, GroupSpec, GroupSpecError, read_group_specs
from marl_ppo.reward_table import (
    BoundRewardTable,
    RewardTable,
    RewardTableError,
    own,
    signal,
    team,
)
from marl_ppo.router import GroupRouter

__all__ = [
    "AggregatedStep",
    "GroupRouter",
    "total_loss",
    "unique_parameters",
    "GroupKeys",
    "GroupSpec",
    "GroupSpecError",
    "read_group_specs",
    "BoundRewardTable",
    "RewardTable",
    "RewardTableError",
    "own",
    "signal",
    "team",
]
