"""Value normalisation (``loss.value_norm``): known answers for the statistics, the de-normalised
values GAE sees, the normalised critic loss, and PopArt's preserved outputs. Real VMAS data."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close
from torchrl.envs.libs.vmas import VmasEnv

from marl_ppo import GroupRouter, RewardTable, read_group_specs
from marl_ppo.config import ModelConfig
from marl_ppo.models.critic import value_norms

T = 10


def _setup(value_norm: str, *, critic: str = "group", seed: int = 0, scenario: str = "simple_tag"):
    torch.manual_seed(seed)
    env = VmasEnv(scenario, num_envs=6, continuous_actions=True, seed=seed, max_steps=T)
    groups = read_group_specs(env)
    table = RewardTable.own_rewards(groups).bind(groups, env)
    router = GroupRouter.from_specs(
        groups, value_norm=value_norm, model=ModelConfig(hidden=[32, 32], critic=critic), gamma=0.9, lmbda=0.8
    )
    return env, groups, table, router


def _batch(env, table, router):
    with torch.no_grad():
        return table(env.rollout(T, router.policy, break_when_any_done=False))


def _hand_gae(reward, value, next_value, done, terminated, gamma, lmbda):
    """GAE by its definition, time on dim 1: [B, T, n, 1] tensors."""
    adv = torch.zeros_like(value)
    running = torch.zeros_like(value[:, 0])
    for t in reversed(range(value.shape[1])):
        delta = reward[:, t] + gamma * next_value[:, t] * (~terminated[:, t]) - value[:, t]
        running = delta + gamma * lmbda * (~done[:, t]) * running
        adv[:, t] = running
    return adv


@pytest.mark.parametrize("kind", ["running", "popart"])
def test_statistics_are_those_of_the_batch_targets(kind):
    env, groups, table, router = _setup(kind)
    batches = []
    for _ in range(2):
        batch = router.compute_advantages(_batch(env, table, router))
        batches.append(batch)
    for g in groups:
        norm, _ = router._value_norms[g]
        targets = [b.get(groups[g].keys.value_target).reshape(-1, 1) for b in batches]
        if kind == "running":  # Welford over both batches = the statistics of their union
            union = torch.cat(targets)
            assert_close(norm.mean, union.mean(0))
            assert_close(norm._var(), union.var(0, unbiased=False).clamp(min=norm.epsilon))
            assert float(norm.count) == union.shape[0]
        else:  # the debiased EMA of the two batch means with decay beta
            beta = norm.beta
            means = [t.mean(0) for t in targets]
            expected = ((1 - beta) * beta * means[0] + (1 - beta) * means[1]) / ((1 - beta) * beta + (1 - beta))
            assert_close(norm.denormalize(torch.zeros(1)), expected, rtol=1e-4, atol=1e-5)


def test_gae_sees_denormalised_values():
    env, groups, table, router = _setup("running")
    g = "adversary"
    norm, _ = router._value_norms[g]
    with torch.no_grad():  # statistics mean 5, std 2; the network outputs 0.25 everywhere
        norm.mean.fill_(5.0), norm.m2.fill_(4.0), norm.count.fill_(1.0)
        last = router.losses[g].critic_network.module.net.net[-1]
        last.weight.zero_(), last.bias.fill_(0.25)
    batch = _batch(env, table, router)
    keys = groups[g].keys
    before = norm.mean.clone(), norm._var().clone()
    router.compute_advantages(batch)
    value = batch.get(keys.value)
    assert_close(value, torch.full_like(value, 0.25 * 2 + 5))
    nxt = batch.get("next")
    expected = _hand_gae(
        nxt.get(keys.reward),
        value,
        torch.full_like(value, 5.5),
        nxt.get(keys.done).expand_as(value),
        nxt.get(keys.terminated).expand_as(value),
        0.9,
        0.8,
    )
    assert_close(batch.get(keys.advantage), expected)
    assert_close(batch.get(keys.value_target), expected + value)
    assert not torch.equal(norm.mean, before[0]), "the statistics take in the batch's targets"


def test_critic_loss_compares_normalised_targets_and_predictions():
    env, groups, table, router = _setup("running")
    batch = router.compute_advantages(_batch(env, table, router))
    losses = router(batch)
    for g in groups:
        keys = groups[g].keys
        norm, _ = router._value_norms[g]
        critic = router.losses[g].critic_network
        net_out = critic.module.net(batch.get(groups[g].observation_keys[0]))
        expected = ((norm.normalize(batch.get(keys.value_target)) - net_out) ** 2).mean()
        assert_close(losses[g, "loss_critic"], expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kind, bounded", [("running", True), ("popart", True), ("none", False)])
def test_large_reward_offset_keeps_the_critic_loss_order_one(kind, bounded):
    env, groups, table, router = _setup(kind)
    for _ in range(2):  # the second batch: statistics from the first
        batch = _batch(env, table, router)
        for g in groups:
            key = ("next", *groups[g].keys.reward)
            batch.set(key, batch.get(key) + 100.0)
        router.compute_advantages(batch)
    loss = max(float(router(batch)[g, "loss_critic"].detach()) for g in groups)
    if bounded:
        assert loss < 5.0, f"normalised critic loss {loss} with rewards offset by 100"
    else:
        assert loss > 1e4, f"raw critic loss {loss}: the offset should dominate without normalisation"


def test_popart_preserves_the_values_when_the_statistics_move():
    env, groups, table, router = _setup("popart")
    router.compute_advantages(_batch(env, table, router))  # first update: statistics from nothing
    batch = _batch(env, table, router)
    with torch.no_grad():
        before = {
            g: router.losses[g]
            .critic_network(batch.select(groups[g].observation_keys[0]))
            .get(groups[g].keys.value)
            .clone()
            for g in groups
        }
    stats_before = {g: router._value_norms[g][0].denormalize(torch.zeros(1)).clone() for g in groups}
    router.compute_advantages(batch)
    for g in groups:
        with torch.no_grad():
            after = (
                router.losses[g].critic_network(batch.select(groups[g].observation_keys[0])).get(groups[g].keys.value)
            )
        assert not torch.allclose(router._value_norms[g][0].denormalize(torch.zeros(1)), stats_before[g])
        assert_close(after, before[g], rtol=1e-4, atol=1e-4)


def test_running_rescales_the_network_output_with_the_new_statistics():
    """Without PopArt the network is left alone: its output maps to values through the new statistics."""
    env, groups, table, router = _setup("running", scenario="navigation")  # dense rewards
    router.compute_advantages(_batch(env, table, router))
    batch = _batch(env, table, router)
    g, key = "agents", groups["agents"].observation_keys[0]
    norm = router._value_norms[g][0]
    with torch.no_grad():
        before = router.losses[g].critic_network(batch.select(key)).get(groups[g].keys.value).clone()
        mean, std = norm.mean.clone(), norm.scale().clone()
        router.compute_advantages(batch)
        after = router.losses[g].critic_network(batch.select(key)).get(groups[g].keys.value)
    assert not torch.equal(norm.scale(), std)
    assert_close(after, (before - mean) / std * norm.scale() + norm.mean, rtol=1e-4, atol=1e-6)


@pytest.mark.slow
def test_statistics_are_in_the_state_dict_and_global_critic_keeps_one_per_group():
    _, groups, _, router = _setup("running", critic="global")
    norms = value_norms(router.losses["agent"].critic_network)
    assert set(norms) == set(groups) and norms["agent"][0] is not norms["adversary"][0]
    names = [k for k in router.state_dict() if k.endswith("norms.agent.mean")]
    assert names, "the normaliser's statistics are checkpointed with the router"
