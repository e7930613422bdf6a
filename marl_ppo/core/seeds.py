"""1..S seeds of one router: their parameters as one stack, their losses in one call.

:class:`SeedStack` is what the update trains. With one seed it is the router itself: its own
tensors, its losses called directly. With S > 1 it holds the parameters and buffers of S routers
built alike (one per seed), each stacked along a leading seed dim ``[S, ...]``; a parameter that
two paths of a router share (an actor reachable from its loss and from the router's policy, a
critic two groups share) stays one stacked tensor. The router of the first seed is the
*template*: it holds seed 0's slices of the stack (one set of storages), and every call puts the
stacked tensors into it (tensordict's ``to_module``) and runs it under ``torch.vmap`` over the seed
dim, so each seed's losses, advantage standardisation and diagnostics are its own, computed by
torchrl's loss as in a single run (seed by seed where vmap has no batching rule: composite
actions, GRU/LSTM).

The step over the stack is :class:`~marl_ppo.core.aggregate.AggregatedStep` (``seeds=S``), the
update :func:`~marl_ppo.core.update.ppo_update`: the same ones a single run uses.

Written by hand: torchrl and tensordict have no stacked-seed training; they give the pieces
(``TensorDict.from_module``/``to_module``, ``torch.vmap``, fused Adam), this module ties shared
parameters and keeps each seed's losses its own.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator, Mapping, Sequence

import torch
from tensordict import TensorDict, TensorDictBase
from torch import nn
from torchrl.modules import MultiAgentNetBase, PopArtValueNorm

from marl_ppo.core.aggregate import unique_parameters
from marl_ppo.core.ranks import current
from marl_ppo.core.router import GroupRouter

__all__ = ["SeedStack", "seed_refusal"]


def seed_refusal(router: GroupRouter) -> str | None:
    """Why ``router`` cannot be stacked over seeds yet (``None``: it can)."""
    if any(isinstance(m, PopArtValueNorm) for m in router.modules()):
        return "loss.value_norm=popart (the critic's output layer is rescaled through plain tensor references)"
    return None


def _stacked(leaves: Sequence[torch.Tensor]) -> torch.Tensor:
    values = torch.stack([leaf.detach() for leaf in leaves])
    return (
        nn.Parameter(values, requires_grad=leaves[0].requires_grad) if isinstance(leaves[0], nn.Parameter) else values
    )


class SeedStack:
    """The routers of S seeds (built alike) as one, S = 1 included: every call takes and gives ``[S, ...]``.

    ``routers[0]`` is the template. Only the *storage* depends on S: one seed keeps the router's own
    tensors (no stacking, no vmap to pay for: its overhead is a third of a small update; PopArt's
    plain tensor references keep working), several are stacked ``[S, ...]`` and swapped into the
    template for each call (the other routers are only read here). :attr:`params` maps every path of
    the template to its stacked tensor (shared paths to the same one; ``None`` for one seed's own
    tensors), :attr:`trainable` lists each trainable parameter once, :attr:`stacked` says which storage.

    >>> one = SeedStack([torch.nn.Linear(2, 1)])
    >>> one.seeds, one.stacked, len(one.trainable)
    (1, False, 2)
    """

    def __init__(self, routers: Sequence[nn.Module]) -> None:
        if not routers:
            raise ValueError("a seed stack needs at least one router")
        self.template = routers[0]
        self.seeds = len(routers)
        self.stacked = self.seeds != 1  # the storage: the router's own tensors, or S stacked
        # torch.vmap has no batching rule for a composite action's log-ratio (a TensorDict subtraction,
        # torch._foreach_sub) nor for the GRU/LSTM kernels: such a router's losses run seed by seed
        composite = any(spec.is_composite_action for spec in getattr(self.template, "groups", {}).values())
        # on N ranks the advantages' statistics are all-reduced inside the loss, which vmap cannot batch
        recurrent = bool(getattr(self.template, "recurrent_keys", ()))
        self.looped = not self.stacked or composite or recurrent or current().world > 1
        self.params = _stack(routers) if self.stacked else None
        self.trainable = (
            [t for t in _leaves(self.params) if isinstance(t, nn.Parameter) and t.requires_grad]
            if self.stacked
            else unique_parameters(self.template)
        )
        if self.stacked:
            self.params[0].to_module(self.template)  # the template holds seed 0's slices: one set of storages

    def split(self, batch: TensorDictBase) -> TensorDictBase:
        """A batch of every seed's env copies, ``[S * E, ...]``, as ``[S, E, ...]``."""
        return batch.reshape(self.seeds, -1, *batch.shape[1:])

    def stacked_of(self, module: nn.Module) -> TensorDictBase:
        """The stacked tensors of a module of the template, ``[S]``: ``stacked_of(m)[s].to_module(m)`` is seed s's
        (stacked storage only)."""
        for name, own in self.template.named_modules():
            if own is module:
                return self.params.get(tuple(name.split("."))) if name else self.params
        raise ValueError(f"{type(module).__name__} is not a module of the template router")

    def trainable_of(self, module: nn.Module) -> list[torch.Tensor]:
        """The tensors of :attr:`trainable` (what the step holds) that are ``module``'s parameters (or their stacks)."""
        mine = {id(t) for t in (_leaves(self.stacked_of(module)) if self.stacked else module.parameters())}
        return [t for t in self.trainable if id(t) in mine]

    @contextlib.contextmanager
    def seed(self, s: int) -> Iterator[GroupRouter]:
        """The template with seed ``s``'s tensors in it (views: in-place updates, as value-norm statistics, land
        in the stack)."""
        if not self.stacked:
            yield self.template
            return
        with self.params[s].to_module(self.template):
            yield self.template

    def compute_advantages(self, batch: TensorDictBase) -> TensorDictBase:
        """Each seed's advantages and value targets on its own slice of ``batch`` ``[S, ...]``, with its own critic
        (and value-norm statistics, updated in place)."""
        out = []
        for s in range(self.seeds):
            with torch.no_grad(), self.seed(s) as router:
                out.append(router.compute_advantages(batch[s].clone(False)))
        return torch.stack(out)

    def _losses(self, params: TensorDictBase | None, td: TensorDictBase, entropy_scale=None, groups=None):
        if params is None:
            return self.template(td, entropy_scale, groups)
        with params.to_module(self.template):
            return self.template(td, entropy_scale, groups)

    def __call__(
        self, minibatch: TensorDictBase, entropy_scale: torch.Tensor | None = None, groups: Sequence[str] | None = None
    ) -> TensorDictBase:
        """Every seed's losses and diagnostics on its slice of ``minibatch`` ``[S, M, ...]``: ``[S]`` each.
        ``entropy_scale``: the seeds' one schedule value; ``groups``: only these groups' losses (see
        :meth:`~marl_ppo.core.router.GroupRouter.forward`)."""
        if self.looped:  # one loss call per seed, on its slices of the stack (gradients reach the stack)
            return torch.stack(
                [
                    self._losses(self.params[s] if self.stacked else None, minibatch[s], entropy_scale, groups)
                    for s in range(self.seeds)
                ]
            )
        losses = functools.partial(self._losses, entropy_scale=entropy_scale, groups=groups)
        return torch.vmap(losses, (0, 0), randomness="error")(self.params, minibatch)

    def state_dict(self, s: int) -> dict[str, torch.Tensor]:
        """Seed ``s``'s router state dict, as its single run would save it."""
        if not self.stacked:
            return self.template.state_dict()
        with self.seed(s) as router:
            return {k: v.detach().clone() for k, v in router.state_dict().items()}

    def load_state_dict(self, s: int, state: Mapping[str, torch.Tensor]) -> None:
        """Writes a router state dict into seed ``s``'s slices (in place)."""
        with torch.no_grad(), self.seed(s) as router:
            router.load_state_dict(state)

    def slice_of(self, t: torch.Tensor, s: int) -> torch.Tensor:
        """Seed ``s``'s part of a tensor shaped like a stored parameter (a stacked leaf, or an Adam moment of one)."""
        return t[s] if self.stacked else t

    def stored(self, name: str) -> torch.Tensor:
        """The stored tensor of the template's parameter ``name`` (``losses.agents....weight``): its stack, or it."""
        return self.params.get(tuple(name.split("."))) if self.stacked else self.template.get_parameter(name)


