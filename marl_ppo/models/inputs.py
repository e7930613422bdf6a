"""A group's observation entries as one flat vector per agent: what an MLP (and the MLP before a
recurrent cell) reads.

One entry ``[n_agents, F]`` is read as it is (no module, no copy). Several vector entries are
concatenated per agent, in the group's order, into ``(group, "observation_vector")``. An entry of
any other per-agent rank (an image, a set) is refused with the kinds that do read it.

>>> import torch
>>> from torchrl.data import Unbounded
>>> from marl_ppo.groups.specs import GroupSpec, inputs_spec
>>> keys = (("g", "pos"), ("g", "goal"))
>>> entries = inputs_spec({keys[0]: Unbounded(shape=(2, 2)), keys[1]: Unbounded(shape=(2, 3))}, 2)
>>> spec = GroupSpec("g", ("a", "b"), keys, Unbounded(shape=(2, 2)), 0, ("g", "reward"), observation_spec=entries)
>>> module, key, width = flat_inputs(spec)
>>> key, width, module.in_keys
(('g', 'observation_vector'), 5, [('g', 'pos'), ('g', 'goal')])
"""

from __future__ import annotations

import torch
from torch import nn

from marl_ppo.groups.specs import GroupSpec
from marl_ppo.models.modules import TensorOutModule
from marl_ppo.models.registry import Trunk
from marl_ppo.options import ConfigError

__all__ = ["flat_inputs", "Concat"]


class Concat(nn.Module):
    """Concatenates per-agent vectors ``[*B, n_agents, F_i]`` along the features."""

    def forward(self, *entries: torch.Tensor) -> torch.Tensor:
        return torch.cat(entries, dim=-1)


def flat_inputs(group: GroupSpec, inputs=None, *, kind: str = "mlp") -> Trunk:
    """``(module or None, key, width)``: where the group's flat per-agent vector of ``width`` features is.

    ``module`` is ``None`` when the group has one vector entry (read at its own key), else the
    concatenation of its entries. A ConfigError names an entry that is not a vector per agent.
    """
    inputs = group.inputs if inputs is None else inputs
    widths = []
    for key in group.observation_keys:
        shape = list(inputs[key].shape[1:])
        if len(shape) != 1:
            reader = {3: "model.kind=cnn (an image)", 2: "model.kind=deepsets (a set of entities)"}.get(len(shape))
            raise ConfigError(
                f"group {group.name!r}: model kind {kind!r} reads one flat vector per agent, but observation "
                f"{key} has per-agent shape {shape}; "
                + (f"use {reader}, or " if reader else "")
                + "flatten it in the env"
            )
        widths.append(shape[0])
    if len(widths) == 1:
        return Trunk(None, group.observation_keys[0], widths[0])
    out_key = (group.name, "observation_vector")
    return Trunk(
        TensorOutModule(Concat(), in_keys=list(group.observation_keys), out_keys=[out_key]), out_key, sum(widths)
    )
