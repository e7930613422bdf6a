"""One rank's share of one PPO update, started by torch's launcher from ``tests/core/test_ranks.py``.

    python -m torch.distributed.run --standalone --nproc_per_node 2 tests/core/rank_update.py FOLDER OVERRIDES...

Each rank loads the router and the whole batch that the test saved in FOLDER, takes its half of the
batch's envs, computes its advantages, runs :func:`~marl_ppo.core.update.ppo_update` on it (minibatches
of ``MINIBATCH / ranks``) and saves its router's state and Adam moments as ``rankR.pt``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from tensordict import TensorDict

from marl_ppo.config import load_config
from marl_ppo.core.aggregate import AggregatedStep
from marl_ppo.core.ranks import Ranks, use
from marl_ppo.core.update import TrainingError, ppo_update
from marl_ppo.run.build import build

EPOCHS, MINIBATCH, ORDER_SEED = 2, 16, 7


def main(folder: Path, overrides: list[str]) -> None:
    cfg = load_config(None, overrides)
    router = build(cfg).router
    router.load_state_dict(torch.load(folder / "router.pt", weights_only=True))
    batch = TensorDict.load_memmap(folder / "batch").clone()
    dist.init_process_group("gloo")
    ranks = use(Ranks(dist.get_rank(), dist.get_world_size()))
    share = batch.shape[0] // ranks.world
    own = router.compute_advantages(batch[ranks.rank * share : (ranks.rank + 1) * share].clone())
    if ranks.rank == int(os.environ.get("POISON_RANK", "-1")):  # this rank's advantages, and so its loss, NaN
        own.apply_(lambda t: t.fill_(float("nan")) if t.is_floating_point() else t)
    step = AggregatedStep(router, lr=cfg.train.lr, max_grad_norm=cfg.train.max_grad_norm)
    generator = torch.Generator().manual_seed(ORDER_SEED)
    failed = None
    try:
        ppo_update(router, step, own, num_epochs=EPOCHS, minibatch_size=MINIBATCH // ranks.world, generator=generator)
    except TrainingError as err:
        failed = str(err)
    moments = [[step.optimizer.state.get(p, {}).get(m) for m in ("exp_avg", "exp_avg_sq")] for p in step.params]
    torch.save({"router": router.state_dict(), "moments": moments, "alive": step.alive, "failed": failed},
               folder / f"rank{ranks.rank}.pt")  # fmt: skip
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2:])
