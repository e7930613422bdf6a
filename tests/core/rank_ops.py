"""The collectives of :class:`~marl_ppo.core.ranks.Ranks` on two processes, started by torch's launcher from
``tests/core/test_ranks.py``; each rank saves what it got as ``opsR.pt`` in FOLDER.

    python -m torch.distributed.run --standalone --nproc_per_node 2 tests/core/rank_ops.py FOLDER
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.distributed as dist

from marl_ppo.core.ranks import Ranks


def main(folder: Path) -> None:
    dist.init_process_group("gloo")
    ranks = Ranks(dist.get_rank(), dist.get_world_size())
    r = ranks.rank
    # three parameters: a has a gradient on both ranks, b on rank 0 only (its group absent from rank 1's
    # minibatch), c on neither (a HAPPO unit not trained in this pass)
    a, b, c = (torch.nn.Parameter(torch.zeros(2)) for _ in range(3))
    a.grad = torch.tensor([1.0, 2.0]) * (r + 1)
    b.grad = torch.tensor([4.0, 8.0]) if r == 0 else None
    alive = torch.tensor([True, r == 0, True])  # seed 1's loss not finite on rank 1
    ranks.mean_grads_([a, b, c], alive)
    text = ranks.broadcast_text("rank 0's directory: /runs/ünïcode" if r == 0 else "")
    out = {
        "a": a.grad, "b": b.grad, "c_none": c.grad is None, "alive": alive, "text": text,
        "max": ranks.max(3 if r == 1 else 1), "any": ranks.any(r == 1), "none": ranks.any(False),
        "cat": ranks.cat(torch.full((2, 1), float(r))),
    }  # fmt: skip
    torch.save(out, folder / f"ops{r}.pt")
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
