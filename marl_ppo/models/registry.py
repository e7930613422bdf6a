"""The model kinds: one registry line each, read by the builders, the options and the router.

A kind is a *trunk*: what runs on each agent's observation before the actor's heads or the
critic's value layer. ``mlp`` has none (the agent MLP maps observations to the heads' parameters
or the value directly); ``gru`` and ``lstm`` are an MLP followed by a recurrent cell
(:func:`~marl_ppo.models.recurrent.recurrent_trunk`). Adding a kind is one file with its trunk
function and one line here:

* ``trunk`` names a function ``(group, *, role, hidden, activation, rnn_hidden, share_params,
  centralized, device) -> (module, features_key)``: a tensordict module writing ``features_key``
  ``[*B, n_agents, rnn_hidden]``, which a linear layer per head (or value) then reads;
* ``recurrent``: the trunk keeps a hidden state per agent (the update replays ``seq_len``-step
  chunks, the env is primed with the state entries, ``train.compile`` is refused);
* ``bundleable``: groups built on it can share one loss call (:mod:`~marl_ppo.core.bundles`),
  which rebuilds the actor around the group's bare agent MLP.

>>> sorted(MODEL_KINDS), MODEL_KINDS["gru"].recurrent, MODEL_KINDS["mlp"].bundleable
(['gru', 'lstm', 'mlp'], True, True)
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ModelKind", "MODEL_KINDS", "model_kind"]


@dataclass(frozen=True)
class ModelKind:
    """One model kind (see the module docstring); ``trunk`` is ``"module:function"`` (imported on first
    use, so that the options can list the kinds without loading torch), ``trunk_kwargs`` its fixed arguments."""

    name: str
    trunk: str | None
    recurrent: bool
    bundleable: bool
    trunk_kwargs: dict[str, Any] = field(default_factory=dict)

    def build_trunk(self, group, **kwargs):
        """``(module, features_key)``: this kind's trunk for ``group`` (see the module docstring)."""
        module, _, name = self.trunk.partition(":")
        return getattr(importlib.import_module(module), name)(group, **self.trunk_kwargs, **kwargs)


_RNN = "marl_ppo.models.recurrent:recurrent_trunk"
MODEL_KINDS: dict[str, ModelKind] = {
    "mlp": ModelKind("mlp", trunk=None, recurrent=False, bundleable=True),
    "gru": ModelKind("gru", trunk=_RNN, recurrent=True, bundleable=False, trunk_kwargs={"kind": "gru"}),
    "lstm": ModelKind("lstm", trunk=_RNN, recurrent=True, bundleable=False, trunk_kwargs={"kind": "lstm"}),
}


def model_kind(name: str) -> ModelKind:
    """The registered kind ``name``; a ``ValueError`` listing the kinds for any other."""
    try:
        return MODEL_KINDS[name]
    except KeyError:
        raise ValueError(f"unknown model kind {name!r}; registered kinds: {sorted(MODEL_KINDS)}") from None
