"""Groups: what each agent group is (its specs and the keys it owns) and where its reward comes from.

The bottom layer of the package, under the models, env adapters and the core:
:mod:`~marl_ppo.groups.specs` reads one :class:`GroupSpec` per group from a torchrl
multi-agent env, with the :class:`GroupKeys` that name every entry a group's loss reads and
writes; :mod:`~marl_ppo.groups.reward_table` routes the env's signals to each group's training
reward and done, explicitly.
"""

from marl_ppo.groups.reward_table import BoundRewardTable, RewardTable, RewardTableError, own, signal, team
from marl_ppo.groups.specs import GroupKeys, GroupSpec, GroupSpecError, group_map, read_group_specs

__all__ = [
    "GroupKeys",
    "GroupSpec",
    "GroupSpecError",
    "group_map",
    "read_group_specs",
    "RewardTable",
    "BoundRewardTable",
    "RewardTableError",
    "own",
    "team",
    "signal",
]
