"""A masked group's diagnostics over the entries its loss counts, not over its padding.

torchrl 0.14.1's PPO losses mask only their ``loss_*`` terms (``loss_mask_key``): ``clip_fraction``,
``kl_approx``, ``entropy``, ``ESS``, ``max_ratio``, ``mean_ratio`` and ``explained_variance`` are
means (or a max) over every entry of the minibatch, padding included. In a turn-based game half the
entries are the other player's turns, and in a pool seat the episodes against a snapshot or a fixed
player carry the log-probs of *that* player: their "ratio" to the trained policy is anything at
all. A tic-tac-toe run logged ``kl_approx`` 1-2 and ``clip_fraction`` 0.25-0.3 that way, its
counted entries' own being a fraction of it. For a group with a mask, the router and the bundles
recompute those entries from the loss's per-element records
(:class:`~marl_ppo.core.losses.LossRecord`) over the entries the mask keeps; a group without one
keeps torchrl's values unchanged. Written by hand: torchrl has no masked version of these
diagnostics.

>>> mask = torch.tensor([[True, False], [True, True]])
>>> Reducer(mask).mean(torch.tensor([[1.0, 100.0], [2.0, 3.0]]))
tensor([2.])
>>> Reducer(mask, dim=1, k=2).mean(torch.tensor([[1.0, 100.0], [2.0, 3.0]]))  # two groups of one agent
tensor([1.5000, 3.0000])
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from tensordict import TensorDictBase, is_tensor_collection

from marl_ppo.models import Head

__all__ = ["Reducer", "masked_diagnostics", "per_head_diagnostics", "head_key"]


class Reducer:
    """Per-element tensors shaped like ``mask`` (trailing 1s allowed) to one value per group, over
    the entries ``mask`` keeps: ``k`` groups side by side along ``dim`` (a bundle), or one (``k=1``).
    A group with no kept entry in the minibatch gets 0 for every value, as torchrl's masked losses
    do: never a NaN that would spoil the iteration's mean."""

    def __init__(self, mask: torch.Tensor, dim: int = -1, k: int = 1) -> None:
        self.shape, self.dim, self.k = mask.shape, dim % max(mask.ndim, 1), k
        self.keep = self.rows(mask)
        self.count = self.keep.sum(1)

    def rows(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` as ``[k, entries]``, group ``i``'s entries in row ``i``."""
        x = x.reshape(self.shape)
        if self.k == 1:
            return x.reshape(1, -1)
        return x.unflatten(self.dim, (self.k, -1)).movedim(self.dim, 0).reshape(self.k, -1)

    def mean(self, x: torch.Tensor) -> torch.Tensor:
        r = self.rows(x.detach().float())
        return torch.where(self.keep, r, 0.0).sum(1) / self.count.clamp_min(1)

    def max(self, x: torch.Tensor) -> torch.Tensor:
        r = self.rows(x.detach().float())
        return self._or_zero(torch.where(self.keep, r, -torch.inf).max(1).values)

    def effective_sample_size(self, log_weight: torch.Tensor) -> torch.Tensor:
        """Kish's effective sample size of the kept entries' weights, as a fraction of their count."""
        r = torch.where(self.keep, self.rows(log_weight.detach().float()), -torch.inf)
        return self._or_zero((2 * r.logsumexp(1) - (2 * r).logsumexp(1)).exp() / self.count.clamp_min(1))

    def explained_variance(self, target: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
        """``1 - Var(target - value) / Var(target)`` over the kept entries (torchrl's formula)."""
        t, v = self.rows(target.detach().float()), self.rows(value.detach().float())
        eps = torch.finfo(t.dtype).eps
        return self._or_zero(1.0 - self._variance(t - v) / (self._variance(t) + eps))

    def _or_zero(self, value: torch.Tensor) -> torch.Tensor:
        """0 for a group with no kept entry (as :meth:`mean` gives, and torchrl's masked losses)."""
        return torch.where(self.count > 0, value, 0.0)

    def _variance(self, r: torch.Tensor) -> torch.Tensor:
        mean = torch.where(self.keep, r, 0.0).sum(1, keepdim=True) / self.count.clamp_min(1).unsqueeze(1)
        return torch.where(self.keep, (r - mean) ** 2, 0.0).sum(1) / self.count.clamp_min(1)


def masked_diagnostics(record, names, reducer: Reducer, clip_bounds: tuple) -> dict[str, torch.Tensor]:
    """The diagnostics among ``names`` (the loss's output keys) over the kept entries, one value per
    group, from a loss built with ``per_element=True``; ``clip_bounds`` are the log-ratio's."""
    lw = record.log_weight.detach()
    out = {
        "clip_fraction": lambda: reducer.mean((lw.clamp(*clip_bounds) != lw).float()),
        "kl_approx": lambda: reducer.mean(record.kl),
        "max_ratio": lambda: reducer.max(lw.exp()),
        "mean_ratio": lambda: reducer.mean(lw.exp()),
        "ESS": lambda: reducer.effective_sample_size(lw),
        "entropy": lambda: reducer.mean(_summed(record.entropy)),
        "explained_variance": lambda: reducer.explained_variance(record.value_target, record.value),
    }
    return {name: compute() for name, compute in out.items() if name in names}


def _summed(entropy):
    """A composite action's per-head entropies summed (torchrl's joint ``entropy``)."""
    return entropy.sum(dim="feature", reduce=True) if is_tensor_collection(entropy) else entropy


def per_head_diagnostics(
    heads: list[Head],
    clip_epsilon: float,
    action_key: tuple,
    new_lp: TensorDictBase,
    td: TensorDictBase,
    entropy: TensorDictBase | None,
    reduce: Callable[[torch.Tensor], torch.Tensor],
) -> dict[tuple, torch.Tensor]:
    """Per head: entropy, mean log-ratio, approximate KL (k3) and the fraction of samples whose
    own ratio leaves the clip range, beside torchrl's joint ``clip_fraction``.

    ``reduce`` maps a per-element tensor to the logged value: a mean for one group, one mean per
    group for a bundle.
    """
    low, high = math.log1p(-clip_epsilon), math.log1p(clip_epsilon)
    diag = {}
    with torch.no_grad():
        for head in heads:
            lp_key = head_key(action_key, head, "_log_prob")
            log_ratio = new_lp.get(lp_key).detach() - td.get(lp_key)
            diag[head.name + ("log_ratio",)] = reduce(log_ratio)
            diag[head.name + ("kl_approx",)] = reduce(log_ratio.exp() - 1 - log_ratio)
            diag[head.name + ("clip_fraction",)] = reduce(((log_ratio < low) | (log_ratio > high)).float())
            if entropy is not None:
                diag[head.name + ("entropy",)] = reduce(entropy.get(head_key(action_key, head, "_entropy")))
    return diag


def head_key(action_key: tuple, head: Head, suffix: str) -> tuple:
    """Where torchrl's CompositeDistribution writes a head's log-prob/entropy: beside the head's action."""
    return action_key + head.name[:-1] + (head.name[-1] + suffix,)
