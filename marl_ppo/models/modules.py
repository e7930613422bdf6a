"""Small tensordict plumbing shared by the actors and critics."""

from __future__ import annotations

import torch
from tensordict.nn import TensorDictModule, TensorDictModuleBase
from torch import nn
from torchrl.modules import MultiAgentMLP

from marl_ppo.models.mlp import SharedAgentMLP

__all__ = ["TensorOutModule", "Networks", "plain_networks", "share_networks"]


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


def plain_networks(module: nn.Module) -> dict[str, nn.Module]:
    """The plain torch networks under ``module``, by path: the outermost modules that hold parameters or
    buffers and no tensordict module (an MLP, a conv stack, a GRU cell, a graph layer). The tensordict
    modules above them carry the keys.

    >>> net = nn.Sequential(nn.Linear(3, 4), nn.Tanh())
    >>> list(plain_networks(TensorOutModule(net, in_keys=["o"], out_keys=["a"])))
    ['module']
    """
    found: dict[str, nn.Module] = {}
    for name, child in module.named_children():
        if not any(isinstance(m, TensorDictModuleBase) for m in child.modules()):
            if child.state_dict():
                found[name] = child
        else:
            found.update({f"{name}.{path}": net for path, net in plain_networks(child).items()})
    return found


def share_networks(module: nn.Module, source: nn.Module) -> nn.Module:
    """``module`` running ``source``'s networks: a group's actor or critic, built on its own keys, that
    trains and plays with the parameters of another group's module of the same architecture (self-play).

    Every :func:`plain_networks` entry of ``module`` is replaced by ``source``'s at the same path; the
    tensordict modules, which carry the keys, are kept. Written here because torch has no "share these
    submodules" call (``tie_weights`` ties one tensor at a time); works for any model kind or chain,
    recurrent or not. Returns ``module``; a ValueError when the two differ in structure, or when a
    parameter or buffer is left unshared.

    >>> a = TensorOutModule(nn.Sequential(nn.Linear(3, 4), nn.Tanh()), in_keys=[("x", "o")], out_keys=[("x", "a")])
    >>> b = TensorOutModule(nn.Sequential(nn.Linear(3, 4), nn.Tanh()), in_keys=[("y", "o")], out_keys=[("y", "a")])
    >>> share_networks(b, a).module is a.module, b.in_keys
    (True, [('y', 'o')])
    """
    mine, theirs = plain_networks(module), plain_networks(source)
    for path, net in mine.items():
        other = theirs.get(path)
        shapes = {k: v.shape for k, v in net.state_dict().items()}
        if type(other) is not type(net) or shapes != {k: v.shape for k, v in other.state_dict().items()}:
            raise ValueError(f"{type(module).__name__}.{path}: {type(net).__name__} differs from the source's")
        module.set_submodule(path, other)
    left = _tensor_ids(module) - _tensor_ids(source)
    if left or mine.keys() != theirs.keys():
        raise ValueError(
            f"{type(module).__name__} could not share all of {type(source).__name__}'s networks "
            f"({len(left)} parameters or buffers of its own left; networks {sorted(mine)} and {sorted(theirs)})"
        )
    return module


def _tensor_ids(module: nn.Module) -> set[int]:
    return {id(t) for t in (*module.parameters(), *module.buffers())}
