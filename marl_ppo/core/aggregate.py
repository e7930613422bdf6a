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

from collections.abc import Iterable, Mapping, Sequence

import torch
from tensordict import TensorDictBase
from torch import nn

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
    """One backward over the aggregated loss, one gradient clip, one optimizer step: for 1..S seeds.

    With ``seeds=1`` the parameters are the router's own: one loss, torch's global-norm clip, one
    step. With ``seeds=S > 1`` they are a :class:`~marl_ppo.core.seeds.SeedStack`'s stacked leaves
    ``[S, ...]`` and the losses come ``[S]``: one backward of their sum (the seeds' parameters are
    disjoint, so each seed's gradient is its own), each seed's gradient clipped by its own norm
    (:func:`clip_per_seed`), one optimizer step for all (Adam is elementwise: its moments are per
    seed). There a seed whose loss is not finite stops: ``alive[s]`` turns false, ``failures[s]``
    says why, and its parameters and Adam moments stay as they were before that step while the
    other seeds go on. (With one seed a non-finite loss ends the update:
    :func:`~marl_ppo.core.update.ppo_update` raises.)

    Args:
        modules: the modules to train (typically the :class:`~marl_ppo.core.router.GroupRouter`),
            or the parameters themselves (a stack's :attr:`~marl_ppo.core.seeds.SeedStack.trainable`);
            de-duplicated.
        lr: Adam's learning rate (ignored when ``optimizer`` is given).
        max_grad_norm: gradient-norm clip (per seed); ``None`` disables it.
        weights: optional per-group loss weights.
        optimizer: an optimizer over :attr:`params`, to replace the default Adam (with ``seeds > 1``
            it must be elementwise, as Adam and SGD are, for the seeds to stay independent).
        seeds: S, the leading dim of every parameter when S > 1.

    >>> import torch
    >>> from tensordict import TensorDict
    >>> w = torch.nn.Linear(1, 1)
    >>> step = AggregatedStep(w, lr=0.1)
    >>> out = step(TensorDict({"g": {"loss_x": w(torch.ones(1)).pow(2).sum()}}))
    >>> sorted(out)
    ['grad_norm', 'loss']
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
    ) -> None:
        self.params = unique_parameters(modules)
        self.max_grad_norm = max_grad_norm
        self.weights = dict(weights or {})
        self.seeds = seeds
        self.alive = torch.ones(seeds, dtype=torch.bool)
        self.failures: dict[int, str] = {}
        if optimizer is None:
            # the fused kernel does Adam's update for all parameters at once (about 3x faster on CPU)
            optimizer = torch.optim.Adam(self.params, lr=lr, fused=True)
        self.optimizer = optimizer

    def __call__(self, losses: TensorDictBase) -> dict[str, torch.Tensor]:
        if self.seeds > 1:
            return self._per_seed(losses)
        loss = total_loss(losses, self.weights)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if self.max_grad_norm is not None:
            grad_norm = nn.utils.clip_grad_norm_(self.params, self.max_grad_norm)
        else:
            grads = [p.grad.norm() for p in self.params if p.grad is not None]
            grad_norm = torch.stack(grads).norm() if grads else torch.zeros(())
        self.optimizer.step()
        return {"loss": loss.detach(), "grad_norm": grad_norm.detach()}

    def _per_seed(self, losses: TensorDictBase) -> dict[str, torch.Tensor]:
        per_seed = total_loss(losses, self.weights)  # [S]
        finite = torch.isfinite(per_seed).cpu()
        for s in (self.alive & ~finite).nonzero().flatten().tolist():
            self.alive[s] = False
            self.failures[s] = f"non-finite loss at seed index {s}; that seed stops (its last good state is kept)"
        dead = (~self.alive).nonzero().flatten().tolist()
        self.optimizer.zero_grad(set_to_none=True)
        torch.where(finite.to(per_seed.device), per_seed, 0.0).sum().backward()
        kept = self._slices(dead)
        for p in self.params:
            if p.grad is not None and dead:
                p.grad[dead] = 0.0  # a failed seed's NaN stays out of the clip and the step
        grad_norm = clip_per_seed(self.params, self.max_grad_norm, self.seeds)
        self.optimizer.step()
        with torch.no_grad():
            for t, values in kept:
                t[dead] = values
        return {"loss": per_seed.detach(), "grad_norm": grad_norm.detach()}

    def _slices(self, dead: list[int]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """The failed seeds' slices of every parameter and Adam moment, to put back after the step."""
        if not dead:
            return []
        out = []
        for p in self.params:
            state = self.optimizer.state.get(p, {})
            for t in (p, state.get("exp_avg"), state.get("exp_avg_sq")):
                if t is not None:
                    out.append((t, t.detach()[dead].clone()))
        return out
