"""Small tensordict plumbing shared by the actors and critics."""

from __future__ import annotations

import weakref

import torch
from tensordict.nn import TensorDictModule
from torch import nn
from torchrl.modules import MultiAgentMLP

from marl_ppo.models.mlp import SharedAgentMLP

__all__ = ["TensorOutModule", "group_network", "stamp_network"]


class TensorOutModule(TensorDictModule):
    """A ``TensorDictModule`` for networks that return plain tensors: writes them straight in.

    tensordict 0.14 passes every module output through ``TensorDict.from_any``, which probes
    ``importlib.util.find_spec("pandas")`` on each call when pandas is not installed (about 40 µs,
    three calls per group per minibatch). Anything other than a tensor output takes the usual path.
    """

    def _write_to_tensordict(self, tensordict, tensors, tensordict_out=None, out_keys=None):
        out_keys = self.out_keys_source if out_keys is None else out_keys
        if (
            tensordict_out is not None
            or self.inplace is not True
            or len(tensors) != len(out_keys)
            or not all(type(t) is torch.Tensor or isinstance(t, nn.Parameter) for t in tensors)
        ):
            return super()._write_to_tensordict(tensordict, tensors, tensordict_out, out_keys)
        for key, tensor in zip(out_keys, tensors):
            if key != "_":
                tensordict.set(key, tensor)
        return tensordict


# The agent MLP each actor/critic built here runs, by module: kept beside the modules, not set on
# them (an actor is torchrl's ProbabilisticActor), and gone with the module.
_GROUP_NETWORKS: "weakref.WeakKeyDictionary[nn.Module, nn.Module]" = weakref.WeakKeyDictionary()


def stamp_network(module: nn.Module, net: nn.Module) -> nn.Module:
    """Records that ``module`` (an actor or critic built here) runs the agent MLP ``net``; returns ``module``."""
    _GROUP_NETWORKS[module] = net
    return module


def group_network(module: nn.Module) -> nn.Module | None:
    """The agent MLP of an actor or critic built by :func:`build_actor` / :func:`build_critic`
    around one of our MLPs; ``None`` for any other module (the router then never bundles its
    group: a bundle rebuilds the group's actor from its spec around this network)."""
    net = _GROUP_NETWORKS.get(module)
    return net if isinstance(net, (SharedAgentMLP, MultiAgentMLP)) else None
