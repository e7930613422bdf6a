"""The model kinds: rows of one :class:`~marl_ppo.table.Table`, read by the builders, the options and the router.

A kind is a *trunk*: what runs on a group's observations before the actor's heads or the critic's
value layer. ``mlp`` has none (the agent MLP maps the observations to the heads' parameters or the
value directly); ``gru`` and ``lstm`` are an MLP followed by a recurrent cell
(:func:`~marl_ppo.models.recurrent.recurrent_trunk`), ``cnn`` a conv encoder of an image per agent
(:mod:`~marl_ppo.models.cnn`), ``deepsets`` permutation-invariant encoders of sets of entities and of
the agents (:mod:`~marl_ppo.models.deepsets`), ``gnn`` message passing over the agents of a group
(:mod:`~marl_ppo.models.gnn`). Adding a kind is one file with its trunk
function and one :func:`register_model_kind` line (``docs/concepts.md``, "Adding a variant").

The contract, spec in and width out (BenchMARL's ``get_model(input_spec, output_spec)`` shape):

* ``trunk`` is a function (or ``"module:function"``)
  ``(group, inputs, *, role, centralized, share_params, hidden, activation, device, **options) -> Trunk``.
  ``inputs`` is a :class:`~torchrl.data.Composite` of the group's observation entries
  (:attr:`~marl_ppo.groups.specs.GroupSpec.inputs`: full keys such as ``("agents", "observation")``,
  per-step shapes ``[n_agents, *feature_shape]`` of any rank: vectors, images, sets), ``role`` is
  ``actor`` or ``critic`` (it names the kind's own entries), ``centralized`` asks a critic for
  values that see every agent of the group, ``options`` are the kind's own (``model.options.<kind>``,
  defaults in :attr:`ModelKind.options`);
* the :class:`Trunk` it returns is a tensordict module writing ``out_key`` ``[*B, n_agents, width]``;
  one linear layer per head (or the value) reads that ``width``;
* ``recurrent``: the trunk keeps a hidden state per agent (the update replays ``seq_len``-step
  chunks, the env is primed with the state entries, ``train.compile`` is refused);
* ``bundleable``: groups built on it can share one loss call (:mod:`~marl_ppo.core.bundles`),
  which rebuilds the actor around the group's bare agent MLP (only a kind without a trunk).

>>> MODEL_KINDS.names()[:5], model_kind("gru").recurrent, model_kind("gru").options
(['mlp', 'gru', 'lstm', 'cnn', 'deepsets'], True, {'rnn_hidden': 128})
>>> is_recurrent(["cnn", "gru"]), kinds_of("mlp")
(True, ['mlp'])
>>> model_kind("gnu")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
ValueError: unknown model kind 'gnu' (did you mean 'gru' or 'gnn'?); registered: ['cnn', 'deepsets', ...]
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from marl_ppo.table import Table, resolve

__all__ = ["ModelKind", "Trunk", "MODEL_KINDS", "model_kind", "register_model_kind", "kinds_of", "is_recurrent"]


class Trunk(NamedTuple):
    """What a model kind builds: a tensordict module writing ``out_key`` ``[*B, n_agents, width]``."""

    module: Any
    out_key: Any
    width: int


@dataclass(frozen=True)
class ModelKind:
    """One model kind (see the module docstring). ``trunk`` is a function or ``"module:function"``
    (imported on first use, so that the options can list the kinds without loading torch), ``options``
    the kind's own options with their defaults, ``trunk_kwargs`` fixed arguments of its function."""

    name: str
    trunk: str | Callable[..., Trunk] | None
    recurrent: bool = False
    bundleable: bool = False
    options: Mapping[str, Any] = field(default_factory=dict)
    trunk_kwargs: Mapping[str, Any] = field(default_factory=dict)

    def build_trunk(self, group, *, options: Mapping[str, Any] | None = None, **kwargs) -> Trunk:
        """This kind's :class:`Trunk` for ``group`` on its :attr:`~marl_ppo.groups.specs.GroupSpec.inputs`,
        with ``options`` over the kind's defaults."""
        fn = resolve(self.trunk)
        trunk = fn(group, group.inputs, **self.trunk_kwargs, **kwargs, **{**self.options, **(options or {})})
        if not isinstance(trunk, Trunk):
            raise TypeError(f"model kind {self.name!r}: its trunk returned {type(trunk).__name__}, not a Trunk")
        return trunk


_RNN = "marl_ppo.models.recurrent:recurrent_trunk"
_GNN = {"topology": "full", "radius": 1.0, "position": None, "velocity": None, "layers": 1}
_CNN = {"channels": [32, 32], "kernels": [3, 3], "strides": [1, 1], "paddings": [0, 0], "channel_order": "auto"}
MODEL_KINDS: Table[ModelKind] = Table(
    "model kind",
    [
        ModelKind("mlp", trunk=None, bundleable=True),
        ModelKind("gru", _RNN, recurrent=True, options={"rnn_hidden": 128}, trunk_kwargs={"kind": "gru"}),
        ModelKind("lstm", _RNN, recurrent=True, options={"rnn_hidden": 128}, trunk_kwargs={"kind": "lstm"}),
        ModelKind("cnn", "marl_ppo.models.cnn:cnn_trunk", options=_CNN),
        ModelKind("deepsets", "marl_ppo.models.deepsets:deepsets_trunk", options={"phi": [64], "pool": "mean"}),
        ModelKind("gnn", "marl_ppo.models.gnn:gnn_trunk", options=_GNN),
    ],
)


def model_kind(name: str) -> ModelKind:
    """The registered kind ``name``; a ``ValueError`` with the closest names and every registered one for
    any other."""
    return MODEL_KINDS.lookup(name)


def kinds_of(kind: str | Sequence[str]) -> list[str]:
    """The kinds of ``model.kind``: one name, or a chain (``[cnn, gru]``: each kind's trunk reads the one
    before it, see :mod:`~marl_ppo.models.chain`)."""
    return [kind] if isinstance(kind, str) else list(kind)


def is_recurrent(kind: str | Sequence[str]) -> bool:
    """Whether a kind, or any kind of a chain, keeps a hidden state."""
    return any(model_kind(k).recurrent for k in kinds_of(kind))


def register_model_kind(kind: ModelKind) -> ModelKind:
    """Adds ``kind`` to the table (``model.kind=<kind.name>`` then builds it); returns it. A name already
    taken by another kind is refused."""
    return MODEL_KINDS.register(kind)