def _leaves(params: TensorDictBase) -> list[torch.Tensor]:
    seen, out = set(), []
    for t in params.values(include_nested=True, leaves_only=True):
        if id(t) not in seen:
            seen.add(id(t))
            out.append(t)
    return out


def _stack(routers: Sequence[nn.Module]) -> TensorDictBase:
    """The parameters and buffers of ``routers`` stacked ``[S, ...]``; a tensor two paths share stays one stack."""
    why = seed_refusal(routers[0])
    if why is not None:
        raise ValueError(f"many seeds in one process do not support {why} yet")
    per_seed = [TensorDict.from_module(r) for r in routers]  # the routers' own tensors, every path
    stacked: dict[int, torch.Tensor] = {}  # id(template tensor) -> its stacked tensor: shared stays shared
    params = per_seed[0].empty()
    for key in per_seed[0].keys(include_nested=True, leaves_only=True):
        ident = id(per_seed[0].get(key))
        if ident not in stacked:
            stacked[ident] = _stacked([td.get(key) for td in per_seed])
        params.set(key, stacked[ident])
    params.batch_size = [len(routers)]
    for name, module in routers[0].named_modules(remove_duplicate=False):
        if isinstance(module, MultiAgentNetBase):  # its per-agent TensorDictParams keeps its batch [n_agents]
            params.get((*name.split("."), "params")).batch_size = [len(routers), *module.params.batch_size]
    return params
