"""Copies of a game whose players sit in groups, stepped in one loop: the Overcooked and OpenSpiel adapters.

A :class:`SeatGames` env holds ``num_envs`` copies of one game and hands them over as one batch of
torchrl's multi-agent layout. The game's players are agents (``agent_0``, ``player_1``), each in a
group of the group map (one group per player by default, or one group of all). An adapter
(:mod:`~marl_ppo.envs.overcooked`, :mod:`~marl_ppo.envs.openspiel`) says what a player observes and
how its game resets and steps; this base writes every copy's values into one numpy array per key,
indexed ``[copy, player, ...]``, and splits them into the groups once a step:

* ``(group, "observation")`` ``[n, agents, *shape]`` (the adapter's spec);
* ``(group, "action_mask")`` ``[n, agents, n_actions]`` where the game has legal moves (all ``True``
  for a player not acting);
* ``(group, "mask")`` ``[n, agents]`` in a turn-based game: ``True`` for the player to act only;
* ``(group, "info", name)`` ``[n, agents, 1]``: per-player signals that are no input of the policy (a
  reward table row can read them, ``{key: [group, info, name]}``);
* ``(group, "reward")``, ``(group, "done" | "terminated" | "truncated")`` ``[n, agents, 1]`` and the root
  flags ``[n, 1]`` (``True`` where every player's is).

Copy ``i`` is seeded with the ``i``-th seed of torchrl's chain (``SerialEnv.set_seed``), so a run that
restarts its envs from a seed (``resume``, every checkpoint) replays them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase
from torchrl._utils import seed_generator
from torchrl.data import Categorical, Composite, TensorSpec, Unbounded
from torchrl.envs import EnvBase

import marl_ppo.options as options
from marl_ppo.options import ConfigError

__all__ = ["SeatGames", "seat_group_map", "require", "DONE_KEYS"]

DONE_KEYS = ("done", "terminated", "truncated")
_GROUP_MAPS = ("one_group_per_agent", "all_in_one_group")


def require(package: str, kind: str) -> None:
    """A one-line :class:`ConfigError` naming the extra that installs ``package`` (the extra is named as the
    kind: ``env.kind=overcooked`` -> ``marl-ppo[overcooked]``) where it is missing."""
    if not options.installed(package):
        raise ConfigError(
            f"env.kind: {kind} needs the {package!r} package, which is not installed here: "
            f"pip install 'marl-ppo[{kind}]'"
        )


def seat_group_map(agents: Sequence[str], name: str | None) -> dict[str, list[str]]:
    """The groups of ``agents``: ``one_group_per_agent`` (the default) or ``all_in_one_group`` (group ``agents``).

    >>> seat_group_map(["player_0", "player_1"], None), seat_group_map(["a", "b"], "all_in_one_group")
    ({'player_0': ['player_0'], 'player_1': ['player_1']}, {'agents': ['a', 'b']})
    """
    if name is None or name == "one_group_per_agent":
        return {a: [a] for a in agents}
    if name == "all_in_one_group":
        return {"agents": list(agents)}
    raise ConfigError(f"env.kwargs.group_map must be one of {list(_GROUP_MAPS)}, got {name!r}")


class SeatGames(EnvBase):
    """``num_envs`` copies of a game of ``agents`` (its players, in the game's order), grouped by ``group_map``.

    Subclasses give :meth:`_reset_copy` and :meth:`_step_copy`, which write copy ``i``'s values into the
    arrays of :meth:`_arrays` at row ``i``, and :meth:`_seed_copy`.

    Args:
        num_envs: the copies.
        agents: the players' names, in the game's order.
        group_map: ``{group: [agents]}`` covering every agent once.
        observation: one player's observation spec (no batch or agent dim).
        n_actions: the choices of one player's categorical action.
        action_mask: whether the game says which moves are legal (``(group, "action_mask")``).
        turns: whether one player acts at a time (``(group, "mask")``).
        infos: the names of per-player ``(group, "info", name)`` entries.
    """

    def __init__(
        self,
        num_envs: int,
        agents: Sequence[str],
        group_map: dict[str, list[str]],
        observation: TensorSpec,
        n_actions: int,
        *,
        action_mask: bool = False,
        turns: bool = False,
        infos: Sequence[str] = (),
    ) -> None:
        super().__init__(device="cpu", batch_size=[num_envs])
        self.agents = list(agents)
        self.group_map = {g: list(a) for g, a in group_map.items()}
        self.n_actions = n_actions
        self.has_action_mask, self.turns, self.infos = action_mask, turns, tuple(infos)
        self.obs_shape = tuple(observation.shape)
        self.obs_dtype = torch.empty(0, dtype=observation.dtype).numpy().dtype
        self.seeds: list[int | None] = [None] * num_envs  # each copy's last seed
        index = {a: p for p, a in enumerate(self.agents)}
        self._players = {g: np.asarray([index[a] for a in agents]) for g, agents in self.group_map.items()}
        self._make_specs(observation)

    def _make_specs(self, observation: TensorSpec) -> None:
        n = self.batch_size[0]
        obs, act, rew, done = {}, {}, {}, {}
        flag = Categorical(2, shape=(n, 1), dtype=torch.bool)
        for g, agents in self.group_map.items():
            k = len(agents)
            entries: dict[str, Any] = {"observation": observation.expand(n, k, *observation.shape).clone()}
            if self.has_action_mask:
                entries["action_mask"] = Categorical(2, shape=(n, k, self.n_actions), dtype=torch.bool)
            if self.turns:
                entries["mask"] = Categorical(2, shape=(n, k), dtype=torch.bool)
            if self.infos:
                entries["info"] = Composite({i: Unbounded(shape=(n, k, 1)) for i in self.infos}, shape=(n, k))
            obs[g] = Composite(entries, shape=(n, k))
            act[g] = Composite(action=Categorical(self.n_actions, shape=(n, k)), shape=(n, k))
            rew[g] = Composite(reward=Unbounded(shape=(n, k, 1)), shape=(n, k))
            done[g] = Composite(
                {key: Categorical(2, shape=(n, k, 1), dtype=torch.bool) for key in DONE_KEYS}, shape=(n, k)
            )
        self.full_observation_spec = Composite(obs, shape=(n,))
        self.full_action_spec = Composite(act, shape=(n,))
        self.full_reward_spec = Composite(rew, shape=(n,))
        self.full_done_spec = Composite({**done, **{key: flag.clone() for key in DONE_KEYS}}, shape=(n,))

    # -- what a subclass gives ------------------------------------------------------------------------

    def _seed_copy(self, i: int, seed: int | None) -> None:
        raise NotImplementedError

    def _reset_copy(self, i: int, out: dict[str, np.ndarray]) -> None:
        raise NotImplementedError

    def _step_copy(self, i: int, actions: np.ndarray, out: dict[str, np.ndarray]) -> None:
        """Applies ``actions`` (one per player, the game's order) to copy ``i`` and writes row ``i`` of ``out``."""
        raise NotImplementedError

    # -- seeding, reset, step ---------------------------------------------------------------------------

    def set_seed(self, seed: int | None = None, static_seed: bool = False) -> int | None:
        """Seeds copy ``i`` with the ``i``-th seed of torchrl's chain (``SerialEnv.set_seed``); returns the next."""
        for i in range(self.batch_size[0]):
            self.seeds[i] = None if seed is None else seed % 2**31  # within 31 bits: every engine takes it
            self._seed_copy(i, self.seeds[i])
            if seed is not None and not static_seed:
                seed = seed_generator(seed)
        return seed

    def _set_seed(self, seed: int | None) -> None:  # EnvBase's abstract hook; set_seed does the work
        self.set_seed(seed)

    def _arrays(self, step: bool) -> dict[str, np.ndarray]:
        n, p = self.batch_size[0], len(self.agents)
        out = {"observation": np.zeros((n, p, *self.obs_shape), self.obs_dtype)}
        if self.has_action_mask:
            out["action_mask"] = np.ones((n, p, self.n_actions), bool)
        if self.turns:
            out["mask"] = np.zeros((n, p), bool)
        for name in self.infos:
            out[name] = np.zeros((n, p, 1), np.float32)
        for key in DONE_KEYS:
            out[key] = np.zeros((n, p, 1), bool)
        if step:
            out["reward"] = np.zeros((n, p, 1), np.float32)
        return out

    def _rows_to_reset(self, tensordict: TensorDictBase | None) -> list[int]:
        """``SerialEnv``'s rule: the root ``_reset``, else any group's, else every copy."""
        n = self.batch_size[0]
        if tensordict is None:
            return list(range(n))
        if "_reset" in tensordict.keys():
            flags = [tensordict.get("_reset")]
        else:
            flags = [tensordict.get(k) for k in self.reset_keys if k in tensordict.keys(True)]
        if not flags:
            return list(range(n))
        rows = torch.zeros(n, dtype=torch.bool)
        for flag in flags:
            rows |= flag.reshape(n, -1).any(-1).cpu()
        return rows.nonzero().flatten().tolist()

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs: Any) -> TensorDictBase:
        out = self._arrays(step=False)
        for i in self._rows_to_reset(tensordict):
            self._reset_copy(i, out)
        # rows not reset stay zero: EnvBase.reset keeps the input's values there (_update_during_reset)
        return self._batch(out)

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        actions = np.zeros((self.batch_size[0], len(self.agents)), np.int64)
        for g, players in self._players.items():
            actions[:, players] = tensordict.get((g, "action")).cpu().numpy()
        out = self._arrays(step=True)
        for i in range(self.batch_size[0]):
            self._step_copy(i, actions[i], out)
        return self._batch(out)

    def _batch(self, out: dict[str, np.ndarray]) -> TensorDictBase:
        n = self.batch_size[0]
        data: dict[str, Any] = {
            key: torch.from_numpy(out[key].reshape(n, -1).all(-1, keepdims=True)) for key in DONE_KEYS
        }  # the root flag is True where every player's is (all end together in these games)
        for g, players in self._players.items():
            k = len(players)
            entries = {key: torch.from_numpy(out[key][:, players]) for key in ("observation", *DONE_KEYS)}
            for key in ("action_mask", "mask", "reward"):
                if key in out:
                    entries[key] = torch.from_numpy(out[key][:, players])
            if self.infos:
                infos = {name: torch.from_numpy(out[name][:, players]) for name in self.infos}
                entries["info"] = TensorDict(infos, batch_size=[n, k])
            data[g] = TensorDict(entries, batch_size=[n, k])
        return TensorDict(data, batch_size=[n])
