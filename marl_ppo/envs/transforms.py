"""Transforms every adapter shares: flat float observations and per-group episode returns.

>>> import torch
>>> from torchrl.envs.libs.pettingzoo import PettingZooWrapper
>>> import pettingzoo
>>> from torchrl.envs import TransformedEnv
>>> base = PettingZooWrapper(pettingzoo.make("aec", "classic/tictactoe-v3"), use_mask=True, categorical_actions=True)
>>> env = TransformedEnv(base, FlatObservation.for_env(base))
>>> env.reset()["player_1", "observation"].shape, env.observation_spec["player_1", "observation"].dtype
(torch.Size([1, 18]), torch.float32)
"""

from __future__ import annotations

import math

import torch
from tensordict import TensorDictBase, is_tensor_collection
from torchrl.data import Categorical, Composite, TensorSpec, Unbounded
from torchrl.envs import EnvBase, RewardSum, Transform, TransformedEnv

from marl_ppo.groups.specs import GroupKeys, GroupSpecError, group_map

__all__ = ["FlatObservation", "with_episode_returns", "needs_flattening"]


class FlatObservation(Transform):
    """Each group's observation as one flat ``float32`` vector per agent: ``[*B, n_agents, obs_dim]``.

    PettingZoo games often observe an array that is not a float vector: a board (``tictactoe_v3``:
    ``int8`` ``[3, 3, 2]``, nested under ``(group, "observation", "observation")`` once torchrl's
    wrapper has moved the action mask out to ``(group, "action_mask")``), a table of entities
    (Knights-Archers-Zombies: ``float64`` ``[27, 5]``) or a local grid (pursuit: ``[7, 7, 3]``).
    The policies read one flat float observation per agent, so this writes ``(group, "observation")``
    flattened; a discrete observation (``rps_v2``) becomes a one-hot vector. Images (``uint8`` with
    height, width and channels) are refused by :meth:`for_env`: PettingZoo's are full frames
    (Knights-Archers-Zombies: 512 x 512), and an env-side resize for the ``cnn`` model kind is not there yet.

    Args:
        groups: ``{group: n_categories}``, ``n_categories`` for a discrete observation, else ``None``.
    """

    def __init__(self, groups: dict[str, int | None]) -> None:
        super().__init__(in_keys=[], out_keys=[])
        self.groups = dict(groups)

    @classmethod
    def for_env(cls, env: EnvBase) -> "FlatObservation":
        """Reads each group's observation spec; raises :class:`GroupSpecError` for an image."""
        spec = env.full_observation_spec
        groups = {}
        for g in group_map(env):
            leaf = _observation_leaf(g, spec[g, "observation"])
            _refuse_images(g, leaf, spec[g].shape)
            discrete = isinstance(leaf, Categorical) and leaf.shape == spec[g].shape
            groups[g] = int(leaf.space.n) if discrete else None
        return cls(groups)

    def _flat(self, group: str, group_td: TensorDictBase) -> torch.Tensor:
        obs = group_td.get("observation")
        if is_tensor_collection(obs):
            obs = obs.get("observation")
        n_categories = self.groups[group]
        if n_categories is not None:
            return torch.nn.functional.one_hot(obs.long(), n_categories).to(torch.float32)
        return obs.reshape(*obs.shape[: group_td.batch_dims], -1).to(torch.float32)

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        flat = {g: self._flat(g, next_tensordict.get(g)) for g in self.groups}
        # a new tensordict: the batched env's own buffers keep their nested observation
        out = next_tensordict.exclude(*[(g, "observation") for g in self.groups])
        for g, obs in flat.items():
            out.set((g, "observation"), obs)
        return out

    forward = _call

    def _reset(self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase) -> TensorDictBase:
        return self._call(tensordict_reset)

    def transform_observation_spec(self, observation_spec: Composite) -> Composite:
        for g, n_categories in self.groups.items():
            group_spec = observation_spec[g]
            leaf = _observation_leaf(g, group_spec["observation"])
            batch = group_spec.shape  # [*B, n_agents]
            dim = n_categories if n_categories is not None else math.prod(leaf.shape[len(batch) :])
            group_spec["observation"] = Unbounded(shape=(*batch, dim), dtype=torch.float32, device=leaf.device)
        return observation_spec


def needs_flattening(env: EnvBase) -> bool:
    """Whether some group's observation is not already one ``float32`` vector per agent."""
    spec = env.full_observation_spec
    for g in group_map(env):
        obs = spec[g, "observation"]
        if isinstance(obs, Composite) or obs.dtype != torch.float32 or obs.ndim != spec[g].ndim + 1:
            return True
    return False


def _observation_leaf(group: str, spec: TensorSpec) -> TensorSpec:
    """The one observation tensor spec under a group (torchrl nests a Dict observation's board)."""
    if isinstance(spec, Composite):
        leaves = list(spec.keys(True, True))
        if leaves != ["observation"]:
            raise GroupSpecError(
                f"group {group!r}: observation with several entries {leaves}; marl_ppo's policies read "
                "one observation per agent (flatten or pick one in your env, e.g. with a torchrl Transform)"
            )
        return spec["observation"]
    return spec


def _refuse_images(group: str, leaf: TensorSpec, group_shape: torch.Size) -> None:
    per_agent = tuple(leaf.shape[len(group_shape) :])
    if leaf.dtype == torch.uint8 and len(per_agent) == 3:
        raise GroupSpecError(
            f"group {group!r}: observation ({group!r}, 'observation') is an image of shape {list(per_agent)} "
            f"(uint8); PettingZoo's image observations are not passed to the cnn model kind yet (they need "
            "an env-side resize). Use the env's vector observation if it has one (Knights-Archers-Zombies: "
            "obs_method='vector'), or bring your own env (env.kind=custom) with images small enough for model.kind=cnn."
        )


def with_episode_returns(env: EnvBase) -> TransformedEnv:
    """Adds a ``RewardSum`` accumulating each group's raw reward into ``(group, "episode_reward")``."""
    groups = list(group_map(env))
    reward_keys = [(g, "reward") for g in groups]
    missing = [k for k in reward_keys if k not in env.full_reward_spec.keys(True)]
    if missing:
        raise GroupSpecError(
            f"the env has no per-group reward at {missing}: marl_ppo needs ('<group>', 'reward') of shape "
            f"[*B, n_agents, 1] for every group; reward keys are {list(env.full_reward_spec.keys(True, True))}"
        )
    reset_keys = [(g, "_reset") if (g, "_reset") in env.reset_keys else "_reset" for g in groups]
    returns = RewardSum(
        in_keys=reward_keys, out_keys=[GroupKeys.for_group(g).episode_reward for g in groups], reset_keys=reset_keys
    )
    if isinstance(env, TransformedEnv):  # appended, not nested: torchrl warns on a nested one and unwraps it
        env.append_transform(returns)
        return env
    return TransformedEnv(env, returns)
