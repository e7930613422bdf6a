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

__all__ = ["FlatObservation", "with_episode_returns", "needs_flattening", "is_image"]


class FlatObservation(Transform):
    """Each group's observation as one flat ``float32`` vector per agent: ``[*B, n_agents, obs_dim]``.

    PettingZoo games often observe an array that is not a float vector: a board (``tictactoe_v3``:
    ``int8`` ``[3, 3, 2]``, nested under ``(group, "observation", "observation")`` once torchrl's
    wrapper has moved the action mask out to ``(group, "action_mask")``), a table of entities
    (Knights-Archers-Zombies: ``float64`` ``[27, 5]``) or a local grid (pursuit: ``[7, 7, 3]``).
    The policies read one flat float observation per agent, so this writes ``(group, "observation")``
    flattened; a discrete observation (``rps_v2``) becomes a one-hot vector. An image (three sides per
    agent: ``uint8`` by default, every such array with ``env.image.observation=image``) is kept as it
    is, out of its nesting, for the ``cnn`` model kind (:mod:`~marl_ppo.envs.images` resizes it).

    Args:
        groups: ``{group: n_categories}``, ``n_categories`` for a discrete observation, else ``None``.
        images: the groups whose image observation is kept (only taken out of its nesting).
    """

    def __init__(self, groups: dict[str, int | None], images: tuple[str, ...] = ()) -> None:
        super().__init__(in_keys=[], out_keys=[])
        self.groups = dict(groups)
        self.images = tuple(images)

    @classmethod
    def for_env(cls, env: EnvBase, images: str = "auto") -> "FlatObservation":
        """Reads each group's observation spec; ``images``: ``env.image.observation`` (auto, image, flat)."""
        spec = env.full_observation_spec
        groups, kept = {}, []
        for g in group_map(env):
            leaf = _observation_leaf(g, spec[g, "observation"])
            if is_image(leaf, spec[g].shape, images):
                kept.append(g)
                continue
            discrete = isinstance(leaf, Categorical) and leaf.shape == spec[g].shape
            groups[g] = int(leaf.space.n) if discrete else None
        return cls(groups, tuple(kept))

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
        flat.update({g: _unnested(next_tensordict.get((g, "observation"))) for g in self.images})
        # a new tensordict: the batched env's own buffers keep their nested observation
        out = next_tensordict.exclude(*[(g, "observation") for g in flat])
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
        for g in self.images:
            observation_spec[g]["observation"] = _observation_leaf(g, observation_spec[g]["observation"]).clone()
        return observation_spec


def needs_flattening(env: EnvBase, images: str = "auto") -> bool:
    """Whether some group's observation is neither one ``float32`` vector per agent nor a kept image at its key."""
    spec = env.full_observation_spec
    for g in group_map(env):
        obs = spec[g, "observation"]
        if isinstance(obs, Composite):
            return True
        if is_image(obs, spec[g].shape, images):
            continue
        if obs.dtype != torch.float32 or obs.ndim != spec[g].ndim + 1:
            return True
    return False


def is_image(leaf: TensorSpec, group_shape: torch.Size, images: str = "auto") -> bool:
    """Whether an observation of spec ``leaf`` is kept as an image: three sides per agent, and ``uint8``
    (``images="auto"``) or any dtype (``"image"``); never with ``"flat"``."""
    three_sided = leaf.ndim - len(group_shape) == 3
    return three_sided and (images == "image" or (images == "auto" and leaf.dtype == torch.uint8))


def _unnested(obs: torch.Tensor | TensorDictBase) -> torch.Tensor:
    return obs.get("observation") if is_tensor_collection(obs) else obs


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
