"""Players that act for a group without learning: uniform random and scripted (a frozen policy is
:func:`~marl_ppo.models.actor.seat_actor`).

Each is a tensordict module writing the group's ``(group, "action")``, so that it sits in the
collection policy beside the training groups' actors (:func:`~marl_ppo.opponents.opponent_policy`).
Nothing here holds a trainable parameter: the router never sees these groups, so their steps enter
no loss and the optimizer never holds their weights.

>>> import torch
>>> from tensordict import TensorDict
>>> from torchrl.data import Categorical
>>> from marl_ppo.groups.specs import GroupSpec
>>> spec = GroupSpec("p", ("p",), (("p", "observation"),), Categorical(3, shape=(2, 1)), 1,
...                  ("p", "reward"), action_mask_key=("p", "action_mask"))
>>> td = TensorDict({"p": TensorDict({"action_mask": torch.tensor([[[False, True, False]]] * 2)}, [2, 1])}, [2])
>>> RandomPlayer(spec)(td)["p", "action"].tolist()
[[1], [1]]
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase
from torch import nn
from torchrl.data import OneHot

from marl_ppo.groups.specs import GroupSpec
from marl_ppo.opponents.sources import OpponentSource
from marl_ppo.options import ConfigError

__all__ = [
    "RandomPlayer",
    "ScriptedPlayer",
    "RawObservation",
    "OpponentError",
    "PlayerContext",
    "random_player",
    "scripted_player",
    "run_player",
    "opponent_policy",
]


class OpponentError(RuntimeError):
    """An opponent that cannot play: an illegal action, a policy that does not fit the seat."""


def _write_choice(spec: GroupSpec, td: TensorDictBase, index: torch.Tensor) -> TensorDictBase:
    """Writes choice indices ``[*B, n_agents]`` as the group's action (one-hot where its spec is)."""
    action_spec = spec.agent_action_spec
    if isinstance(action_spec, OneHot):
        index = torch.nn.functional.one_hot(index, action_spec.shape[-1])
    td.set(spec.keys.action, index.to(action_spec.dtype))
    return td


class RandomPlayer(TensorDictModuleBase):
    """Uniform over the legal actions (the env's action mask where it gives one, else the action spec).

    Draws from the global torch RNG, as the training policy's sampling does: a run's RNG state
    (saved in its checkpoints) covers both.
    """

    def __init__(self, spec: GroupSpec) -> None:
        super().__init__()
        self.spec = spec
        self.in_keys = [spec.action_mask_key] if spec.action_mask_key is not None else []
        self.out_keys = [spec.keys.action]

    def forward(self, td: TensorDictBase) -> TensorDictBase:
        spec = self.spec
        if spec.action_mask_key is None:
            td.set(spec.keys.action, spec.agent_action_spec.rand(td.batch_size).to(td.device))
            return td
        mask = td.get(spec.action_mask_key)
        weights = mask.float() + (~mask.any(-1, keepdim=True)).float()  # not its turn (no legal move): any
        index = torch.multinomial(weights.reshape(-1, mask.shape[-1]), 1).reshape(mask.shape[:-1])
        return _write_choice(spec, td, index)


@dataclass(frozen=True)
class RawObservation:
    """How the env gave one agent's observation before it was flattened to a float vector.

    ``shape`` and ``dtype`` (a numpy dtype name) of the array; ``n_categories`` for a discrete
    observation (one integer, one-hot encoded in the flat vector).
    """

    shape: tuple[int, ...]
    dtype: str = "float32"
    n_categories: int | None = None

    def restore(self, flat: torch.Tensor) -> Any:
        """The raw observation from its flat float vector."""
        if self.n_categories is not None:
            return int(flat.argmax())
        return flat.cpu().numpy().reshape(self.shape).astype(self.dtype)


