"""Copies of a parallel PettingZoo game stepped in one loop: torchrl's ``SerialEnv`` data, faster.

Why it exists: a MaMuJoCo HalfCheetah run spent 90 % of its time collecting, about 1.2 ms an env
step, of which the game itself takes 0.17 ms. Even with the lean step
(:mod:`~marl_ppo.envs.lean_step`) most of the rest was torchrl's ``SerialEnv`` around one
``PettingZooWrapper`` per copy: a tensordict per copy per step, cloned and indexed, ``_complete_done``
and in-place updates of the shared buffers. MAgent2's battle (an engine in C) and the MPE tasks pay the
same. PettingZoo's own vector wrappers (SuperSuit) stack parallel games but give no agent masks, per
group layout or torchrl specs, so :class:`ParallelGames` steps the raw games by hand, as
:class:`~marl_ppo.envs.aec_games.AecGames` does for turn-based ones: it steps each copy's game
(``wrapper._env``), writes every copy's values into one numpy array per key and hands the batch over
as tensors once a step.

It reproduces, value for value, what ``SerialEnv`` of the adapter's wrapped copies gives with torchrl's
own step: each live agent's observation (the wrapper's dtype; flattened to ``float32`` where the copy's
``FlatObservation`` flattens it, an image kept), reward, terminated, truncated and done, a departed
agent's flags from the game's dicts (``True`` where absent), ``(group, "mask")`` ``True`` for the
agents still in the game, the action of every agent handed over (departed ones too), the root
flags by the wrapper's ``done_on_any`` (any agent's, or every agent's), and the game's global state
at the root ``state`` where the wrapper returns it (MaMuJoCo's ``env.state=true``).
``tests/envs/test_parallel_games.py`` compares whole rollouts with the torchrl path over many episode
ends, agents that leave included. What it cannot reproduce, it declines
(:func:`parallel_games_refusal` says why, and the adapter keeps ``SerialEnv``): a turn-based game, a
game with action masks or infos, an observation with several entries or a discrete one, and
transforms other than ``FlatObservation`` (the image options' resize, grayscale and frame stack).

>>> from marl_ppo.envs import EnvConfig
>>> from marl_ppo.envs.pettingzoo import make_pettingzoo
>>> cfg = EnvConfig(kind="pettingzoo", scenario="simple_spread_v3", kwargs={"N": 2})
>>> env = make_pettingzoo(cfg, seed=0, num_envs=3)
>>> type(env).__name__, env.reset()["agent", "observation"].shape
('ParallelGames', torch.Size([3, 2, 12]))
>>> env.close()
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase
from torchrl.data import Bounded, Categorical, Unbounded
from torchrl.envs import EnvBase, TransformedEnv

from marl_ppo.envs.game_copies import DONE_KEYS, GameCopies, flat_observation, wrapper_of
from marl_ppo.envs.lean_step import reward_value

__all__ = ["ParallelGames", "parallel_games_refusal"]


def parallel_games_refusal(copy: EnvBase) -> str | None:
    """Why :class:`ParallelGames` cannot stand in for copies like ``copy`` (one wrapped game), or ``None``."""
    wrapper = wrapper_of(copy)
    if not hasattr(wrapper, "lean_plan") or not getattr(wrapper, "parallel", False):
        return "not a parallel PettingZoo game in the adapter's wrapper"
    if isinstance(copy, TransformedEnv):
        flat = flat_observation(copy)
        if flat is None:
            return f"transforms other than one FlatObservation: {copy.transform}"
        discrete = [g for g, n in flat.groups.items() if n is not None]
        if discrete:
            return f"discrete observations (groups {discrete})"
    if wrapper.lean_plan() is None:  # the lean step's own conditions: the data is plain arrays
        return "no lean step for this game (action masks, infos, nested observations, or lean off)"
    for group in wrapper.group_map:
        spec = wrapper.full_action_spec[group, "action"]
        if not isinstance(spec, (Categorical, Bounded, Unbounded)):
            return f"group {group!r} acts through a {type(spec).__name__}"
    return None


class _Layout:
    """One group's agents, its observation as the wrapper encodes it, and whether the copy flattens it."""

    def __init__(self, name: str, agents: list[str], wrapper: EnvBase, flattened: bool) -> None:
        self.name, self.agents = name, agents
        leaf = wrapper.full_observation_spec[name, "observation"]
        self.obs_dtype = torch.empty(0, dtype=leaf.dtype).numpy().dtype  # what the wrapper's encode casts to
        # the reward spec's dtype: a game's int, numpy or float rewards are cast to it as they are written
        self.reward_dtype = torch.empty(0, dtype=wrapper.full_reward_spec[name, "reward"].dtype).numpy().dtype
        self.per_agent = tuple(leaf.shape[1:])
        self.flattened = flattened

    def arrays(self, n: int, step: bool) -> dict[str, np.ndarray]:
        a = len(self.agents)
        out = {"observation": np.zeros((n, a, *self.per_agent), self.obs_dtype), "mask": np.zeros((n, a), bool)}
        for key in DONE_KEYS:
            out[key] = np.zeros((n, a, 1), bool)
        if step:
            out["reward"] = np.zeros((n, a, 1), self.reward_dtype)
        return out

    def tensors(self, out: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
        data = {k: torch.from_numpy(v) for k, v in out.items()}
        if self.flattened:  # FlatObservation's: per agent one float32 vector, from the wrapper's dtype
            obs = data["observation"]
            data["observation"] = obs.reshape(*obs.shape[:2], -1).to(torch.float32)
        return data


class _WholeCopies:
    """One step's values of the copies whose every agent is still in the game, written for all of them at once.

    Why: writing each copy's few agents into the batch arrays cost MaMuJoCo more than a tenth of its
    game's step (a ``np.stack`` and five small arrays per copy); gathered as lists, each key is one
    conversion a step. A copy with an agent gone takes :meth:`ParallelGames._write`, which handles
    the departed agents' flags; both write the same values.
    """

    def __init__(self, layouts: list[_Layout]) -> None:
        self.layouts = layouts
        self.names = {a for grp in layouts for a in grp.agents}
        self.rows: list[int] = []
        self.values: list[tuple[list, list, list, list]] = [([], [], [], []) for _ in layouts]

    def take(self, i: int, game: Any, step: tuple) -> bool:
        """Gather copy ``i``'s values if all its agents are live and observed; ``False`` (nothing taken) if not."""
        observations, rewards, terminations, truncations, _ = step
        live = game.agents  # a property through each wrapper: read once
        if len(live) != len(self.names) or not self.names.issubset(live) or not self.names.issubset(observations):
            return False
        self.rows.append(i)
        for grp, (obs, rew, term, trunc) in zip(self.layouts, self.values):
            for a in grp.agents:
                obs.append(observations[a])
                rew.append(reward_value(rewards[a]))
                term.append(terminations[a])
                trunc.append(truncations[a])
        return True

    def write(self, arrays: list[dict[str, np.ndarray]]) -> None:
        if not self.rows:
            return
        rows, k = np.asarray(self.rows), len(self.rows)
        for grp, out, (obs, rew, term, trunc) in zip(self.layouts, arrays, self.values):
            shape = (k, len(grp.agents))
            out["mask"][rows] = True
            out["observation"][rows] = np.stack(obs).reshape(*shape, *out["observation"].shape[2:])
            out["reward"][rows] = np.asarray(rew, grp.reward_dtype).reshape(*shape, 1)
            terminated = np.asarray(term, bool).reshape(*shape, 1)
            truncated = np.asarray(trunc, bool).reshape(*shape, 1)
            out["terminated"][rows], out["truncated"][rows] = terminated, truncated
            out["done"][rows] = terminated | truncated


class ParallelGames(GameCopies):
    """``copies`` (each one wrapped parallel game from the adapter's factory) as one env of batch ``[len(copies)]``.

    The specs, group map and keys are those of ``SerialEnv(copies)``; only the raw games are stepped.
    """

    def __init__(self, copies: Sequence[EnvBase]) -> None:
        super().__init__(copies)
        first = copies[0]
        wrapper = wrapper_of(first)
        flat = flat_observation(first) if isinstance(first, TransformedEnv) else None
        flattened = set(flat.groups) if flat is not None else set()
        self._layouts = [_Layout(g, agents, wrapper, g in flattened) for g, agents in self.group_map.items()]
        self._any = bool(wrapper.done_on_any)  # the root flags: any agent's, or every agent's
        state = self.full_observation_spec.get("state", None)  # the wrapper's return_state
        self._state = (
            None if state is None else (tuple(state.shape[1:]), torch.empty(0, dtype=state.dtype).numpy().dtype)
        )

    def _states(self, rows) -> dict[str, np.ndarray]:
        """The root ``state`` of the copies in ``rows`` (zero elsewhere), as the wrapper encodes it; ``{}`` without."""
        if self._state is None:
            return {}
        shape, dtype = self._state
        out = np.zeros((len(self.games), *shape), dtype)
        for i in rows:
            out[i] = np.asarray(self.games[i].state()).reshape(shape)
        return {"state": out}

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs: Any) -> TensorDictBase:
        n = len(self.games)
        arrays = [grp.arrays(n, step=False) for grp in self._layouts]
        rows = self._rows_to_reset(tensordict)
        for i in rows:
            game = self.games[i]
            observations, _ = game.reset(**kwargs)
            live = set(game.agents)
            for grp, out in zip(self._layouts, arrays):
                out["observation"][i] = np.stack([observations[a] for a in grp.agents]).reshape(
                    out["observation"][i].shape
                )
                out["mask"][i] = [a in live for a in grp.agents]
        # rows not reset stay zero: EnvBase.reset keeps the input's values there (_update_during_reset)
        root = {key: np.zeros((n, 1), bool) for key in DONE_KEYS}
        return self._out(arrays, {**root, **self._states(rows)})

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        n = len(self.games)
        actions = [
            self.full_action_spec[grp.name, "action"].to_numpy(tensordict.get((grp.name, "action")))
            for grp in self._layouts
        ]
        arrays = [grp.arrays(n, step=True) for grp in self._layouts]
        whole = _WholeCopies(self._layouts)
        for i, game in enumerate(self.games):
            # every agent of the group map acts, departed ones too, in the wrapper's order
            step = game.step(
                {a: act[i, j] for grp, act in zip(self._layouts, actions) for j, a in enumerate(grp.agents)}
            )
            if not whole.take(i, game, step):
                self._write(i, game, step, arrays)
        whole.write(arrays)
        flags = {key: np.concatenate([out[key].reshape(n, -1) for out in arrays], axis=1) for key in DONE_KEYS}
        reduce = np.any if self._any else np.all
        root = {key: reduce(flag, axis=1, keepdims=True) for key, flag in flags.items()}
        return self._out(arrays, {**root, **self._states(range(n))})

    def _write(self, i: int, game: Any, step: tuple, arrays: list[dict[str, np.ndarray]]) -> None:
        observations, rewards, terminations, truncations, _ = step
        live = set(game.agents)
        for grp, out in zip(self._layouts, arrays):
            agents = grp.agents
            out["mask"][i] = [a in live for a in agents]
            if all(a in observations for a in agents):
                out["observation"][i] = np.stack([observations[a] for a in agents]).reshape(out["observation"][i].shape)
                out["reward"][i, :, 0] = [reward_value(rewards[a]) for a in agents]
                terminated = np.array([bool(terminations[a]) for a in agents])
                truncated = np.array([bool(truncations[a]) for a in agents])
            else:  # some agents have left: theirs are the game's flags (True where absent), no observation
                for j, a in enumerate(agents):
                    if a in observations:
                        out["observation"][i, j] = np.asarray(observations[a]).reshape(grp.per_agent)
                        out["reward"][i, j, 0] = reward_value(rewards[a])
                    elif a in live:  # torchrl's own check
                        raise ValueError(f"Dead agent {a} not found in step observation but still available in {live}")
                terminated = np.array([bool(terminations.get(a, True)) for a in agents])
                truncated = np.array([bool(truncations.get(a, True)) for a in agents])
            out["terminated"][i, :, 0] = terminated
            out["truncated"][i, :, 0] = truncated
            out["done"][i, :, 0] = terminated | truncated

    def _out(self, arrays: list[dict[str, np.ndarray]], root: dict[str, np.ndarray]) -> TensorDictBase:
        groups = [(grp.name, len(grp.agents), grp.tensors(out)) for grp, out in zip(self._layouts, arrays)]
        return self._batch(groups, root)
