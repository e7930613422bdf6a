"""Custom envs for the custom-factory tests: real torchrl ``EnvBase`` subclasses, tiny and fast.

``DepotEnv`` has two groups: ``crew`` (2 agents, composite action ``{move: box(2), pick:
categorical(3)}``) and ``scout`` (1 agent, one plain categorical action). Each crew agent is paid
for moving toward its goal and picking the shelf that matches its parcel; the scout is paid for
naming the crew's most common parcel. Episodes end at ``max_steps`` (root ``done``).

The factories below differ only in their signatures (what the trainer passes them), and the
bad ones in what is wrong with them (each has a test asserting on its error message).
"""

from __future__ import annotations

import torch
from tensordict import TensorDict, TensorDictBase
from torchrl.data import Bounded, Categorical, Composite, Unbounded
from torchrl.envs import EnvBase

CALLS: list[dict] = []  # what each factory was called with, for the signature tests


class DepotEnv(EnvBase):
    """Groups ``crew`` (composite action) and ``scout`` (plain categorical); root done at ``max_steps``."""

    batch_locked = True

    def __init__(
        self, num_envs: int = 4, max_steps: int = 8, n_types: int = 3, seed: int = 0, device: str = "cpu"
    ) -> None:
        super().__init__(batch_size=torch.Size([num_envs]), device=device)
        self.n_types, self.max_steps = n_types, max_steps
        self.group_map = {"crew": ["crew_0", "crew_1"], "scout": ["scout_0"]}
        B = num_envs
        self.observation_spec = Composite(
            crew=Composite(observation=Unbounded((B, 2, 2 + n_types)), shape=(B, 2)),
            scout=Composite(observation=Unbounded((B, 1, 2 * n_types)), shape=(B, 1)),
            shape=(B,),
        )
        self.action_spec = Composite(
            crew=Composite(
                action=Composite(
                    move=Bounded(-1.0, 1.0, shape=(B, 2, 2)), pick=Categorical(n_types, shape=(B, 2)), shape=(B, 2)
                ),
                shape=(B, 2),
            ),
            scout=Composite(action=Categorical(n_types, shape=(B, 1)), shape=(B, 1)),
            shape=(B,),
        )
        self.reward_spec = Composite(
            crew=Composite(reward=Unbounded((B, 2, 1)), shape=(B, 2)),
            scout=Composite(reward=Unbounded((B, 1, 1)), shape=(B, 1)),
            shape=(B,),
        )
        self.done_spec = Composite(
            done=Categorical(2, (B, 1), dtype=torch.bool),
            terminated=Categorical(2, (B, 1), dtype=torch.bool),
            shape=(B,),
        )
        self._rng = torch.Generator().manual_seed(seed)
        self._pos = torch.zeros(B, 2, 2)
        self._goal = torch.zeros(B, 2, 2)
        self._parcel = torch.zeros(B, 2, dtype=torch.long)
        self._t = torch.zeros(B, 1)

    def _observe(self) -> dict[str, TensorDict]:
        B = self.batch_size[0]
        one_hot = torch.nn.functional.one_hot(self._parcel, self.n_types).float()
        crew = TensorDict({"observation": torch.cat([self._goal - self._pos, one_hot], -1)}, (B, 2))
        scout = TensorDict({"observation": one_hot.reshape(B, 1, -1)}, (B, 1))
        return {"crew": crew, "scout": scout}

    def _reset(self, tensordict: TensorDictBase | None = None) -> TensorDictBase:
        B = self.batch_size[0]
        reset = torch.ones(B, dtype=torch.bool)
        if tensordict is not None and "_reset" in tensordict.keys():
            reset = tensordict.get("_reset").view(B)
        r = reset.view(B, 1, 1)
        self._pos = torch.where(r, torch.rand(B, 2, 2, generator=self._rng) * 2 - 1, self._pos)
        self._goal = torch.where(r, torch.rand(B, 2, 2, generator=self._rng) * 2 - 1, self._goal)
        self._parcel = torch.where(
            reset.view(B, 1), torch.randint(self.n_types, (B, 2), generator=self._rng), self._parcel
        )
        self._t = torch.where(reset.view(B, 1), torch.zeros_like(self._t), self._t)
        done = torch.zeros(B, 1, dtype=torch.bool)
        return TensorDict({**self._observe(), "done": done, "terminated": done.clone()}, self.batch_size)

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        action = tensordict.get(("crew", "action"))
        before = (self._goal - self._pos).norm(dim=-1)
        self._pos = (self._pos + 0.2 * action.get("move")).clamp(-1.5, 1.5)
        crew_reward = (
            before - (self._goal - self._pos).norm(dim=-1) + 0.5 * (action.get("pick") == self._parcel).float()
        )
        scout_right = (tensordict.get(("scout", "action")) == self._parcel[:, :1]).float()
        self._parcel = torch.randint(self.n_types, self._parcel.shape, generator=self._rng)
        self._t = self._t + 1
        done = self._t >= self.max_steps
        obs = self._observe()
        obs["crew"].set("reward", crew_reward.unsqueeze(-1))
        obs["scout"].set("reward", scout_right.unsqueeze(-1))
        return TensorDict({**obs, "done": done, "terminated": done.clone()}, self.batch_size)

    def _set_seed(self, seed: int | None) -> None:
        self._rng.manual_seed(0 if seed is None else seed)


