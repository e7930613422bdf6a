"""Composite (hybrid) actions: per-head log-probs, the joint per-agent ratio, per-head diagnostics
and entropy coefficients, the VMAS comm adapter, and learning on a hybrid-action task."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from torchrl.collectors import Collector
from torchrl.envs import TransformedEnv
from torchrl.envs.libs.vmas import VmasEnv

from marl_ppo import AggregatedStep, GroupRouter, RewardTable, read_group_specs
from marl_ppo.core.update import ppo_update
from marl_ppo.envs.comm import CommAdapter
from marl_ppo.envs.toy import HybridTargetEnv
from marl_ppo.models.distributions import StableTanhNormal


def _toy_setup(num_envs=8, steps=6, **router_kwargs):
    torch.manual_seed(0)
    env = HybridTargetEnv(num_envs=num_envs, n_agents=2, n_symbols=3, max_steps=steps, seed=0)
    groups = read_group_specs(env)
    table = RewardTable.own_rewards(groups).bind(groups, env)
    router = GroupRouter.from_specs(groups, hidden=(32,), **router_kwargs)
    with torch.no_grad():
        batch = table(env.rollout(steps, router.policy, break_when_any_done=False))
    router.compute_advantages(batch)
    return env, groups, router, batch


def test_per_head_log_probs_match_torch_distributions():
    _, _, router, batch = _toy_setup()
    actor = router.losses["agents"].actor_network
    params = actor.get_dist_params(batch.clone())
    p = params.get(("agents", "params"))
    move = batch.get(("agents", "action", "move"))
    choice = batch.get(("agents", "action", "choice"))
    # hand computation with torch.distributions
    loc, scale = p.get(("move", "loc")), p.get(("move", "scale"))
    base = torch.distributions.Normal(loc, scale)
    pre = torch.atanh(move.clamp(-1 + 1e-6, 1 - 1e-6))
    lp_move = (base.log_prob(pre) - torch.log1p(-move.pow(2) + 1e-12)).sum(-1)
    lp_choice = torch.distributions.Categorical(logits=p.get(("choice", "logits"))).log_prob(choice)
    dist = actor.get_dist(batch.clone())
    lp = dist.log_prob(batch.select(("agents", "action", "move"), ("agents", "action", "choice")))
    torch.testing.assert_close(lp.get(("agents", "action", "choice_log_prob")), lp_choice)
    torch.testing.assert_close(lp.get(("agents", "action", "move_log_prob")), lp_move, atol=2e-3, rtol=1e-3)
    # the stored log-probs are those of the acting policy (same parameters, no update yet)
    torch.testing.assert_close(batch.get(("agents", "action", "choice_log_prob")), lp_choice)


def test_ratio_is_exp_of_summed_head_log_ratios_per_agent():
    _, _, router, batch = _toy_setup()
    flat = batch.reshape(-1)
    step = AggregatedStep(router, lr=1e-2)
    step(router(flat))  # move the policy away from the behaviour policy
    loss = router.losses["agents"]
    out = loss(flat)
    dist = loss.actor_network.get_dist(flat.clone())
    lp = dist.log_prob(flat.select(("agents", "action", "move"), ("agents", "action", "choice")))
    log_ratio = sum(
        lp.get(("agents", "action", f"{h}_log_prob")) - flat.get(("agents", "action", f"{h}_log_prob"))
        for h in ("move", "choice")
    )  # [N, n_agents]: one joint ratio per agent and sample, not summed across agents
    assert log_ratio.shape == flat.get("agents").batch_size
    ratio = log_ratio.exp().detach()
    torch.testing.assert_close(out["mean_ratio"], ratio.mean(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(out["max_ratio"], ratio.max(), rtol=1e-5, atol=1e-6)


def test_per_head_diagnostics_are_detached_scalars_and_distinct_per_head():
    _, _, router, batch = _toy_setup(entropy_coeff=0.01)
    losses = router(batch)
    for head in ("move", "choice"):
        for name in ("entropy", "log_ratio", "kl_approx", "clip_fraction"):
            value = losses["agents", head, name]
            assert value.shape == () and not value.requires_grad, (head, name)
    assert "clip_fraction" in losses["agents"].keys()  # the joint clip fraction stays beside the heads
    assert losses["agents", "move", "entropy"] != losses["agents", "choice", "entropy"]
    # before any update the policy is the behaviour policy: log-ratios are ~0
    assert abs(losses["agents", "choice", "log_ratio"].item()) < 1e-5


def test_per_head_entropy_coefficients_give_expected_loss_entropy():
    coeffs = {"move": 0.003, "choice": 0.05}
    _, _, router, batch = _toy_setup(head_entropy_coeff=coeffs)
    losses = router(batch)
    expected = -(
        coeffs["move"] * losses["agents", "move", "entropy"] + coeffs["choice"] * losses["agents", "choice", "entropy"]
    )
    torch.testing.assert_close(losses["agents", "loss_entropy"], expected, atol=1e-6, rtol=0)
    # a schedule's value, passed with the call, scales every coefficient of that call only
    half = router(batch, torch.tensor(0.5))["agents", "loss_entropy"]
    torch.testing.assert_close(half, expected * 0.5, atol=1e-6, rtol=0)
    torch.testing.assert_close(router(batch)["agents", "loss_entropy"], expected, atol=1e-6, rtol=0)
    assert router.losses["agents"].head_entropy_coeffs.tolist() == pytest.approx([0.003, 0.05])  # untouched


def test_unknown_head_name_names_the_known_heads():
    with pytest.raises(KeyError, match=r"unknown head.*'comm'.*known heads: move.*choice"):
        _toy_setup(head_entropy_coeff={"comm": 0.01})


def test_tanh_normal_entropy_is_stable():
    d = StableTanhNormal(torch.randn(64, 2), torch.rand(64, 2) + 0.1)
    assert torch.equal(d.entropy(), d.entropy())


def test_head_name_collision_is_kept_apart():
    """("move-x", "entropy") and ("move", "x", "entropy") must stay distinct metric names."""
    from torchrl.data import Bounded, Categorical, Composite

    from marl_ppo.groups import GroupSpec
    from marl_ppo.models import build_actor, build_critic

    B, n = 3, 2
    action = Composite(
        {"move-x": Bounded(-1, 1, shape=(B, n, 1)), "move": Composite(x=Categorical(3, shape=(B, n)), shape=(B, n))},
        shape=(B, n),
    )
    spec = GroupSpec("g", ("a", "b"), (("g", "observation"),), action, 1, ("g", "reward"), observation_shape=(n, 4))
    router = GroupRouter({"g": spec}, {"g": build_actor(spec, hidden=(8,))}, {"g": build_critic(spec, hidden=(8,))})
    td = TensorDict({"g": TensorDict({"observation": torch.randn(B, 5, n, 4)}, [B, 5, n])}, [B, 5])
    with torch.no_grad():
        td = router.policy(td)
    nxt = td.clone()
    nxt.set(("g", "train_reward"), torch.randn(B, 5, n, 1))
    nxt.set(("g", "train_done"), torch.zeros(B, 5, n, 1, dtype=torch.bool))
    nxt.set(("g", "train_terminated"), torch.zeros(B, 5, n, 1, dtype=torch.bool))
    td.set("next", nxt)
    router.compute_advantages(td)
    losses = router(td)
    names = {"/".join(k) for k in losses["g"].keys(include_nested=True, leaves_only=True)}
    assert {"move-x/entropy", "move/x/entropy"} <= names
    assert losses["g", "move-x", "entropy"] != losses["g", "move", "x", "entropy"]


def test_head_name_that_would_collide_is_refused():
    from torchrl.data import Bounded, Composite

    from marl_ppo.groups import GroupSpec
    from marl_ppo.models import build_actor, build_critic

    action = Composite({"entropy": Bounded(-1, 1, shape=(3, 2, 1))}, shape=(3, 2))
    spec = GroupSpec("g", ("a", "b"), (("g", "observation"),), action, 1, ("g", "reward"), observation_shape=(2, 4))
    with pytest.raises(ValueError, match="colliding"):
        GroupRouter({"g": spec}, {"g": build_actor(spec, hidden=(8,))}, {"g": build_critic(spec, hidden=(8,))})


def test_comm_adapter_packs_move_and_one_hot_comm():
    base = VmasEnv("simple_speaker_listener", num_envs=2, continuous_actions=True, seed=0)
    adapter = CommAdapter.for_env(base)
    assert adapter.comm_groups == {"speaker": (2, 3)}
    env = TransformedEnv(base, adapter)
    td = env.reset()
    td.set(
        ("speaker", "action"),
        TensorDict({"move": torch.full((2, 1, 2), 0.5), "comm": torch.tensor([[2], [0]])}, [2, 1]),
    )
    td.set(("listener", "action"), torch.zeros(2, 1, 2))
    packed = adapter.inv(td.clone())
    assert torch.equal(packed["speaker", "action"], torch.tensor([[[0.5, 0.5, 0, 0, 1]], [[0.5, 0.5, 1, 0, 0]]]))
    assert set(td["speaker", "action"].keys()) == {"move", "comm"}  # the caller's data is not modified


def test_composite_and_plain_groups_train_in_one_step_on_real_env():
    torch.manual_seed(0)
    base = VmasEnv("simple_speaker_listener", num_envs=8, continuous_actions=True, seed=0, max_steps=10)
    env = TransformedEnv(base, CommAdapter.for_env(base))
    groups = read_group_specs(env)
    assert groups["speaker"].is_composite_action and not groups["listener"].is_composite_action
    table = RewardTable.own_rewards(groups).bind(groups, env)
    router = GroupRouter.from_specs(groups, hidden=(32,), head_entropy_coeff={"comm": 0.01})
    step = AggregatedStep(router, lr=1e-3)
    with torch.no_grad():
        batch = table(env.rollout(10, router.policy, break_when_any_done=False))
    router.compute_advantages(batch)
    before = {k: v.clone() for k, v in router.state_dict().items() if "actor" in k or "critic" in k}
    out = step(router(batch.reshape(-1)))
    assert torch.isfinite(out["loss"])
    after = router.state_dict()
    for g in groups:
        changed = [k for k in before if k.startswith(f"losses.{g}.") and not torch.equal(before[k], after[k])]
        assert changed, f"group {g} did not change"


@pytest.mark.slow
def test_learns_hybrid_action_task():
    """On the hybrid {move, choice} toy task the return rises well above a random policy's."""
    torch.manual_seed(0)
    env = HybridTargetEnv(num_envs=32, n_agents=2, n_symbols=3, max_steps=10, seed=0)
    groups = read_group_specs(env)
    table = RewardTable.own_rewards(groups).bind(groups, env)
    router = GroupRouter.from_specs(groups, hidden=(64, 64), head_entropy_coeff={"choice": 0.01}, gamma=0.9)
    step = AggregatedStep(router, lr=3e-3)
    collector = Collector(env, router.policy, frames_per_batch=640, total_frames=640 * 25)
    rewards = []
    for batch in collector:
        batch = table(batch)
        rewards.append(batch.get(("next", "agents", "reward")).mean().item())
        router.compute_advantages(batch)
        ppo_update(router, step, batch, num_epochs=4, minibatch_size=160)
        collector.update_policy_weights_()
    collector.shutdown()
    random_level = 1 / 3 - 0.6  # expected reward per step of a uniform policy
    assert rewards[0] < random_level + 0.15
    assert sum(rewards[-3:]) / 3 > random_level + 0.6, rewards


