"""Small tensordict plumbing shared by the actors and critics."""

from __future__ import annotations

import torch
from tensordict.nn import TensorDictModule, TensorDictModuleBase
from torch import nn
from torchrl.modules import MultiAgentMLP

from marl_ppo.models.mlp import SharedAgentMLP

__all__ = ["TensorOutModule", "Networks", "share_networks"]


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


class Networks:
    """Which agent MLP each actor or critic built here runs: an explicit table, owned by the router.

    A bundle rebuilds a group's actor around its bare network, a seat plays another group's network,
    a pool snapshots it: each asks the table of the router that trains it (``router.networks``),
    instead of a process-wide registry or an attribute set on a torchrl module. The builders record
    into the table they are given (:func:`~marl_ppo.models.build_models` makes one per router).

    >>> net = SharedAgentMLP(4, 2, 3, centralized=False, hidden=(8,), activation_class=nn.Tanh)
    >>> module = TensorOutModule(net, in_keys=["obs"], out_keys=["out"])
    >>> table = Networks()
    >>> table.record(module, net) is module, table.of(module) is net, Networks().of(module)
    (True, True, None)
    """

    def __init__(self) -> None:
        self._nets: dict[int, tuple[nn.Module, nn.Module]] = {}  # id(module) -> (module, net): the module kept

    def record(self, module: nn.Module, net: nn.Module) -> nn.Module:
        """Records that ``module`` runs the agent MLP ``net``; returns ``module``."""
        self._nets[id(module)] = (module, net)
        return module

    def of(self, module: nn.Module) -> nn.Module | None:
        """The agent MLP ``module`` runs, when it is one of ours built here; ``None`` for any other module
        (its group is then never bundled, nor played in another seat)."""
        entry = self._nets.get(id(module))
        net = entry[1] if entry is not None and entry[0] is module else None
        return net if isinstance(net, (SharedAgentMLP, MultiAgentMLP)) else None


def share_networks(module: nn.Module, source: nn.Module) -> nn.Module:
    """``module`` running ``source``'s networks: a group's actor or critic, built on its own keys, that
    trains and plays with the parameters of another group's module of the same architecture (self-play).

    Tensordict modules carry the keys and are kept; every plain torch network under them that holds
    parameters or buffers (an MLP, a conv stack, a GRU cell, a graph layer) is replaced by the one at
    the same place in ``source``. Written here because torch has no "share these submodules" call
    (``tie_weights`` ties one tensor at a time); works for any model kind or chain, recurrent or not.
    Returns ``module``; a ValueError when the two differ in structure, or when a parameter or buffer
    is left unshared.

    >>> a = TensorOutModule(nn.Sequential(nn.Linear(3, 4), nn.Tanh()), in_keys=[("x", "o")], out_keys=[("x", "a")])
    >>> b = TensorOutModule(nn.Sequential(nn.Linear(3, 4), nn.Tanh()), in_keys=[("y", "o")], out_keys=[("y", "a")])
    >>> share_networks(b, a).module is a.module, b.in_keys
    (True, [('y', 'o')])
    """
    _share(module, source, type(module).__name__)
    mine, theirs = _tensor_ids(module), _tensor_ids(source)
    if mine != theirs:
        raise ValueError(
            f"{type(module).__name__} could not share all of {type(source).__name__}'s parameters and buffers "
            f"({len(mine - theirs)} of its own left)"
        )
    return module


def _share(module: nn.Module, source: nn.Module, where: str) -> None:
    if type(module) is not type(source) or list(module._modules) != list(source._modules):
        raise ValueError(f"{where}: {type(module).__name__} and {type(source).__name__} differ in structure")
    for name, child in module._modules.items():
        theirs = source._modules[name]
        if child is None or theirs is None or child is theirs:
            continue
        if not any(isinstance(m, TensorDictModuleBase) for m in child.modules()):  # a plain network: no keys
            mine = {k: v.shape for k, v in child.state_dict().items()}
            if mine != {k: v.shape for k, v in theirs.state_dict().items()} or type(child) is not type(theirs):
                raise ValueError(f"{where}.{name}: {type(child).__name__} differs from the source's")
            if mine or _tensor_ids(child):
                module._modules[name] = theirs
            continue
        _share(child, theirs, f"{where}.{name}")


def _tensor_ids(module: nn.Module) -> set[int]:
    return {id(t) for t in (*module.parameters(), *module.buffers())}
