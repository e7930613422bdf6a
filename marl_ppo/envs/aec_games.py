"""Copies of a turn-based PettingZoo game stepped in one loop: torchrl's ``SerialEnv`` data, faster.

Why it exists: a tic-tac-toe run spent 87 % of its time collecting, about 1 ms a move, of which the
game itself takes 45 us. The rest was torchrl's ``SerialEnv`` around one ``PettingZooWrapper`` per
copy: a ``TensorDict`` per copy per step, composite-spec lookups and ``spec.encode`` per agent,
``_complete_done``, buffers updated in place and cloned, and the ``FlatObservation`` transform per
copy. No library steps AEC games as one batch (PettingZoo's vector wrappers are for parallel
envs), so :class:`AecGames` does it by hand, as little as the data needs: it steps the raw games
(each copy's ``wrapper._env``), writes every copy's values into one numpy array per key, and hands
the batch over as tensors once a step.

It reproduces, value for value, what ``SerialEnv`` of the adapter's wrapped copies gives (the same
copies, built by the same factory, seeded by the same chain): each agent's observation flattened
to ``float32`` (a discrete one one-hot), ``(group, "action_mask")`` with the acting agent's legal
moves and every other agent's all ``True``, ``(group, "mask")`` ``True`` for the acting agent only,
each agent's reward, terminated, truncated and done, and the root flags ``True`` when every
agent's is (torchrl's AEC rule). ``tests/envs/test_aec_games.py`` compares whole collections with
the torchrl path over many episode ends. What it cannot reproduce, it declines
(:func:`aec_games_refusal` says why, and the adapter keeps ``SerialEnv``): a parallel game, a game
with infos (torchrl writes them as observation entries), a state, an action mask in the infos, an
observation with several entries, or transforms other than ``FlatObservation``.

>>> from marl_ppo.envs import EnvConfig
>>> from marl_ppo.envs.pettingzoo import make_pettingzoo
>>> env = make_pettingzoo(EnvConfig(kind="pettingzoo", scenario="tictactoe_v3", kwargs={}), seed=0, num_envs=3)
>>> type(env).__name__, env.reset()["player_1", "observation"].shape
('AecGames', torch.Size([3, 1, 18]))
>>> env.close()
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase
from torchrl._utils import seed_generator
from torchrl.data import Bounded, Categorical, Composite, OneHot, Unbounded
from torchrl.envs import EnvBase, TransformedEnv

from marl_ppo.envs.game_copies import DONE_KEYS, GameCopies, flat_observation, wrapper_of
from marl_ppo.envs.lean_step import reward_value
from marl_ppo.envs.transforms import FlatObservation

__all__ = ["AecGames", "aec_games_refusal"]


def aec_games_refusal(copy: EnvBase) -> str | None:
    """Why :class:`AecGames` cannot stand in for copies like ``copy`` (one wrapped game), or ``None``."""
    wrapper = wrapper_of(copy)
    if isinstance(copy, TransformedEnv) and flat_observation(copy) is None:
        return f"transforms other than one FlatObservation: {copy.transform}"
    if isinstance(copy, TransformedEnv) and flat_observation(copy).images:
        return f"image observations (groups {list(flat_observation(copy).images)})"
    if not hasattr(wrapper, "_env") or not hasattr(wrapper, "group_map") or getattr(wrapper, "parallel", True):
        return "not a turn-based (AEC) PettingZoo game in torchrl's PettingZooWrapper"
    if not wrapper.use_mask or wrapper.done_on_any or wrapper.return_state:
        return "a wrapper with use_mask=False, done_on_any=True or return_state=True"
    spec = wrapper.full_observation_spec
    for group in wrapper.group_map:
        if "info" in spec[group].keys():
            return f"group {group!r} has infos (torchrl writes them as observation entries)"
        obs = spec[group, "observation"]
        if isinstance(obs, Composite) and list(obs.keys(True, True)) != ["observation"]:
            return f"group {group!r} observes several entries {list(obs.keys(True, True))}"
        leaf = obs["observation"] if isinstance(obs, Composite) else obs
        if not isinstance(leaf, (Bounded, Unbounded, OneHot, Categorical)) or (
            isinstance(leaf, Categorical) and leaf.shape != spec[group].shape
        ):
            return f"group {group!r} observes a {type(leaf).__name__} {list(leaf.shape)}"
        if not isinstance(wrapper.full_action_spec[group, "action"], Categorical):
            return f"group {group!r} has no categorical action"
    game = wrapper._env  # reset by the wrapper when it was built
    for agent in game.possible_agents:
        if "action_mask" in game.infos.get(agent, {}):
            return f"agent {agent!r} gives its action mask in its infos"
    return None


class _Group:
    """One group's layout: its agents, its observation's encoding and its output arrays."""

    def __init__(self, name: str, agents: list[str], wrapper: EnvBase, flat: FlatObservation | None) -> None:
        self.name, self.agents = name, agents
        leaf = wrapper.full_observation_spec[name, "observation"]
        if isinstance(leaf, Composite):
            leaf = leaf["observation"]
        self.obs_dtype = torch.empty(0, dtype=leaf.dtype).numpy().dtype  # what the wrapper's encode casts to
        # the reward spec's dtype: a game's int, numpy or float rewards are cast to it as they are written
        self.reward_dtype = torch.empty(0, dtype=wrapper.full_reward_spec[name, "reward"].dtype).numpy().dtype
        self.categories = flat.groups[name] if flat is not None else None  # a Categorical, one-hot by FlatObservation
        per_agent = leaf.shape[1:]
        self.one_hot = isinstance(leaf, OneHot)  # the wrapper's encoding of a Discrete space
        self.obs_dim = self.categories or int(np.prod(per_agent, dtype=np.int64))
        self.flat = flat is not None
        self.per_agent = tuple(per_agent)
        self.has_action_mask = (name, "action_mask") in wrapper.full_observation_spec.keys(True)
        self.n_actions = wrapper.full_action_spec[name, "action"].space.n

    def arrays(self, n: int, step: bool) -> dict[str, np.ndarray]:
        a = len(self.agents)
        shape = (n, a, self.obs_dim) if self.flat else (n, a, *self.per_agent)
        out = {"observation": np.zeros(shape, np.float32 if self.flat else self.obs_dtype)}
        if self.has_action_mask:
            out["action_mask"] = np.ones((n, a, self.n_actions), bool)
        out["mask"] = np.zeros((n, a), bool)
        for key in ("done", "terminated", "truncated"):
            out[key] = np.zeros((n, a, 1), bool)
        if step:
            out["reward"] = np.zeros((n, a, 1), self.reward_dtype)
        return out


class AecGames(GameCopies):
    """``copies`` (each one wrapped game from the adapter's factory) as one env of batch ``[len(copies)]``.

    The specs, group map and keys are those of ``SerialEnv(copies)``; only the raw games are stepped.
    """

    def __init__(self, copies: Sequence[EnvBase]) -> None:
        super().__init__(copies)
        first = copies[0]
        self.seeds: list[int | None] = [None] * len(copies)  # each game's last seed
        flat = flat_observation(first) if isinstance(first, TransformedEnv) else None
        self._groups = [_Group(g, agents, wrapper_of(first), flat) for g, agents in self.group_map.items()]
        self._seat = {agent: (k, j) for k, grp in enumerate(self._groups) for j, agent in enumerate(grp.agents)}

    # -- seeding: SerialEnv's chain, each game seeded as the adapter's wrapper seeds it -------------

    def set_seed(self, seed: int | None = None, static_seed: bool = False) -> int | None:
        """Seeds copy ``i`` with the ``i``-th seed of torchrl's chain (``SerialEnv.set_seed``); returns the next."""
        for i, game in enumerate(self.games):
            self.seeds[i] = None if seed is None else seed % 2**31  # the adapter's wrapper: within 31 bits
            game.reset(seed=self.seeds[i])
            if seed is not None and not static_seed:
                seed = seed_generator(seed)
        return seed

    # -- reset and step ---------------------------------------------------------------------------------

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs: Any) -> TensorDictBase:
        rows = self._rows_to_reset(tensordict)
        arrays = [grp.arrays(len(self.games), step=False) for grp in self._groups]
        for i in rows:
            game = self.games[i]
            game.reset(**kwargs)
            self._write(i, game, arrays, step=False)
        # rows not reset stay zero: EnvBase.reset keeps the input's values there (_update_during_reset)
        return self._groups_batch(arrays, {key: np.zeros((len(self.games), 1), bool) for key in DONE_KEYS})

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        actions = [tensordict.get((grp.name, "action")).cpu().numpy() for grp in self._groups]
        arrays = [grp.arrays(len(self.games), step=True) for grp in self._groups]
        for i, game in enumerate(self.games):
            k, j = self._seat[game.agent_selection]
            game.step(actions[k][i, j])  # a numpy integer, as torchrl's wrapper hands it over
            self._write(i, game, arrays, step=True)
        # torchrl's AEC rule (done_on_any=False): a root flag is True where every agent's is
        n = len(self.games)
        root = {
            key: np.logical_and.reduce([a[key].reshape(n, -1).all(-1) for a in arrays])[:, None] for key in DONE_KEYS
        }
        return self._groups_batch(arrays, root)

    def _write(self, i: int, game: Any, arrays: list[dict[str, np.ndarray]], step: bool) -> None:
        acting = game.agent_selection
        for grp, out in zip(self._groups, arrays):
            for j, agent in enumerate(grp.agents):
                obs = game.observe(agent)
                if isinstance(obs, dict):
                    legal = obs.get("action_mask")
                    obs = obs["observation"]
                    if agent == acting and legal is not None and grp.has_action_mask:
                        out["action_mask"][i, j] = np.asarray(legal, dtype=bool)
                if grp.categories is not None or grp.one_hot:
                    out["observation"][i, j, int(obs)] = 1  # FlatObservation's, or the wrapper's, one-hot
                elif grp.flat:
                    out["observation"][i, j] = np.asarray(obs, dtype=grp.obs_dtype).reshape(-1)
                else:
                    out["observation"][i, j] = np.asarray(obs, dtype=grp.obs_dtype).reshape(grp.per_agent)
                out["mask"][i, j] = agent == acting
                if step:
                    terminated, truncated = game.terminations[agent], game.truncations[agent]
                    out["reward"][i, j, 0] = reward_value(game.rewards[agent])
                    out["terminated"][i, j, 0] = terminated
                    out["truncated"][i, j, 0] = truncated
                    out["done"][i, j, 0] = terminated or truncated

    def _groups_batch(self, arrays: list[dict[str, np.ndarray]], root: dict[str, np.ndarray]) -> TensorDictBase:
        return self._batch([(grp.name, len(grp.agents), out) for grp, out in zip(self._groups, arrays)], root)