def test_vmas_multidiscrete_actions_get_a_multicategorical_head():
    from marl_ppo.models import action_heads
    from marl_ppo.models.distributions import MultiCategorical

    torch.manual_seed(0)
    env = VmasEnv(
        "navigation", num_envs=4, continuous_actions=False, multidiscrete_actions=True, n_agents=2, seed=0, max_steps=6
    )
    groups = read_group_specs(env)
    (head,) = action_heads(groups["agents"])
    assert head.dist_class is MultiCategorical and head.dist_kwargs["nvec"] == [3, 3]
    table = RewardTable.own_rewards(groups).bind(groups, env)
    router = GroupRouter.from_specs(groups, hidden=(16,))
    with torch.no_grad():
        batch = table(env.rollout(6, router.policy, break_when_any_done=False))
    assert batch["agents", "action"].shape == (4, 6, 2, 2)
    assert batch["agents", "action_log_prob"].shape == (4, 6, 2)
    router.compute_advantages(batch)
    assert torch.isfinite(AggregatedStep(router, lr=1e-3)(router(batch))["loss"])


@pytest.mark.parametrize("composite", [False, True], ids=["plain", "composite"])
def test_policy_samples_outside_a_collector_and_gives_the_mode_when_asked(composite):
    # a plain env.rollout(policy) must explore: PPO on rollouts of the mode silently stops learning
    from torchrl.envs import ExplorationType, set_exploration_type

    env = HybridTargetEnv(num_envs=16, seed=0) if composite else VmasEnv("navigation", num_envs=16, seed=0)
    groups = read_group_specs(env)
    router = GroupRouter.from_specs(groups, hidden=(16,))
    group = next(iter(groups))
    td = env.reset()
    with torch.no_grad():
        sampled = [router.policy(td.clone()).get((group, "action")) for _ in range(2)]
        with set_exploration_type(ExplorationType.DETERMINISTIC):
            modes = [router.policy(td.clone()).get((group, "action")) for _ in range(2)]
    leaves = lambda a: list(a.values(True, True)) if isinstance(a, TensorDict) else [a]  # noqa: E731
    assert all(not torch.equal(x, y) for x, y in zip(leaves(sampled[0]), leaves(sampled[1])) if x.is_floating_point())
    assert all(torch.equal(x, y) for x, y in zip(leaves(modes[0]), leaves(modes[1])))
