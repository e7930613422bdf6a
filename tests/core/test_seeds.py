"""Many seeds in one process: the stacked update is each seed's own single-run update, and seeds are independent.

Known answer: S routers built as S single runs would build them (``build`` with ``train.seed=s``),
each with a batch collected on the real env by its own policy. Each seed's single run computes its
advantages and runs :func:`~marl_ppo.core.update.ppo_update` (one epoch, its own minibatch
generator); the stack does the same for all seeds at once. Parameters, Adam moments, value-norm
statistics and diagnostics must agree to 1e-5.
"""

from __future__ import annotations

import copy

import pytest
import torch

from marl_ppo.config import load_config
from marl_ppo.core.aggregate import AggregatedStep, clip_per_seed
from marl_ppo.core.seeds import SeedStack
from marl_ppo.core.update import ppo_update
from marl_ppo.run.build import build

SEEDS = 3
EPOCHS, MINIBATCH = 1, 16
BASE = ["env.num_envs=4", "env.max_steps=8", "model.hidden=[16, 16]", "train.num_threads=1"]
CASES = {
    "mappo": [],
    "ippo": ["loss.algorithm=ippo"],
    "unshared-ippo": ["loss.algorithm=ippo", "model.share_params=false"],
    "unshared-mappo": ["model.share_params=false"],
    "gru": ["model.kind=gru", "model.seq_len=4", "loss.value_norm=running"],
    "lstm-ippo": ["model.kind=lstm", "model.seq_len=4", "loss.algorithm=ippo"],
    "composite": ["env.scenario=simple_reference", "env.comm=true", "env.kwargs={}", "loss.entropy_coeff=0.01"],
    "masked-turns": [
        "env.kind=pettingzoo",
        "env.scenario=tictactoe_v3",
        "env.continuous_actions=false",
        "env.kwargs={}",
        "loss.entropy_coeff=0.01",
    ],
    "value-norm-running": ["loss.value_norm=running", "loss.normalize_advantage=true"],
    "two-groups": ["env.scenario=simple_tag", "env.kwargs={}", "loss.entropy_coeff=0.01"],
    "clipped-gradients": ["train.max_grad_norm=0.05"],
    "global-critic": ["env.scenario=simple_tag", "env.kwargs={}", "model.critic=global"],
    "bundled-groups": [
        "env.scenario=simple_tag",
        "env.kwargs={num_adversaries: 2, num_good_agents: 2}",
        "loss.bundle_groups=true",
    ],
}


def _seeds(case: str, seeds: int = SEEDS):
    """Each seed's parts (as its single run builds them) and a raw batch its policy collected, [envs, T]."""
    out = []
    for s in range(seeds):
        parts = build(load_config(None, overrides=[*BASE, *CASES[case], f"train.seed={s}"]))
        with torch.no_grad():
            batch = parts.reward_table(parts.env.rollout(8, parts.policy, break_when_any_done=False))
        parts.env.close()
        out.append((parts, batch))
    return out


def _single(parts, batch, s: int):
    """Seed s alone: its advantages, then an epoch of ppo_update with its own minibatch generator."""
    router = copy.deepcopy(parts.router)
    train = load_config(None, BASE).train
    step = AggregatedStep(router, lr=train.lr, max_grad_norm=train.max_grad_norm)
    batch = router.compute_advantages(batch.clone())
    generator = torch.Generator().manual_seed(1000 + s)
    seq_len = 4 if router.recurrent_keys else None
    stats = ppo_update(
        router, step, batch, num_epochs=EPOCHS, minibatch_size=MINIBATCH, generator=generator, seq_len=seq_len
    )
    return router, step, stats


def _stacked(runs):
    routers = [copy.deepcopy(parts.router) for parts, _ in runs]
    stack = SeedStack(routers)
    step = AggregatedStep(
        stack.trainable,
        lr=load_config(None, BASE).train.lr,
        max_grad_norm=load_config(None, BASE).train.max_grad_norm,
        seeds=stack.seeds,
    )
    batch = stack.compute_advantages(stack.split(torch.cat([b for _, b in runs])))  # [S * E, T] as collected
    generators = [torch.Generator().manual_seed(1000 + s) for s in range(len(runs))]
    seq_len = 4 if stack.template.recurrent_keys else None
    stats = ppo_update(
        stack, step, batch, num_epochs=EPOCHS, minibatch_size=MINIBATCH, generator=generators, seq_len=seq_len
    )
    return stack, step, stats