def make_depot(num_envs: int, seed: int, device: str, max_steps: int, n_types: int = 3) -> DepotEnv:
    """Takes every argument the trainer can pass."""
    CALLS.append(
        {
            "factory": "make_depot",
            "num_envs": num_envs,
            "seed": seed,
            "device": device,
            "max_steps": max_steps,
            "n_types": n_types,
        }
    )
    return DepotEnv(num_envs=num_envs, max_steps=max_steps, n_types=n_types, seed=seed, device=device)


def make_depot_fixed(n_types: int = 3, **options) -> DepotEnv:
    """Takes none of them (a ``**options`` catch-all gets none either): 3 envs, 6 steps, its own seed."""
    CALLS.append({"factory": "make_depot_fixed", "n_types": n_types, **options})
    return DepotEnv(num_envs=3, max_steps=6, n_types=n_types, seed=123)


def not_an_env(num_envs: int) -> dict:
    """Returns a dict of envs instead of an env."""
    return {"crew": DepotEnv(num_envs=num_envs)}


class _NoGroups(DepotEnv):
    def __init__(self) -> None:
        super().__init__(num_envs=2)
        del self.group_map


def no_groups() -> EnvBase:
    """An EnvBase without a group_map."""
    return _NoGroups()


def unreadable_specs() -> EnvBase:
    """A group_map naming a group that has no observation."""
    env = DepotEnv(num_envs=2)
    env.group_map = {**env.group_map, "ghost": ["ghost_0"]}
    return env


def image_observations() -> EnvBase:
    """A group whose observation is a [3, 8, 8] picture per agent."""
    env = DepotEnv(num_envs=2)
    spec = env.observation_spec.clone()
    spec["scout", "observation"] = Unbounded((2, 1, 3, 8, 8))
    env.observation_spec = spec
    return env


class ImageDepot(DepotEnv):
    """The depot game with the scout seeing a picture: ``uint8`` ``[8, 8, 3]`` (height, width, channels),
    noise everywhere and a bright 4 x 4 patch, in a random corner, in the channel of crew_0's parcel."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        B, spec = self.batch_size[0], self.observation_spec.clone()
        spec["scout", "observation"] = Bounded(0, 255, shape=(B, 1, 8, 8, 3), dtype=torch.uint8)
        self.observation_spec = spec

    def _observe(self) -> dict[str, TensorDict]:
        out = super()._observe()
        B = self.batch_size[0]
        image = torch.randint(0, 60, (B, 8, 8, 3), generator=self._rng, dtype=torch.uint8)
        corner = torch.randint(0, 2, (B, 2), generator=self._rng) * 4
        for b in range(B):
            r, c = corner[b].tolist()
            image[b, r : r + 4, c : c + 4, self._parcel[b, 0]] = 220
        out["scout"].set("observation", image.unsqueeze(1))
        return out


def make_image_depot(num_envs: int, seed: int, device: str, max_steps: int) -> ImageDepot:
    return ImageDepot(num_envs=num_envs, max_steps=max_steps, seed=seed, device=device)
