"""Ranks (``train.ranks``, torchrun): the known answer of one data-parallel update.

Two processes started by torch's own launcher, each given one half of a fixed batch (its envs), end
one update (2 epochs) with the parameters and Adam moments of one process given the whole batch with
the same minibatch partition: minibatch i of the whole is the union of the ranks' minibatches i. That
holds only if the gradients are averaged over the ranks before the one clip, the advantages are
standardised over both halves together and the value normaliser takes in both halves' targets.
"""

from __future__ import annotations

import copy
import os
import subprocess
from pathlib import Path

import pytest
import torch

from marl_ppo.config import load_config
from marl_ppo.core.aggregate import AggregatedStep
from marl_ppo.core.ranks import ONE, standardize
from marl_ppo.core.seeds import SeedStack
from marl_ppo.core.update import update_keys
from marl_ppo.run.build import build
from marl_ppo.run.ranks import launch_command
from tests.core.rank_update import EPOCHS, MINIBATCH, ORDER_SEED

WORKER = Path(__file__).with_name("rank_update.py")
BASE = ["env.num_envs=4", "env.max_steps=8", "model.hidden=[16, 16]", "train.num_threads=1",
        "loss.normalize_advantage=true"]  # fmt: skip
CASES = {  # shared parameters; two groups, unshared, value normalisation; a composite action, value normalisation
    "shared": [],
    "two-groups-unshared-value-norm": [
        "env.scenario=simple_tag", "env.kwargs={}", "model.share_params=false", "loss.value_norm=running",
    ],
    "composite-value-norm": [
        "env.scenario=simple_reference", "env.comm=true", "env.kwargs={}", "loss.value_norm=running",
        "loss.entropy_coeff=0.01",
    ],
}  # fmt: skip


def _whole(router, batch, cfg):
    """One process, the whole batch: minibatch i is rank 0's minibatch i followed by rank 1's."""
    router = copy.deepcopy(router)
    step = AggregatedStep(router, lr=cfg.train.lr, max_grad_norm=cfg.train.max_grad_norm)
    flat = router.compute_advantages(batch.clone()).select(*update_keys(router)).reshape(-1)
    half, size = flat.shape[0] // 2, MINIBATCH // 2
    stack, generator = SeedStack([router]), torch.Generator().manual_seed(ORDER_SEED)
    for _ in range(EPOCHS):
        order = torch.randperm(half, generator=generator)  # what each rank draws over its half
        for i in range(half // size):
            index = order[i * size : (i + 1) * size]
            step(stack(torch.cat([flat[index], flat[half + index]]).unsqueeze(0)))
    return router, step


@pytest.mark.parametrize("case", sorted(CASES))
def test_two_ranks_given_halves_update_as_one_process_given_the_whole(case, tmp_path):
    overrides = [*BASE, *CASES[case]]
    cfg = load_config(None, overrides)
    parts = build(cfg)
    with torch.no_grad():
        batch = parts.reward_table(parts.env.rollout(8, parts.policy, break_when_any_done=False))
    parts.env.close()
    batch.memmap(tmp_path / "batch")
    torch.save(parts.router.state_dict(), tmp_path / "router.pt")
    command = launch_command(2, [])[:-2] + [str(WORKER), str(tmp_path), *overrides]  # the launcher, our script
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]

    router, step = _whole(parts.router, batch, cfg)
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=True) for r in range(2)]
    want, start = router.state_dict(), parts.router.state_dict()
    moved = 0
    for key, value in want.items():
        for r, got in enumerate(ranks):
            torch.testing.assert_close(got["router"][key], value, rtol=1e-4, atol=1e-5, msg=f"rank {r}: {key}")
        torch.testing.assert_close(ranks[1]["router"][key], ranks[0]["router"][key], rtol=0, atol=0)  # one step
        moved += int(not torch.equal(value, start[key]))
    assert moved > 4, "the update moved (almost) nothing: the comparison would prove little"
    for p, got in zip(step.params, ranks[0]["moments"], strict=True):
        for moment, value in zip(("exp_avg", "exp_avg_sq"), got):
            torch.testing.assert_close(value, step.optimizer.state[p][moment], rtol=1e-4, atol=1e-7, msg=moment)


@pytest.mark.parametrize("mask", [False, True])
def test_standardize_from_moments_is_torchrls_standardisation(mask):
    """One rank's moments give torchrl's own statistics (the unbiased std unmasked, the biased one masked)."""
    from torchrl._utils import _standardize

    torch.manual_seed(0)
    advantage = torch.randn(6, 5, 3, 1) * 3 + 1
    valid = torch.rand(6, 5) > 0.3 if mask else None
    got = standardize(advantage, valid, (-2,), ONE)
    if not mask:
        torch.testing.assert_close(got, _standardize(advantage, (-2,)))
        return
    w = valid[..., None, None].expand_as(advantage).float()
    loc = (advantage * w).sum((0, 1, 3), keepdim=True) / w.sum((0, 1, 3), keepdim=True)
    scale = (((advantage - loc) ** 2 * w).sum((0, 1, 3), keepdim=True) / w.sum((0, 1, 3), keepdim=True)).sqrt()
    torch.testing.assert_close(got, (advantage - loc) / scale)


def test_a_loss_not_finite_on_one_rank_stops_the_run_on_both_at_the_same_step(tmp_path):
    overrides = list(BASE)
    parts = build(load_config(None, overrides))
    with torch.no_grad():
        batch = parts.reward_table(parts.env.rollout(8, parts.policy, break_when_any_done=False))
    parts.env.close()
    batch.memmap(tmp_path / "batch")
    start = parts.router.state_dict()
    torch.save(start, tmp_path / "router.pt")
    command = launch_command(2, [])[:-2] + [str(WORKER), str(tmp_path), *overrides]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, env={**os.environ, "POISON_RANK": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    for r in range(2):
        got = torch.load(tmp_path / f"rank{r}.pt", weights_only=True)
        assert got["alive"].tolist() == [False] and "non-finite loss" in got["failed"], (r, got["failed"])
        for key, value in start.items():  # the first step stopped before it changed anything, on both ranks
            assert torch.equal(got["router"][key], value), (r, key)


def test_the_ranks_collectives_on_two_processes(tmp_path):
    """Gradients averaged (a tensor without one on a rank adds zeros; one without one on any rank keeps none),
    the alive flags agreed, a text broadcast, the max, any and cat of every rank's values."""
    command = launch_command(2, [])[:-2] + [str(WORKER.with_name("rank_ops.py")), str(tmp_path)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    for r in range(2):
        got = torch.load(tmp_path / f"ops{r}.pt", weights_only=True)
        assert got["a"].tolist() == [1.5, 3.0] and got["b"].tolist() == [2.0, 4.0] and got["c_none"]
        assert got["alive"].tolist() == [True, False, True]
        assert got["text"] == "rank 0's directory: /runs/ünïcode"
        assert (got["max"], got["any"], got["none"]) == (3, True, False)
        assert got["cat"].flatten().tolist() == [0.0, 0.0, 1.0, 1.0]