@pytest.mark.parametrize("case, seeds", [(c, SEEDS) for c in sorted(CASES)] + [("mappo", 1)])
def test_each_seed_updates_as_its_single_run(case, seeds):
    """(One seed stores the single run's own tensors: no stacking, no vmap; its stats still come ``[1]``.)"""
    runs = _seeds(case, seeds)
    stack, step, stats = _stacked(runs)
    for s, (parts, batch) in enumerate(runs):
        router, single_step, single_stats = _single(parts, batch, s)
        want, got = router.state_dict(), stack.state_dict(s)
        assert sorted(want) == sorted(got)
        moved = 0
        for key, value in want.items():
            torch.testing.assert_close(got[key], value, rtol=0, atol=1e-5, msg=f"seed {s}: {key}")
            moved += int(not torch.equal(value, parts.router.state_dict()[key]))
        assert moved > 4, "the update moved (almost) nothing: the comparison would prove little"
        for p_single, p_stacked in zip(single_step.params, step.params, strict=True):
            m_single, m_stacked = single_step.optimizer.state[p_single], step.optimizer.state[p_stacked]
            for moment in ("exp_avg", "exp_avg_sq"):
                torch.testing.assert_close(_of(m_stacked[moment], s, seeds, True), m_single[moment], rtol=0, atol=1e-5)
        for key in single_stats.keys(include_nested=True, leaves_only=True):
            got = _of(stats.get(key), s, seeds)
            torch.testing.assert_close(got, single_stats.get(key), rtol=1e-4, atol=1e-5, msg=str(key))


def _of(value: torch.Tensor, s: int, seeds: int, stored: bool = False) -> torch.Tensor:
    """Seed s's slice of a value ``[S, ...]``; a stored tensor (a parameter's Adam moment) of one seed is the
    router's own, unstacked."""
    return value if stored and seeds == 1 else value[s]


@pytest.mark.parametrize("change", ["nan", "scaled"])
def test_changing_one_seeds_data_leaves_every_other_seed_exactly_as_it_was(change):
    """A NaN observation stops seed 0 alone (its last good state kept); observations 10x larger change seed 0 alone."""
    runs = _seeds("mappo")
    clean_stack, _, _ = _stacked(runs)
    changed = [(parts, batch.clone()) for parts, batch in runs]
    obs = changed[0][1]["agents", "observation"]  # seed 0's data only
    if change == "nan":
        obs[0, 3] = float("nan")
    else:
        obs.mul_(10.0)
    stack, step, _ = _stacked(changed)
    before = runs[0][0].router.state_dict()
    if change == "nan":
        assert step.alive.tolist() == [False, True, True] and 0 in step.failures
        for key, value in stack.state_dict(0).items():  # seed 0 kept its last good (here: initial) parameters
            assert torch.equal(value, before[key]), key
    else:
        assert step.alive.all()
        clean = clean_stack.state_dict(0)
        assert any(not torch.equal(v, clean[k]) for k, v in stack.state_dict(0).items())
    for s in (1, 2):
        clean = clean_stack.state_dict(s)
        for key, value in stack.state_dict(s).items():
            assert torch.equal(value, clean[key]), f"seed {s}: {key}"


def test_one_seeds_clip_does_not_scale_anothers_gradient():
    """Seed 0's gradient 1000 times larger is clipped; seed 1's, small, is left exactly as it is."""
    a = torch.nn.Parameter(torch.zeros(2, 3))
    b = torch.nn.Parameter(torch.zeros(2, 4))
    a.grad = torch.stack([torch.full((3,), 1000.0), torch.full((3,), 1e-3)])
    b.grad = torch.stack([torch.full((4,), 1000.0), torch.full((4,), 2e-3)])
    small = (a.grad[1].clone(), b.grad[1].clone())
    norms = clip_per_seed([a, b], 1.0, 2)
    torch.testing.assert_close(norms, torch.tensor([1000.0 * 7**0.5, (3e-6 + 4 * 4e-6) ** 0.5]))
    assert torch.equal(a.grad[1], small[0]) and torch.equal(b.grad[1], small[1])
    clipped = torch.cat([a.grad[0], b.grad[0]]).norm()
    assert abs(clipped.item() - 1.0) < 1e-5
    # the same as torch's clip of seed 0 alone
    x = torch.nn.Parameter(torch.zeros(3))
    y = torch.nn.Parameter(torch.zeros(4))
    x.grad, y.grad = torch.full((3,), 1000.0), torch.full((4,), 1000.0)
    torch.nn.utils.clip_grad_norm_([x, y], 1.0)
    torch.testing.assert_close(a.grad[0], x.grad, rtol=1e-6, atol=1e-9)  # two code paths: to rounding
    torch.testing.assert_close(b.grad[0], y.grad, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize(
    "overrides, words",
    [
        (["loss.value_norm=popart"], ["popart"]),
    ],
)
def test_what_cannot_be_stacked_yet_is_refused_with_the_reason(overrides, words):
    routers = [build(load_config(None, overrides=["env.num_envs=2", *overrides])).router for _ in range(2)]
    with pytest.raises(ValueError, match="many seeds in one process do not support") as err:
        SeedStack(routers)
    for word in words:
        assert word in str(err.value)
