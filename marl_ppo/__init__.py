"""marl_ppo: multi-agent PPO on torchrl, one PPO loss per agent group, one optimizer step."""
from marl_ppo.groups import GroupKeys, GroupSpec, read_group_specs
from marl_ppo.reward_table import (
    BoundRewardTable,
    RewardTable,
    RewardTableError,
    own,
    signal,
    team,
)

__all__ = [
    "GroupKeys",
    "GroupSpec",
    "read_group_specs",
    "BoundRewardTable",
    "RewardTable",
    "RewardTableError",
    "own",
    "signal",
    "team",
]