class ScriptedPlayer(TensorDictModuleBase):
    """A scripted opponent: ``act(observation, action_mask) -> action`` for one agent of one env copy.

    ``observation`` is the agent's raw observation as the env gives it (:class:`RawObservation`:
    tic-tac-toe's ``int8`` board ``[3, 3, 2]``), ``action_mask`` its legal moves as a numpy bool
    array (``None`` where the env has no mask). It is called only where the agent acts (its turn, in
    a turn-based game). An action outside the mask or the action space is an :class:`OpponentError`
    naming the opponent, the env copy and the action. Runs one Python call per acting agent and env.
    """

    def __init__(self, spec: GroupSpec, act: Callable[..., Any], name: str, raw: RawObservation, env: str) -> None:
        super().__init__()
        _check_signature(act, f"opponents.{spec.name} ({name})")
        self.spec, self.act, self.name, self.raw, self.env = spec, act, name, raw, env
        keys = [spec.observation_keys[0], spec.action_mask_key, spec.keys.mask]
        self.in_keys = [k for k in keys if k is not None]
        self.out_keys = [spec.keys.action]

    def forward(self, td: TensorDictBase) -> TensorDictBase:
        spec = self.spec
        obs = td.get(spec.observation_keys[0])
        lead = obs.shape[:-1]  # [*B, n_agents]
        obs = obs.reshape(-1, obs.shape[-1])
        mask = td.get(spec.action_mask_key).reshape(obs.shape[0], -1).cpu() if spec.action_mask_key else None
        acting = td.get(spec.keys.mask).reshape(-1).cpu() if spec.keys.mask is not None else None
        n_choices = _n_choices(spec)
        actions = []
        for i in range(obs.shape[0]):
            legal = mask[i].numpy() if mask is not None else None
            if acting is not None and not acting[i]:
                actions.append(0 if n_choices else torch.zeros(spec.agent_action_spec.shape[1:]))
                continue
            try:
                action = self.act(self.raw.restore(obs[i]), legal)
            except Exception as err:  # noqa: BLE001 -- a bot may raise anything: say whose and where
                raise OpponentError(
                    f"{self._where(i // spec.n_agents)} raised {type(err).__name__}: {err} (for agent "
                    f"{spec.agents[i % spec.n_agents]!r}; a bot written for another game, or a bug in it?)"
                ) from err
            actions.append(self._check(action, legal, n_choices, i // spec.n_agents))
        if n_choices:
            return _write_choice(spec, td, torch.tensor(actions, device=td.device).reshape(lead))
        value = torch.stack([torch.as_tensor(a) for a in actions]).reshape(*lead, *spec.agent_action_spec.shape[1:])
        td.set(spec.keys.action, value.to(device=td.device, dtype=spec.agent_action_spec.dtype))
        return td

    def _where(self, copy_index: int) -> str:
        return f"opponents.{self.spec.name} ({self.name}) in copy {copy_index} of {self.env}"

    def _check(self, action: Any, legal: np.ndarray | None, n_choices: int | None, copy_index: int) -> Any:
        where = self._where(copy_index)
        if not n_choices:
            return action
        try:
            index = int(action)
        except (TypeError, ValueError):
            raise OpponentError(f"{where} returned {action!r}; expected an action index in [0, {n_choices})") from None
        if not 0 <= index < n_choices or (legal is not None and not legal[index]):
            allowed = np.flatnonzero(legal).tolist() if legal is not None else f"[0, {n_choices})"
            raise OpponentError(
                f"{where} chose action {action!r}, which is not legal there; the legal actions were {allowed}"
            )
        return index


def _check_signature(act: Callable[..., Any], what: str) -> None:
    """A ConfigError, when the player is loaded, for a callable that cannot take ``(observation, action_mask)``."""
    try:
        inspect.signature(act).bind(None, None)
    except TypeError:
        raise ConfigError(
            f"{what}: a scripted opponent is called as act(observation, action_mask); its signature is "
            f"{inspect.signature(act)}"
        ) from None
    except ValueError:  # a builtin without a signature: it is called as it is
        return


def _n_choices(spec: GroupSpec) -> int | None:
    """The number of choices of a single discrete action, ``None`` for any other action."""
    action_spec = spec.agent_action_spec
    if isinstance(action_spec, OneHot):
        return action_spec.shape[-1]
    n = getattr(getattr(action_spec, "space", None), "n", None)
    return n if isinstance(n, int) and action_spec.dtype != torch.bool else None


def opponent_policy(policy: nn.Module, opponents: dict[str, nn.Module]) -> nn.Module:
    """``policy`` (the training groups' actors) followed by each opponent's player; ``policy`` itself without any."""
    if not opponents:
        return policy
    from tensordict.nn import TensorDictSequential

    return TensorDictSequential(policy, *opponents.values())


@dataclass(frozen=True)
class PlayerContext:
    """What a source's ``player`` (its line in :data:`~marl_ppo.opponents.sources.SOURCES`) is made from: the
    group it plays (``spec``), the key that names it in errors, the env's name (``scenario``), and what the run
    lends: ``load_callable(target)`` (a ``module:callable``'s function), ``raw_observation()`` (how the env
    gives the group's observation) and ``load_policy(source)`` (another run's policy, frozen, on this seat)."""

    key: str
    spec: GroupSpec
    scenario: str
    load_callable: Callable[[str], Callable[..., Any]]
    raw_observation: Callable[[], RawObservation]
    load_policy: Callable[[OpponentSource], nn.Module]


def random_player(source: OpponentSource, context: PlayerContext) -> RandomPlayer:
    """``random``'s player."""
    return RandomPlayer(context.spec)


def scripted_player(source: OpponentSource, context: PlayerContext) -> ScriptedPlayer:
    """A ``module:callable``'s player: the callable, on the env's raw observation."""
    act = context.load_callable(source.target)
    return ScriptedPlayer(context.spec, act, source.target, context.raw_observation(), context.scenario)


def run_player(source: OpponentSource, context: PlayerContext) -> nn.Module:
    """``checkpoint:RUN_DIR[:GROUP]``'s player: that run's policy of the group, frozen."""
    return context.load_policy(source)
