"""Time limits: truncation (bootstrap from the last observation) or termination (no bootstrap).

``env.time_limit`` says what the end of an episode at ``env.max_steps`` is to GAE.
``truncate`` (the default) keeps it a truncation: ``truncated=True``, ``terminated=False``,
``done=True``, so ``MultiAgentGAE`` bootstraps from the critic's value of the last real next
observation, ``r + gamma * V(s') - V(s)``. ``terminate`` makes it a terminal state,
``r - V(s)``, as VMAS's own ``max_steps`` does (and BenchMARL with it).

Per env kind (see :func:`vmas_time_limit` and :func:`fold_truncation`):

* VMAS, ``truncate``: ``VmasEnv(max_steps=None)`` (its ``done`` and ``terminated`` are then the
  scenario's own) plus torchrl's ``StepCounter(max_steps)``, which writes a root ``truncated`` and
  ``step_count`` and sets ``done``. ``terminate``: ``VmasEnv(max_steps=max_steps)``, bit for bit
  what marl_ppo ran before (no ``truncated`` key).
* PettingZoo: MPE's ``max_cycles`` already ends episodes as truncations in torchrl's
  ``PettingZooWrapper`` (``(group, "truncated")`` and root ``truncated`` ``True``, ``terminated``
  ``False``), so ``truncate`` changes nothing; ``terminate`` adds :class:`TruncationAsTermination`.
* custom: the factory's own flags under ``truncate``; :class:`TruncationAsTermination` under
  ``terminate`` (a factory without ``truncated`` keys is left as it is).

>>> from torchrl.envs.libs.vmas import VmasEnv
>>> from torchrl.envs import TransformedEnv
>>> env = TransformedEnv(VmasEnv("navigation", num_envs=2, seed=0, n_agents=2), vmas_time_limit(3))
>>> nxt = env.rollout(3)["next"]
>>> nxt["truncated"].squeeze(-1)[0].tolist(), nxt["terminated"].squeeze(-1)[0].tolist()
([False, False, True], [False, False, False])
"""

from __future__ import annotations

from tensordict import TensorDictBase
from torchrl.envs import StepCounter, Transform

__all__ = ["vmas_time_limit", "TruncationAsTermination", "fold_truncation"]


def vmas_time_limit(max_steps: int) -> StepCounter:
    """torchrl's ``StepCounter``: ``truncated`` (and ``done``) at step ``max_steps``, ``terminated`` untouched.

    Its count restarts on every reset, partial (``_reset`` per env) or full
    (``collector.restart``, evaluation).
    """
    return StepCounter(max_steps=max_steps)


class TruncationAsTermination(Transform):
    """Treats every truncation as a termination: ``terminated |= truncated`` beside each ``truncated`` key.

    For ``env.time_limit=terminate`` on envs that report truncations themselves (PettingZoo,
    custom factories). ``truncated`` and ``done`` are left as the env wrote them; only the
    ``terminated`` that GAE and the reward table read changes.

    >>> import torch
    >>> from tensordict import TensorDict
    >>> t = TruncationAsTermination([("agent", "truncated")])
    >>> td = TensorDict({"agent": {"truncated": torch.tensor([[True], [False]]),
    ...                            "terminated": torch.tensor([[False], [False]])}}, [])
    >>> t._step(None, td)["agent", "terminated"].squeeze(-1).tolist()
    [True, False]
    """

    def __init__(self, truncated_keys: list) -> None:
        super().__init__(in_keys=[], out_keys=[])
        keys = [k if isinstance(k, tuple) else (k,) for k in truncated_keys]
        self.pairs = [(k, (*k[:-1], "terminated")) for k in keys]

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        for truncated_key, terminated_key in self.pairs:
            truncated = next_tensordict.get(truncated_key, None)
            if truncated is not None:
                next_tensordict.set(terminated_key, next_tensordict.get(terminated_key) | truncated)
        return next_tensordict

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        return tensordict


def fold_truncation(done_keys: list) -> TruncationAsTermination | None:
    """A :class:`TruncationAsTermination` for every ``truncated`` key with a ``terminated`` beside it,
    or ``None`` when the env has none (nothing to fold)."""
    keys = [k if isinstance(k, tuple) else (k,) for k in done_keys]
    truncated = [k for k in keys if k[-1] == "truncated" and (*k[:-1], "terminated") in keys]
    return TruncationAsTermination(truncated) if truncated else None
