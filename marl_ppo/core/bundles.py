"""Bundles: groups with identical specs run through one torchrl loss call.

The router keeps one PPO loss per group. With many small groups (one group per agent, the two
players of a board game) most of a minibatch's time goes into each loss call's fixed cost, not
into the networks: about 3 ms per group per minibatch on CPU. A bundle runs ``k`` groups whose
specs match (agent count, observation, action spec, masks, entropy coefficients, network kind)
through one call:

- their entries are concatenated along the agent dim (group ``i``'s agents at ``[i*n, (i+1)*n)``);
- the bundle's actor and critic run each group's *own* network on its slice. No weight is shared,
  stacked or copied: the parameters, the policy used for collection and the checkpoints stay the
  groups' own;
- the loss runs with ``reduction="none"``, and each loss term and diagnostic is then reduced per
  group exactly as that group's own loss reduces it (masked means included). The router's output,
  the aggregated loss and its gradients are those of the unbundled router
  (``tests/core/test_bundles.py`` compares them).

Advantages are still computed per group (:meth:`GroupRouter.compute_advantages`), each on its own
reward and done keys: bundling only changes how the update's loss calls are batched.

Written by hand: torchrl's losses take one actor and one critic; batching several groups' losses
while keeping each group's own reduction has no library equivalent.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence

import torch
from tensordict import TensorDict, TensorDictBase, is_tensor_collection
from torch import nn

from marl_ppo.core.diagnostics import Reducer, masked_diagnostics
from marl_ppo.groups.specs import GroupKeys, GroupSpec
from marl_ppo.models.critic import value_norms
from marl_ppo.models.modules import Networks

__all__ = ["GroupBatchNet", "GroupBundle", "find_bundles"]

# Loss outputs that are means over every element; recomputed per group from the recorded tensors.
_ELEMENTWISE = ("clip_fraction", "kl_approx", "entropy", "max_ratio", "mean_ratio")
# Loss outputs kept per agent by torchrl (reduced over the first batch dim only): their agent dim.
_PER_AGENT_DIM = {"ESS": -1, "explained_variance": -2}


class GroupBatchNet(nn.Module):
    """Runs each group's own network on its slice of the agent dim and concatenates the outputs.

    ``[*B, k * n_agents, d] -> [*B, k * n_agents, out]``. The networks are held in a tuple, not
    registered: their parameters belong to the groups' modules.
    """

    def __init__(self, nets: Sequence[nn.Module], n_agents: int) -> None:
        super().__init__()
        self._nets = tuple(nets)
        self.n_agents = n_agents

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        chunks = x.split(self.n_agents, dim=-2)
        if len(chunks) != len(self._nets):
            raise ValueError(
                f"expected {len(self._nets)} x {self.n_agents} agents on dim -2, got input {list(x.shape)}"
            )
        return torch.cat([net(c) for net, c in zip(self._nets, chunks)], dim=-2)


def _relative(spec: GroupSpec, key) -> tuple | None:
    """``key`` without its leading group name (``None`` stays ``None``)."""
    if key is None:
        return None
    return tuple(key[1:])


def _signature(spec: GroupSpec, actor: nn.Module, critic: nn.Module, coeffs: Sequence[float], networks: Networks):
    """What must match for two groups to share a loss call; ``None`` if the group cannot be bundled."""
    if len(spec.observation_keys) != 1 or spec.keys != GroupKeys.for_group(spec.name, mask=spec.keys.mask):
        return None
    nets = networks.of(actor), networks.of(critic)
    if None in nets:
        return None
    return (
        spec.n_agents,
        _relative(spec, spec.observation_keys[0]),
        spec.observation_shape,
        spec.agent_action_spec,
        _relative(spec, spec.action_mask_key),
        _relative(spec, spec.keys.mask),
        tuple(coeffs),
        type(nets[0]),
        type(nets[1]),
        tuple(type(norm) for norm, _ in value_norms(critic).values()),  # value normalisation or none
    )


def find_bundles(
    groups: Mapping[str, GroupSpec],
    actors: Mapping[str, nn.Module],
    critics: Mapping[str, nn.Module],
    head_coeffs: Mapping[str, Sequence[float]],
    eligible: Callable[[str], bool],
    networks: Networks,
) -> list[list[str]]:
    """The groups to bundle: sets of two or more eligible groups with equal signatures, in group order
    (a group's actor and critic must run agent MLPs that ``networks`` lists)."""
    sets: list[tuple[object, list[str]]] = []
    for g, spec in groups.items():
        sig = _signature(spec, actors[g], critics[g], head_coeffs[g], networks) if eligible(g) else None
        if sig is None:
            continue
        for other_sig, members in sets:
            if other_sig == sig:
                members.append(g)
                break
        else:
            sets.append((sig, [g]))
    return [members for _, members in sets if len(members) > 1]


def bundle_spec(name: str, specs: Sequence[GroupSpec]) -> GroupSpec:
    """The spec of the concatenated groups, named ``name`` (its action spec is the first group's:
    only its per-agent heads are read)."""
    first = specs[0]

    def moved(key):
        return None if key is None else (name, *_relative(first, key))

    return dataclasses.replace(
        first,
        name=name,
        agents=tuple(a for s in specs for a in s.agents),
        observation_keys=(moved(first.observation_keys[0]),),
        action_mask_key=moved(first.action_mask_key),
        observation_shape=(first.n_agents * len(specs), *first.observation_shape[1:]),
        raw_reward_key=None,
        raw_done_key=None,
        raw_terminated_key=None,
        keys=GroupKeys.for_group(name, mask=moved(first.keys.mask)),
    )


def _unravel(key: tuple):
    return key[0] if len(key) == 1 else key


def _by_group(x: torch.Tensor, dim: int, k: int) -> torch.Tensor:
    """``[..., k * n (at dim), ...] -> [k, everything else]``."""
    dim = dim % x.ndim
    return x.unflatten(dim, (k, -1)).movedim(dim, 0).reshape(k, -1)


class GroupBundle:
    """``k`` groups' loss calls as one: see the module docstring.

    Args:
        spec: the bundle's spec (:func:`bundle_spec`).
        groups: the bundled groups' names, in concatenation order.
        loss: a torchrl PPO loss on the bundle's keys, built with ``reduction="none"`` and
            ``per_element=True`` (see :class:`~marl_ppo.core.losses.LossRecord`).
        head_diagnostics: the router's per-head diagnostics for composite actions, called as
            ``(action_key, new_log_prob, td, entropy, reduce)`` with a ``reduce`` from per-element
            tensors to one value per group.
    """

    def __init__(self, spec: GroupSpec, groups: Sequence[str], loss: nn.Module, head_diagnostics: Callable) -> None:
        self.spec = spec
        self.name = spec.name
        self.groups = tuple(groups)
        self.n_agents = spec.n_agents // len(groups)
        self.loss = loss
        self._head_diagnostics = head_diagnostics
        keys = spec.keys
        read = [spec.observation_keys[0], spec.action_mask_key, keys.action, keys.advantage, keys.value_target]
        if not spec.is_composite_action:  # a composite action's log-probs sit beside its heads
            read.append(keys.log_prob)
        self._read = [k[1:] for k in read if k is not None]
        # like a group's own loss (loss_mask_key), the bundle masks only when the mask is there
        self._mask = None if keys.mask is None else _unravel(keys.mask[1:])

    def __call__(self, td: TensorDictBase, entropy_scale: torch.Tensor | None = None) -> dict[str, TensorDictBase]:
        k, dim = len(self.groups), td.batch_dims
        read = self._read
        if self._mask is not None and all(self._mask in td.get(g).keys(include_nested=True) for g in self.groups):
            read = [*read, self._mask]
        data = torch.cat([td.get(g).select(*read) for g in self.groups], dim=dim)
        bundled = TensorDict({self.name: data}, batch_size=td.batch_size)
        mask = None
        if read is not self._read:
            mask = bundled.get(self.spec.keys.mask)
            if self.loss.normalize_advantage:  # as the router does for one group
                bundled.set("shifted_valid", mask)
        loss = self.loss
        try:
            out = loss(bundled, entropy_scale=entropy_scale)
        finally:
            record = loss.record.take()  # this call's per-element tensors (see core.losses.LossRecord)
        new_lp = record.log_prob

        per_group: dict[str, torch.Tensor] = {}
        count = None if mask is None else _by_group(mask, dim, k).sum(1).clamp_min(1)
        composite_entropy = out.pop("composite_entropy", None)
        for name, value in out.items():
            if name.startswith("loss_"):
                # torchrl zeroes masked positions; its mean is then sum / count of valid ones
                per_group[name] = (
                    _by_group(value, dim, k).mean(1) if count is None else (_by_group(value, dim, k).sum(1) / count)
                )
            elif name in _PER_AGENT_DIM:
                per_group[name] = _by_group(value.detach().float(), _PER_AGENT_DIM[name], k).mean(1)
            elif name not in _ELEMENTWISE:
                raise NotImplementedError(
                    f"bundled groups {self.groups}: no per-group reduction for loss output {name!r}; "
                    "build the router with bundle_groups=False"
                )
        with torch.no_grad():
            if mask is not None:  # over each group's kept entries, not its padding (core/diagnostics.py)
                reducer = Reducer(mask, dim, k)
                per_group.update(masked_diagnostics(record, list(out.keys()), reducer, loss._clip_bounds))
                reduce = reducer.mean
            else:
                per_group.update(_elementwise(record, out.keys(), loss._clip_bounds, dim, k))
                reduce = lambda x: _by_group(x, dim, k).mean(1)  # noqa: E731
            if self.spec.is_composite_action:
                per_group.update(
                    self._head_diagnostics(self.spec.keys.action, new_lp, bundled, composite_entropy, reduce)
                )
        columns = {name: value.unbind(0) for name, value in per_group.items()}
        return {
            g: TensorDict({name: col[i] for name, col in columns.items()}, batch_size=[])
            for i, g in enumerate(self.groups)
        }


def _elementwise(record, names, clip_bounds: tuple, dim: int, k: int) -> dict[str, torch.Tensor]:
    """torchrl's element means (and max) of an unmasked bundle, one per group."""
    lw = _by_group(record.log_weight.detach(), dim, k)
    clipped = lw.clamp(*clip_bounds)
    ratio = lw.exp()
    elementwise = {
        "clip_fraction": (clipped != lw).to(lw.dtype).mean(1),
        "kl_approx": _by_group(record.kl.detach(), dim, k).mean(1),
        "max_ratio": ratio.max(1).values,
        "mean_ratio": ratio.mean(1),
    }
    entropy = record.entropy
    if entropy is not None:
        if is_tensor_collection(entropy):
            entropy = entropy.sum(dim="feature", reduce=True)
        elementwise["entropy"] = _by_group(entropy.detach(), dim, k).mean(1)
    return {name: elementwise[name] for name in names if name in elementwise}
