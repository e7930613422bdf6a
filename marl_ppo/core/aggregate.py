"""Aggregation: one scalar from every group's ``loss_*`` terms, one optimizer, one step.

>>> import torch
>>> from tensordict import TensorDict
>>> losses = TensorDict({
...     "red": {"loss_objective": torch.tensor(1.0), "loss_critic": torch.tensor(2.0), "entropy": torch.tensor(9.0)},
...     "blue": {"loss_objective": torch.tensor(4.0)},
... })
>>> total_loss(losses).item()  # entropy is a diagnostic, not a loss term
7.0
>>> total_loss(losses, weights={"blue": 0.5}).item()
5.0
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

import torch
from tensordict import TensorDictBase
from torch import nn

from marl_ppo.core.ranks import current

__all__ = ["total_loss", "unique_parameters", "clip_per_seed", "AggregatedStep"]


def total_loss(losses: TensorDictBase, weights: Mapping[str, float] | None = None) -> torch.Tensor:
    """Sums every group's ``loss_*`` entries, each group scaled by its weight (default 1)."""
    weights = dict(weights or {})
    unknown = set(weights) - set(losses.keys())
    if unknown:
        raise KeyError(f"loss weights given for unknown group(s) {sorted(unknown)}; groups are {sorted(losses.keys())}")
    total = None
    for group in losses.keys():
        group_losses = losses.get(group)
        terms = [v for k, v in group_losses.items() if k.startswith("loss_")]
        if not terms:
            raise ValueError(f"group {group!r} has no loss_* term; it has {sorted(group_losses.keys())}")
        group_total = torch.stack(terms).sum(0) if len(terms) > 1 else terms[0]  # [S] per seed under many seeds
        w = weights.get(group, 1.0)
        group_total = group_total * w if w != 1.0 else group_total
        total = group_total if total is None else total + group_total
    if total is None:
        raise ValueError("no group losses to aggregate")
    return total


def unique_parameters(modules: nn.Module | Iterable[nn.Module | torch.Tensor]) -> list[nn.Parameter]:
    """The trainable parameters of ``modules`` (modules, or parameters themselves), each once, in first-seen order.

    A module shared by two groups' losses (e.g. one critic) contributes its parameters once.
    """
    if isinstance(modules, nn.Module):
        modules = [modules]
    seen: set[int] = set()
    params = []
    for module in modules:
        for p in [module] if isinstance(module, torch.Tensor) else module.parameters():
            if p.requires_grad and id(p) not in seen:
                seen.add(id(p))
                params.append(p)
    return params


def clip_per_seed(params: Sequence[torch.Tensor], max_norm: float | None, seeds: int) -> torch.Tensor:
    """Each seed's gradient norm over every leaf's seed slice, ``[S]``; with ``max_norm``, each seed's
    gradients scaled as ``torch.nn.utils.clip_grad_norm_`` scales a single run's.

    >>> w = torch.nn.Parameter(torch.zeros(2, 3))
    >>> w.grad = torch.tensor([[3.0, 4.0, 0.0], [0.3, 0.4, 0.0]])  # seed 0's norm 5, seed 1's 0.5
    >>> clip_per_seed([w], 1.0, 2).tolist()
    [5.0, 0.5]
    >>> [round(g, 4) for g in w.grad.flatten().tolist()]  # seed 0 scaled to norm 1, seed 1 left as it was
    [0.6, 0.8, 0.0, 0.3, 0.4, 0.0]
    """
    grads = [p.grad for p in params if p.grad is not None]
    norms = torch.stack([torch.linalg.vector_norm(g.reshape(seeds, -1), dim=1) for g in grads])  # [leaves, S]
    total = torch.linalg.vector_norm(norms, dim=0)
    if max_norm is not None:
        coef = (max_norm / (total + 1e-6)).clamp(max=1.0)  # torch's formula, per seed
        for g in grads:
            g.mul_(coef.reshape(seeds, *[1] * (g.ndim - 1)))
    return total


