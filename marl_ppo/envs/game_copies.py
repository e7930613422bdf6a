"""What the one-loop steppers of PettingZoo game copies share: ``SerialEnv``'s specs, reset rows and batch.

:class:`~marl_ppo.envs.aec_games.AecGames` (turn-based games) and
:class:`~marl_ppo.envs.parallel_games.ParallelGames` (parallel games) stand in for torchrl's
``SerialEnv`` of the adapter's wrapped copies: they step each copy's raw game, write every copy's
values into one numpy array per key and hand the batch over as tensors once a step. This base holds
what does not depend on the game's API: the specs (the first copy's, expanded to the batch), torchrl's
seed chain over the copies, which rows a reset touches, the batch's assembly and closing the copies.

>>> from marl_ppo.envs import EnvConfig
>>> from marl_ppo.envs.pettingzoo import make_pettingzoo
>>> cfg = EnvConfig(kind="pettingzoo", scenario="simple_spread_v3", kwargs={"N": 2})
>>> env = make_pettingzoo(cfg, seed=0, num_envs=3)
>>> isinstance(env, GameCopies), env.batch_size
(True, torch.Size([3]))
>>> env.close()
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase
from torchrl.envs import Compose, EnvBase, TransformedEnv

from marl_ppo.envs.transforms import FlatObservation

__all__ = ["GameCopies", "DONE_KEYS", "wrapper_of", "flat_observation", "render_game"]

DONE_KEYS = ("done", "terminated", "truncated")
_CPU = torch.device("cpu")


def wrapper_of(copy: EnvBase) -> EnvBase:
    """The copy's torchrl ``PettingZooWrapper`` (under its transforms, if any)."""
    return copy.base_env if isinstance(copy, TransformedEnv) else copy


def flat_observation(copy: TransformedEnv) -> FlatObservation | None:
    """The copy's one transform, if it is a :class:`FlatObservation` (alone or alone in a ``Compose``)."""
    transform = copy.transform
    if isinstance(transform, Compose) and len(transform) == 1:
        transform = transform[0]
    return transform if isinstance(transform, FlatObservation) else None


def render_game(game: Any, mode: str = "rgb_array") -> Any:
    """A PettingZoo game's frame; a clear error where it draws none (built without ``render_mode="rgb_array"``)."""
    if mode != "rgb_array":
        raise ValueError(f"PettingZoo games are recorded as rgb_array frames, not {mode!r}")
    frame = game.render()
    if frame is None:
        raise ValueError(
            f"{game} drew no frame: its render_mode is {getattr(game, 'render_mode', None)!r}, not 'rgb_array' "
            "(an evaluation that records a video builds its games with env.kwargs.render_mode=rgb_array)"
        )
    return frame


class GameCopies(EnvBase):
    """``copies`` (each one wrapped game from the adapter's factory) as one env of batch ``[len(copies)]``.

    The specs, group map and keys are those of ``SerialEnv(copies)``; subclasses step the raw games
    (``self.games``: each copy's ``wrapper._env``) and write them with :meth:`_batch`.
    """

    def __init__(self, copies: Sequence[EnvBase]) -> None:
        first = copies[0]
        super().__init__(device="cpu", batch_size=[len(copies)])
        self.copies = list(copies)
        self.games = [wrapper_of(c)._env for c in self.copies]
        self.group_map = {g: list(agents) for g, agents in wrapper_of(first).group_map.items()}
        n = len(copies)
        self.full_observation_spec = first.full_observation_spec.expand(n, *first.full_observation_spec.shape).clone()
        self.full_action_spec = first.full_action_spec.expand(n, *first.full_action_spec.shape).clone()
        self.full_reward_spec = first.full_reward_spec.expand(n, *first.full_reward_spec.shape).clone()
        self.full_done_spec = first.full_done_spec.expand(n, *first.full_done_spec.shape).clone()

    @property
    def description(self) -> str:
        """How this env steps, for the run's notes."""
        name = type(self).__name__
        return f"env: {len(self.games)} copies of {self.games[0]} stepped by {name} (one loop, no SerialEnv)"

    def set_seed(self, seed: int | None = None, static_seed: bool = False) -> int | None:
        """``SerialEnv.set_seed``: each copy seeds itself (its wrapper resets its game) and passes the chain on."""
        for copy in self.copies:
            seed = copy.set_seed(seed, static_seed=static_seed)
        return seed

    def _set_seed(self, seed: int | None) -> None:  # EnvBase's abstract hook; set_seed does the work
        self.set_seed(seed)

    def _rows_to_reset(self, tensordict: TensorDictBase | None) -> list[int]:
        """SerialEnv's rule: the root ``_reset``, else any group's, else every copy."""
        if tensordict is None:
            return list(range(len(self.games)))
        if "_reset" in tensordict.keys():
            flags = [tensordict.get("_reset")]
        else:
            flags = [tensordict.get(k) for k in self.reset_keys if k in tensordict.keys(True)]
        if not flags:
            return list(range(len(self.games)))
        rows = torch.zeros(len(self.games), dtype=torch.bool)
        for flag in flags:
            rows |= flag.reshape(len(self.games), -1).any(-1).cpu()  # the games are on the CPU, the flags anywhere
        return rows.nonzero().flatten().tolist()

    def _batch(
        self, groups: Sequence[tuple[str, int, dict[str, np.ndarray | torch.Tensor]]], root: dict[str, np.ndarray]
    ) -> TensorDictBase:
        """Each ``(group, n_agents, arrays)`` and the root flags (``[n, 1]`` each) as one tensordict on ``self.device``.

        On the CPU the tensors share the arrays' memory; after ``env.to("cuda")`` (a collector on
        CUDA) the batch is moved once here, as ``SerialEnv`` moves its copies' data.
        """
        n = len(self.games)
        data: dict[str, Any] = {key: torch.from_numpy(flag) for key, flag in root.items()}
        for name, n_agents, out in groups:
            data[name] = TensorDict({k: torch.as_tensor(v) for k, v in out.items()}, batch_size=[n, n_agents])
        batch = TensorDict(data, batch_size=[n])
        return batch if self.device == _CPU else batch.to(self.device)

    def render(self, mode: str = "rgb_array", env_index: int = 0) -> Any:
        """Copy ``env_index``'s frame, drawn by its game (built with ``render_mode="rgb_array"``)."""
        return render_game(self.games[env_index], mode)

    def close(self, *, raise_if_closed: bool = True) -> None:
        for copy in self.copies:
            copy.close()
        super().close(raise_if_closed=raise_if_closed)
