"""A group's trunk from ``model.kind``: one kind, or a chain of kinds, each reading the one before it.

``model.kind: [cnn, gru]`` runs the ``cnn`` trunk on the group's observations, then the ``gru``
trunk on the CNN's output as if it were the group's one observation entry (``[n_agents, width]``),
and the heads read the last trunk's width. In a chain, ``mlp`` is an MLP trunk (``model.hidden``,
activated): ``[gnn, mlp]`` adds an MLP after the graph. Each kind takes its own options
(``model.options.<kind>``); a centralised critic's first kind is the one that sees the whole group.

>>> import torch
>>> from torchrl.data import Unbounded
>>> from marl_ppo.groups.specs import GroupSpec, inputs_spec
>>> key = ("g", "observation")
>>> group = GroupSpec("g", ("a", "b"), (key,), Unbounded(shape=(2, 2)), 0, ("g", "reward"),
...                   observation_spec=inputs_spec({key: Unbounded(shape=(2, 6))}, 2))
>>> trunk = trunk_of(group, ["gnn", "mlp"], role="actor", centralized=False, share_params=True, hidden=[8],
...                  activation="tanh", device=None, options={})
>>> trunk.out_key, trunk.width, [m.out_keys[0] for m in trunk.module.module]
(('g', 'actor_mlp'), 8, [('g', 'actor_gnn'), ('g', 'actor_mlp')])
>>> trunk_of(group, "mlp", role="actor", centralized=False, share_params=True, hidden=[8],
...          activation="tanh", device=None, options={}) is None
True
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from tensordict.nn import TensorDictSequential
from torch import nn
from torchrl.data import Unbounded

from marl_ppo.groups.specs import GroupSpec, inputs_spec
from marl_ppo.models.inputs import flat_inputs
from marl_ppo.models.mlp import ACTIVATIONS, agent_mlp
from marl_ppo.models.modules import TensorOutModule
from marl_ppo.models.registry import Trunk, kinds_of, model_kind

__all__ = ["trunk_of", "mlp_trunk"]


def mlp_trunk(group: GroupSpec, inputs, *, role, centralized, share_params, hidden, activation, device) -> Trunk:
    """``mlp`` inside a chain: an MLP of ``hidden`` over each agent's flat input, activated."""
    concat, key, width = flat_inputs(group, inputs)
    net = agent_mlp(
        group, hidden[-1], centralized=centralized, share_params=share_params,
        hidden=hidden[:-1], activation=activation, device=device, n_inputs=width,
    )  # fmt: skip
    out_key = (group.name, f"{role}_mlp")
    module = TensorOutModule(nn.Sequential(net, ACTIVATIONS[activation]()), in_keys=[key], out_keys=[out_key])
    return Trunk(module if concat is None else TensorDictSequential(concat, module), out_key, hidden[-1])


def trunk_of(
    group: GroupSpec,
    kind: str | Sequence[str],
    *,
    role: str,
    centralized: bool,
    share_params: bool,
    hidden: Sequence[int],
    activation: str,
    device,
    options: Mapping[str, Mapping],
) -> Trunk | None:
    """The trunk of ``kind`` (one kind or a chain) for ``group``; ``None`` for a plain ``mlp`` (its heads'
    MLP reads the observations). ``options``: each kind's own, by kind."""
    kinds = kinds_of(kind)
    if kinds == ["mlp"]:
        return None
    common = dict(role=role, share_params=share_params, hidden=hidden, activation=activation, device=device)
    spec, modules, trunk = group, [], None
    for i, k in enumerate(kinds):
        first = {"centralized": centralized and i == 0}
        if k == "mlp":
            trunk = mlp_trunk(spec, spec.inputs, **first, **common)
        else:
            trunk = model_kind(k).build_trunk(spec, options=options.get(k), **first, **common)
        modules.append(trunk.module)
        n = group.n_agents  # the next kind reads this one's output as the group's one observation entry
        read = {trunk.out_key: Unbounded(shape=(n, trunk.width))}
        spec = dataclasses.replace(
            group,
            observation_keys=(trunk.out_key,),
            observation_shape=(n, trunk.width),
            observation_spec=inputs_spec(read, n),
        )
    if len(modules) == 1:
        return trunk
    return Trunk(TensorDictSequential(*modules), trunk.out_key, trunk.width)