class AggregatedStep:
    """One backward over the aggregated loss, one gradient clip, one optimizer step: for S seeds, S = 1 included.

    The losses come ``[S]`` (a scalar is one seed's); :meth:`__call__` returns ``loss`` and ``grad_norm``,
    ``[S]`` each. One backward of their sum (the seeds' parameters are disjoint, so each seed's gradient
    is its own), each seed's gradient clipped by its own norm, one optimizer step for all (Adam is
    elementwise: its moments are per seed). A seed whose loss is not finite stops: ``alive[s]`` turns
    false (on the parameters' device: no host read), its gradients and first moments are zeroed, so
    its parameters stay as they were before that step while the other seeds go on;
    :meth:`failures` says why. :func:`~marl_ppo.core.update.ppo_update` fails the run when no seed is
    alive (with one seed: at its first non-finite loss, as it always did). On N ranks
    (:mod:`~marl_ppo.core.ranks`) the gradients are averaged over the ranks before the clip, and a seed
    stops on every rank when its loss is not finite on one.

    Where the parameters are stored is the stack's business (:class:`~marl_ppo.core.seeds.SeedStack`):
    ``stacked=False`` (one seed's own tensors, no seed dim) clips with torch's global-norm clip,
    ``stacked=True`` (leaves ``[S, ...]``) with :func:`clip_per_seed`, the same formula per seed.

    Args:
        modules: the modules to train (typically the :class:`~marl_ppo.core.router.GroupRouter`),
            or the parameters themselves (a stack's :attr:`~marl_ppo.core.seeds.SeedStack.trainable`);
            de-duplicated.
        lr: Adam's learning rate (ignored when ``optimizer`` is given).
        max_grad_norm: gradient-norm clip (per seed); ``None`` disables it.
        weights: optional per-group loss weights.
        optimizer: an optimizer over :attr:`params`, to replace the default Adam (with stacked seeds
            it must be elementwise, as Adam and SGD are, for the seeds to stay independent).
        seeds: S.
        stacked: the parameters carry the leading seed dim (default: ``seeds > 1``, a stack's storage).

    >>> import torch
    >>> from tensordict import TensorDict
    >>> w = torch.nn.Linear(1, 1)
    >>> step = AggregatedStep(w, lr=0.1)
    >>> out = step(TensorDict({"g": {"loss_x": w(torch.ones(1)).pow(2).sum()}}))
    >>> sorted(out), out["loss"].shape
    (['grad_norm', 'loss'], torch.Size([1]))
    """

    def __init__(
        self,
        modules: nn.Module | Iterable[nn.Module | torch.Tensor],
        *,
        lr: float = 3e-4,
        max_grad_norm: float | None = 1.0,
        weights: Mapping[str, float] | None = None,
        optimizer: torch.optim.Optimizer | None = None,
        seeds: int = 1,
        stacked: bool | None = None,
    ) -> None:
        self.params = unique_parameters(modules)
        self.max_grad_norm = max_grad_norm
        self.weights = dict(weights or {})
        self.seeds = seeds
        self.stacked = seeds > 1 if stacked is None else stacked
        device = self.params[0].device if self.params else torch.device("cpu")
        self.alive = torch.ones(seeds, dtype=torch.bool, device=device)
        self.agree: Callable[[], Sequence[float]] | None = None  # numbers summed over the ranks with each step's
        self.agreed: list[float] = []  # gradients (one rank: themselves), e.g. which stop signal a rank got
        if optimizer is None:
            # the fused kernel does Adam's update for all parameters at once (about 3x faster on CPU)
            optimizer = torch.optim.Adam(self.params, lr=lr, fused=True)
        self.optimizer = optimizer

    @property
    def failures(self) -> dict[int, str]:
        """Why each stopped seed stopped, by seed index (a host read of :attr:`alive`)."""
        return {
            s: f"non-finite loss at seed index {s}; that seed stops (its last good state is kept)"
            for s in (~self.alive).nonzero().flatten().tolist()
        }

    def _per_seed(self, mask: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """``mask`` ``[S]`` shaped to broadcast over ``t``'s seed slices (unstacked: one seed, every element)."""
        return mask.reshape(self.seeds, *[1] * (t.ndim - 1)) if self.stacked else mask.reshape([1] * t.ndim)

    def __call__(self, losses: TensorDictBase) -> dict[str, torch.Tensor]:
        per_seed = total_loss(losses, self.weights).reshape(self.seeds)
        self.alive &= torch.isfinite(per_seed)
        self.optimizer.zero_grad(set_to_none=True)
        torch.where(self.alive, per_seed, 0.0).sum().backward()
        # on N ranks, one all-reduce: every rank's gradients averaged (a group this rank skipped adds zeros), a
        # seed whose loss is not finite on any rank stopped on every rank (its gradients zeroed below), and the
        # sums of what `agree` gives (a stop signal's flags)
        self.agreed = current().mean_grads_(self.params, self.alive, self.agree() if self.agree else ())
        dead = ~self.alive
        grads = [p.grad for p in self.params if p.grad is not None]
        for g in grads:  # a stopped seed's NaN stays out of the clip and the step
            g.masked_fill_(self._per_seed(dead, g), 0.0)
        if not self.stacked:
            grad_norm = _global_norm(self.params, grads, self.max_grad_norm).reshape(1)
        else:
            grad_norm = clip_per_seed(self.params, self.max_grad_norm, self.seeds)
        for p in self.params:  # zero gradient and first moment: Adam leaves a stopped seed's parameters as they are
            exp_avg = self.optimizer.state.get(p, {}).get("exp_avg")
            if exp_avg is not None:
                exp_avg.masked_fill_(self._per_seed(dead, exp_avg), 0.0)
        self.optimizer.step()
        return {"loss": per_seed.detach(), "grad_norm": grad_norm.detach()}


def _global_norm(params: Sequence[torch.Tensor], grads: Sequence[torch.Tensor], max_norm: float | None) -> torch.Tensor:
    """One seed's gradient norm over its own (unstacked) tensors, clipped by torch's ``clip_grad_norm_``."""
    if max_norm is not None:
        return nn.utils.clip_grad_norm_(params, max_norm)
    return torch.stack([g.norm() for g in grads]).norm() if grads else torch.zeros((), device=params[0].device)
