"""Ranks: one run on N processes (``torchrun``), each with its own env copies, the update agreed by all.

The rank is one more axis of the batch: rank ``r`` collects its own ``frames_per_batch`` frames, computes
its own GAE, and takes its share of every minibatch; what the ranks must agree on goes through
:class:`Ranks`, whose every operation is the identity on one rank (so a run of one process is the run
it always was, bit for bit):

* gradients, averaged before the one clip and the one optimizer step
  (:class:`~marl_ppo.core.aggregate.AggregatedStep`), every trainable tensor included: a group that
  computed nothing on a rank adds zeros, so every rank makes the same collective calls (no hang);
* which seeds are still alive (a non-finite loss on any rank stops that seed on all; in the gradients'
  all-reduce);
* advantage standardisation over the global minibatch (:func:`standardize`: one all-reduce of count,
  sum and sum of squares), not each rank's share;
* the value normaliser's statistics (every rank folds in every rank's targets, :meth:`Ranks.cat`);
* stop signals (numbers that travel in the gradients' all-reduce during the update, :meth:`Ranks.max`
  between iterations), so that every rank stops at the same step.

A ranks run's processes join once (:func:`use`, from :func:`marl_ppo.run.ranks.join`; :func:`joined` for a block);
everything else reads :func:`current`.

Written by hand: torch.distributed gives the collectives; DDP's gradient hooks assume one module and
one backward per forward, not a router's groups whose losses a minibatch may skip.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

import torch
import torch.distributed as dist

__all__ = ["Ranks", "ONE", "current", "use", "joined", "standardize", "RANK_SEED_STRIDE"]


class Ranks:
    """Rank ``rank`` of ``world`` processes of one run (``ONE``: a run of one process); collectives on ``device``
    (the CPU for gloo, this rank's GPU for NCCL).

    >>> t = torch.tensor([1.0, 2.0])
    >>> ONE.sum_(t).tolist(), ONE.any(False), ONE.cat(t).tolist()
    ([1.0, 2.0], False, [1.0, 2.0])
    """

    def __init__(self, rank: int = 0, world: int = 1, local_rank: int = 0, device: str | torch.device = "cpu") -> None:
        self.rank, self.world, self.local_rank, self.device = rank, world, local_rank, torch.device(device)

    @property
    def main(self) -> bool:
        """Rank 0: the one that owns the run directory (logs, checkpoints, evaluation)."""
        return self.rank == 0

    def __repr__(self) -> str:
        return f"Ranks(rank={self.rank}, world={self.world})"

    def seed(self, seed: int) -> int:
        """This rank's env and random-stream seed for the run's ``seed`` (rank 0: ``seed`` itself)."""
        return seed + self.rank * RANK_SEED_STRIDE

    def mean_grads_(
        self, params: Sequence[torch.Tensor], alive: torch.Tensor | None = None, extra: Sequence[float] = ()
    ) -> list[float]:
        """Each parameter's gradient averaged over the ranks, in place, ``alive`` (a boolean per seed) made true
        where it is true on every rank, and the sums over the ranks of the numbers ``extra`` returned (a stop
        signal's flags): one all-reduce of one flat buffer.

        A parameter without a gradient on this rank (its group computed nothing here) adds zeros; one
        without a gradient on every rank keeps none (an optimizer skips it, as HAPPO's units need).
        """
        if self.world == 1 or not params:
            return list(extra)
        like = dict(dtype=params[0].dtype, device=params[0].device)
        had = torch.tensor([p.grad is not None for p in params], **like)
        seeds = torch.zeros(0, **like) if alive is None else alive.to(**like)
        flags = torch.cat([had, seeds, torch.tensor(list(extra), **like)])
        flat = torch.cat(
            [(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in params] + [flags]
        )
        dist.all_reduce(flat)
        grads, flags = flat[: -flags.numel()], flat[-flags.numel() :]
        grads /= self.world
        if alive is not None:  # alive on every rank: its flag summed to the world size
            alive &= flags[len(params) : len(params) + len(seeds)] == self.world
        host = flags.tolist()  # one host read: which tensors had a gradient, and the extra numbers
        offset = 0
        for p, count in zip(params, host):
            p.grad = grads[offset : offset + p.numel()].view_as(p) if count > 0 else None
            offset += p.numel()
        return host[len(params) + len(seeds) :]

    def sum_(self, tensor: torch.Tensor) -> torch.Tensor:
        """``tensor`` summed over the ranks, in place; returns it."""
        if self.world > 1:
            dist.all_reduce(tensor)
        return tensor

    def max(self, value: int) -> int:
        """The largest of every rank's ``value`` (a host read on every rank: use it between steps)."""
        if self.world == 1:
            return value
        agreed = torch.tensor([value], dtype=torch.int64, device=self.device)
        dist.all_reduce(agreed, op=dist.ReduceOp.MAX)
        return int(agreed.item())

    def any(self, flag: bool) -> bool:
        """Whether ``flag`` is true on any rank."""
        return bool(self.max(int(bool(flag))))

    def cat(self, tensor: torch.Tensor) -> torch.Tensor:
        """Every rank's ``tensor`` (the same shape on each), concatenated along dim 0 in rank order."""
        if self.world == 1:
            return tensor
        parts = [torch.empty_like(tensor) for _ in range(self.world)]
        dist.all_gather(parts, tensor.contiguous())
        return torch.cat(parts)

    def broadcast_(self, tensors: Sequence[torch.Tensor]) -> None:
        """Rank 0's ``tensors`` on every rank, in place."""
        if self.world == 1 or not tensors:
            return
        flat = torch.cat([t.detach().reshape(-1) for t in tensors])
        dist.broadcast(flat, src=0)
        offset = 0
        with torch.no_grad():
            for t in tensors:
                t.copy_(flat[offset : offset + t.numel()].view_as(t))
                offset += t.numel()

    def broadcast_text(self, text: str) -> str:
        """Rank 0's ``text`` on every rank (as bytes in a tensor: nothing is unpickled)."""
        if self.world == 1:
            return text
        data = torch.frombuffer(bytearray(text.encode()), dtype=torch.uint8) if self.main else None
        size = torch.tensor([0 if data is None else data.numel()], dtype=torch.int64, device=self.device)
        dist.broadcast(size, src=0)
        buf = torch.empty(int(size), dtype=torch.uint8, device=self.device) if data is None else data.to(self.device)
        dist.broadcast(buf, src=0)
        return bytes(buf.cpu().tolist()).decode()


RANK_SEED_STRIDE = 1_000_003  # rank r's seed: the run's seed + r * stride (rank 0: the run's own)
ONE = Ranks()
_current: Ranks = ONE


def current() -> Ranks:
    """The ranks of the run this process is in (:data:`ONE` outside a ranks run)."""
    return _current


def use(ranks: Ranks) -> Ranks:
    """Makes ``ranks`` :func:`current` (a run's processes join once, for the process's life); returns it."""
    global _current
    _current = ranks
    return ranks


@contextlib.contextmanager
def joined(ranks: Ranks) -> Iterator[Ranks]:
    """Makes ``ranks`` :func:`current` within the block."""
    global _current
    previous, _current = _current, ranks
    try:
        yield ranks
    finally:
        _current = previous


def standardize(
    advantage: torch.Tensor, mask: torch.Tensor | None, exclude_dims: Sequence[int], ranks: Ranks
) -> torch.Tensor:
    """``advantage`` standardised with the statistics of every rank's minibatch together, as torchrl's
    ``PPOLoss._standardize_advantage`` standardises one process's: the dims outside ``exclude_dims``
    reduced, ``mask`` (the valid entries) counted; unmasked, torch's unbiased std floored at float32's
    resolution, masked, the biased one floored at 1e-4. One all-reduce of count, sum and sum of squares.

    >>> a = torch.tensor([[1.0], [2.0], [3.0], [6.0]])
    >>> torch.allclose(standardize(a, None, (), ONE), (a - a.mean()) / a.std())
    True
    """
    exclude = {d if d >= 0 else advantage.ndim + d for d in exclude_dims}
    dims = [d for d in range(advantage.ndim) if d not in exclude]
    if mask is None:
        weight = torch.ones_like(advantage)
    else:
        while mask.ndim < advantage.ndim:
            mask = mask.unsqueeze(-1)
        weight = mask.expand_as(advantage).to(advantage.dtype)
    moments = torch.stack([weight.sum(dims, keepdim=True), (advantage * weight).sum(dims, keepdim=True),
                           (advantage.square() * weight).sum(dims, keepdim=True)])  # fmt: skip
    count, total, squares = ranks.sum_(moments)
    loc = total / count.clamp_min(1)
    deviations = (squares - total * loc).clamp_min(0)  # the sum of squared deviations from loc
    if mask is None:
        scale = (deviations / (count - 1).clamp_min(1)).sqrt().clamp_min(torch.finfo(torch.float).resolution)
    else:
        scale = (deviations / count.clamp_min(1)).sqrt().clamp_min(1e-4)
    return (advantage - loc) / scale
