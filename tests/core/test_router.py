"""Tests for :mod:`marl_ppo.core.router` and :mod:`marl_ppo.core.aggregate`: one PPO loss per group, one step.

Covered:

* GAE known answer per group: critics whose last layer is zeroed (values exactly 0), a terminal
  reward ``r`` at the end of each episode -> advantage ``(gamma*lmbda)^(end-t) * r`` and value
  target equal to it, for two groups with different rewards and agent counts, each under its own
  keys (and a mid-batch done that cuts the trace);
* gradient isolation between groups that share nothing;
* a critic network shared by two groups: its parameters appear once in the optimizer and its
  gradient from the aggregated loss is the sum of both groups' gradients; the documented
  "same critic object for several groups" usage;
* one :class:`AggregatedStep` changes every group's parameters;
* the known torchrl traps: (1) an advantage without trailing 1 is rejected, (2) loss keys are
  namespaced under the group, (3) diagnostics are detached scalars, (5) parameters shared between
  losses are listed once;
* ``total_loss`` with per-group weights, and its unknown-group error;
* end to end on real VMAS scenarios: heterogeneous ``simple_tag`` (adversary x3 + agent x1) and
  homogeneous ``navigation`` (3 agents).

Synthetic groups are plain :class:`GroupSpec` objects with a ``Bounded`` 2-d action and a flat
observation, so every batch entry is under the test's control.
"""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch.testing import assert_close
from torchrl.data import Bounded

from marl_ppo import RewardTable, own, read_group_specs, team
from marl_ppo.core.aggregate import AggregatedStep, total_loss, unique_parameters
from marl_ppo.core.router import GroupRouter
from marl_ppo.groups import GroupKeys, GroupSpec
from marl_ppo.models import build_actor, build_critic

GAMMA, LMBDA = 0.9, 0.8
B, T = 2, 5
HIDDEN = (32,)


# -- helpers ----------------------------------------------------------------------------------------


def make_spec(name: str, n: int, obs_dim: int) -> GroupSpec:
    return GroupSpec(
        name=name,
        agents=tuple(f"{name}_{i}" for i in range(n)),
        observation_keys=((name, "observation"),),
        action_spec=Bounded(-1.0, 1.0, shape=(n, 2)),
        env_batch_ndim=0,
        raw_reward_key=(name, "reward"),
        observation_shape=(n, obs_dim),
    )


def zero_last_layer(critic: TensorDictModule) -> None:
    """Zeroes the weight and bias of the critic MLP's output layer: every value is then exactly 0."""
    named = list(critic.named_parameters())
    last = named[-1][0].rsplit(".", 1)[0]
    zeroed = 0
    with torch.no_grad():
        for name, p in named:
            if name.rsplit(".", 1)[0] == last:
                p.zero_()
                zeroed += 1
    assert zeroed == 2


def make_router(groups, *, share_critic=None, zero_critics=False, **kwargs) -> GroupRouter:
    """Actors and critics built from the specs; ``share_critic=(a, b)`` makes b reuse a's critic network."""
    actors = {g: build_actor(s, hidden=HIDDEN) for g, s in groups.items()}
    critics = {g: build_critic(s, hidden=HIDDEN) for g, s in groups.items()}
    if share_critic is not None:
        a, b = share_critic
        critics[b] = TensorDictModule(
            critics[a].module, in_keys=list(groups[b].observation_keys), out_keys=[groups[b].keys.value]
        )
    if zero_critics:
        for c in critics.values():
            zero_last_layer(c)
    kwargs.setdefault("gamma", GAMMA)
    kwargs.setdefault("lmbda", LMBDA)
    return GroupRouter(groups, actors, critics, **kwargs)


def make_batch(groups, router, rewards=None, dones=None) -> TensorDict:
    """A [B, T] rollout-shaped batch: observations (root and "next"), policy actions and log-probs,
    and the routed training reward/done set by hand (``rewards[g]``/``dones[g]``: [B, T] per env)."""
    root, nxt = {}, {}
    for g, s in groups.items():
        n, obs_dim = s.observation_shape
        seq = torch.randn(B, T + 1, n, obs_dim)
        root[g] = TensorDict({"observation": seq[:, :-1]}, [B, T, n])
        r = torch.randn(B, T) if rewards is None else rewards[g]
        d = torch.zeros(B, T, dtype=torch.bool) if dones is None else dones[g]
        d = d.clone()
        d[:, -1] = True
        nxt[g] = TensorDict(
            {
                "observation": seq[:, 1:],
                "train_reward": r[:, :, None, None].expand(B, T, n, 1).clone(),
                "train_done": d[:, :, None, None].expand(B, T, n, 1).clone(),
                "train_terminated": d[:, :, None, None].expand(B, T, n, 1).clone(),
            },
            [B, T, n],
        )
    td = TensorDict({**root, "next": TensorDict(nxt, [B, T])}, [B, T])
    with torch.no_grad():
        router.policy(td)
    return td


def module_params(router: GroupRouter, group: str) -> dict[str, list[torch.nn.Parameter]]:
    loss = router.losses[group]
    return {"actor": list(loss.actor_network.parameters()), "critic": list(loss.critic_network.parameters())}


def group_loss(losses: TensorDict, group: str) -> torch.Tensor:
    return total_loss(losses.select(group))


def nonzero(grad: torch.Tensor | None) -> bool:
    return grad is not None and bool(grad.abs().sum() > 0)


@pytest.fixture
def two_groups():
    return {"A": make_spec("A", 2, 4), "B": make_spec("B", 3, 5)}


@pytest.fixture
def same_shape_groups():
    return {"A": make_spec("A", 2, 4), "B": make_spec("B", 2, 4)}


# -- GAE known answer ---------------------------------------------------------------------------------


def test_gae_known_answer_per_group(two_groups):
    router = make_router(two_groups, zero_critics=True)
    rewards = {"A": torch.zeros(B, T), "B": torch.zeros(B, T)}
    dones = {"A": torch.zeros(B, T, dtype=torch.bool), "B": torch.zeros(B, T, dtype=torch.bool)}
    rewards["A"][:, -1] = 1.0
    rewards["B"][:, -1] = -2.0
    # env 1 of group A: an episode ends at t=2 with reward 0.5, a new one runs to the end
    rewards["A"][1, 2] = 0.5
    dones["A"][1, 2] = True
    batch = make_batch(two_groups, router, rewards, dones)
    # the zeroed critics really output 0
    with torch.no_grad():
        for g in two_groups:
            assert torch.equal(
                router.losses[g].critic_network(batch.clone())[g, "state_value"],
                torch.zeros(B, T, two_groups[g].n_agents, 1),
            )

    router.compute_advantages(batch)

    c = GAMMA * LMBDA
    t = torch.arange(T, dtype=torch.float32)
    expected = {
        "A": torch.stack([1.0 * c ** (T - 1 - t), torch.where(t <= 2, 0.5 * c ** (2 - t), 1.0 * c ** (T - 1 - t))]),
        "B": torch.stack([-2.0 * c ** (T - 1 - t)] * B),
    }
    for g, spec in two_groups.items():
        n = spec.n_agents
        adv, target = batch[g, "advantage"], batch[g, "value_target"]
        assert adv.shape == target.shape == (B, T, n, 1)
        want = expected[g][:, :, None, None].expand(B, T, n, 1)
        assert_close(adv, want, rtol=1e-5, atol=1e-6)
        assert_close(target, want, rtol=1e-5, atol=1e-6)
    # the two groups' results sit under their own keys and were not overwritten by each other
    assert (batch["A", "advantage"] > 0).all() and (batch["B", "advantage"] < 0).all()


def test_compute_advantages_needs_the_routed_reward(two_groups):
    router = make_router(two_groups)
    batch = make_batch(two_groups, router)
    del batch["next", "B", "train_done"]
    with pytest.raises(KeyError, match=r"group 'B'.*train_done.*reward table"):
        router.compute_advantages(batch)


def test_compute_advantages_rejects_reward_without_trailing_one(two_groups):
    router = make_router(two_groups)
    batch = make_batch(two_groups, router)
    r = batch["next", "A", "train_reward"].squeeze(-1)
    del batch["next", "A", "train_reward"]
    batch["next", "A", "train_reward"] = r
    with pytest.raises(ValueError, match=r"group 'A'.*train_reward.*trailing 1"):
        router.compute_advantages(batch)


# -- gradients -----------------------------------------------------------------------------------------


def test_no_shared_modules_no_gradient_across_groups(two_groups):
    router = make_router(two_groups)
    batch = router.compute_advantages(make_batch(two_groups, router))
    router.zero_grad(set_to_none=True)
    group_loss(router(batch), "A").backward()
    for kind, params in module_params(router, "A").items():
        assert params
        assert all(nonzero(p.grad) for p in params), f"A's {kind} has a parameter without gradient"
    for kind, params in module_params(router, "B").items():
        assert params
        for p in params:
            assert p.grad is None or torch.equal(p.grad, torch.zeros_like(p)), f"B's {kind} got gradient from A"


def test_shared_critic_listed_once_and_gets_gradient_from_both(same_shape_groups):
    router = make_router(same_shape_groups, share_critic=("A", "B"))
    critic = module_params(router, "A")["critic"]
    assert [id(p) for p in critic] == [id(p) for p in module_params(router, "B")["critic"]]

    step = AggregatedStep(router, lr=1e-3)
    ids = [id(p) for p in step.params]
    assert len(ids) == len(set(ids))
    opt_ids = [id(p) for group in step.optimizer.param_groups for p in group["params"]]
    assert sorted(opt_ids) == sorted(ids)
    for p in critic:
        assert ids.count(id(p)) == 1 and opt_ids.count(id(p)) == 1
    n_actor = len(module_params(router, "A")["actor"]) + len(module_params(router, "B")["actor"])
    assert len(ids) == n_actor + len(critic)

    batch = router.compute_advantages(make_batch(same_shape_groups, router))
    losses = router(batch)
    grad_a = torch.autograd.grad(group_loss(losses, "A"), critic, retain_graph=True)
    grad_b = torch.autograd.grad(group_loss(losses, "B"), critic, retain_graph=True)
    step.optimizer.zero_grad(set_to_none=True)
    total_loss(losses).backward()
    for p, ga, gb in zip(critic, grad_a, grad_b):
        assert nonzero(ga) and nonzero(gb)
        assert not torch.allclose(ga, gb)
        assert_close(p.grad, ga + gb)


def test_same_critic_object_can_serve_two_groups(same_shape_groups):
    """GroupRouter's docstring: "The same critic object may serve several groups: its parameters
    are then trained by all of them." Each group's value must come from its own observations."""
    groups = same_shape_groups
    actors = {g: build_actor(s, hidden=HIDDEN) for g, s in groups.items()}
    critic = build_critic(groups["A"], hidden=HIDDEN)
    router = GroupRouter(groups, actors, {"A": critic, "B": critic}, gamma=GAMMA, lmbda=LMBDA)
    batch = router.compute_advantages(make_batch(groups, router))
    with torch.no_grad():
        for g in groups:
            values = critic.module(batch[g, "observation"])
            next_values = critic.module(batch["next", g, "observation"])
            # GAE: value_target - advantage is the value of the group's own observation
            assert_close(batch[g, "value_target"] - batch[g, "advantage"], values)
            assert next_values.shape == values.shape
    params = AggregatedStep(router).params
    for p in critic.parameters():
        assert sum(q is p for q in params) == 1
    router.zero_grad(set_to_none=True)
    total_loss(router(batch)).backward()
    assert all(nonzero(p.grad) for p in critic.parameters())


def test_aggregated_step_changes_every_group(two_groups):
    router = make_router(two_groups)
    batch = router.compute_advantages(make_batch(two_groups, router))
    before = {
        g: {k: [p.detach().clone() for p in ps] for k, ps in module_params(router, g).items()} for g in two_groups
    }
    out = AggregatedStep(router, lr=1e-3)(router(batch))
    assert torch.isfinite(out["loss"]) and torch.isfinite(out["grad_norm"])
    assert not out["loss"].requires_grad
    for g in two_groups:
        for kind, params in module_params(router, g).items():
            for old, new in zip(before[g][kind], params):
                assert not torch.equal(old, new), f"{g}'s {kind} did not change"


# -- known traps ----------------------------------------------------------------------------------------


def test_trap1_advantage_without_trailing_one_is_rejected(two_groups):
    router = make_router(two_groups)
    batch = router.compute_advantages(make_batch(two_groups, router))
    adv = batch["B", "advantage"].squeeze(-1)  # [B, T, n]
    del batch["B", "advantage"]
    batch["B", "advantage"] = adv
    with pytest.raises(ValueError, match=r"group 'B'.*advantage.*trailing 1"):
        router(batch)


def test_trap2_loss_keys_are_namespaced_per_group(two_groups):
    router = make_router(two_groups)
    for g, loss in router.losses.items():
        keys = loss.tensor_keys
        assert keys.advantage == (g, "advantage")
        assert keys.value_target == (g, "value_target")
        assert keys.value == (g, "state_value")
        assert keys.reward == (g, "train_reward")
        assert keys.done == (g, "train_done")
        assert keys.terminated == (g, "train_terminated")
        est = loss.value_estimator.tensor_keys
        assert est.advantage == (g, "advantage") and est.value_target == (g, "value_target")
    batch = router.compute_advantages(make_batch(two_groups, router))
    root = set(batch.keys())
    assert "advantage" not in root and "value_target" not in root and "state_value" not in root
    assert batch["A", "advantage"].shape == (B, T, 2, 1)
    assert batch["B", "advantage"].shape == (B, T, 3, 1)
    assert not torch.equal(batch["A", "value_target"][..., :1, :], batch["B", "value_target"][..., :1, :])


def test_each_loss_sees_only_its_group_and_computes_what_it_would_on_the_whole_batch(two_groups):
    # the router hands each loss its own group's entries (a hot-path saving); the values must not change
    router = make_router(two_groups)
    batch = router.compute_advantages(make_batch(two_groups, router))
    routed = router(batch)
    for g, loss in router.losses.items():
        direct = loss(batch)
        for key in ("loss_objective", "loss_critic"):
            assert_close(routed[g, key], direct[key])


@pytest.mark.parametrize("normalize", [False, True])
def test_agents_absent_from_the_episode_are_kept_out_of_advantages_and_loss(normalize):
    # PettingZoo pads agents that left the episode (mask False): whatever sits in their rewards, actions and
    # log-probs must change neither the advantages of the present agents nor the loss nor its gradient
    spec = GroupSpec(
        name="A",
        agents=("A_0", "A_1"),
        observation_keys=(("A", "observation"),),
        action_spec=Bounded(-1.0, 1.0, shape=(2, 2)),
        env_batch_ndim=0,
        raw_reward_key=("A", "reward"),
        observation_shape=(2, 4),
        keys=GroupKeys.for_group("A", mask=("A", "mask")),
    )
    groups = {"A": spec}
    torch.manual_seed(0)
    router = make_router(groups, normalize_advantage=normalize)
    batch = make_batch(groups, router)
    present = torch.ones(B, T, 2, dtype=torch.bool)
    present[0, 3:, 1] = False  # agent 1 of env 0 leaves after step 2
    batch.set(("A", "mask"), present)
    batch.set(("next", "A", "mask"), present)
    batch["next", "A", "train_done"][0, 2, 1] = True
    batch["next", "A", "train_terminated"][0, 2, 1] = True

    garbage = batch.clone()
    absent = ~present
    for key in [("next", "A", "train_reward"), ("A", "action"), ("A", "action_log_prob")]:
        value = garbage.get(key)
        value[absent] = 1e3 * torch.randn_like(value[absent])

    def run(td):
        router.zero_grad()
        router.compute_advantages(td)
        losses = router(td.reshape(-1))
        total_loss(losses).backward()
        return losses["A"], [p.grad.clone() for p in router.parameters() if p.grad is not None]

    (clean, clean_grads), (dirty, dirty_grads) = run(batch), run(garbage)
    if normalize:
        # before any update the ratio is 1, so the objective is minus the mean normalised advantage over the
        # present entries: 0 when the normalisation statistics leave the padding out
        assert abs(clean["loss_objective"].item()) < 1e-5
    assert torch.equal(batch["A", "advantage"][absent], torch.zeros(int(absent.sum()), 1))
    assert_close(batch["A", "advantage"], garbage["A", "advantage"])
    assert_close(batch["A", "value_target"], garbage["A", "value_target"])
    for key in ("loss_objective", "loss_critic"):
        assert_close(clean[key], dirty[key])
    assert len(clean_grads) == len(dirty_grads) > 0
    for a, b in zip(clean_grads, dirty_grads):
        assert_close(a, b)


def test_trap3_diagnostics_are_detached_scalars(two_groups):
    router = make_router(two_groups, entropy_coeff=0.01)
    batch = router.compute_advantages(make_batch(two_groups, router))
    losses = router(batch)
    assert set(losses.keys()) == {"A", "B"}
    for g in two_groups:
        td = losses[g]
        names = set(td.keys())
        assert {"ESS", "explained_variance", "clip_fraction", "kl_approx", "entropy"} <= names
        for name in names:
            value = td[name]
            assert value.shape == (), (g, name, value.shape)
            if name.startswith("loss_"):
                assert value.requires_grad, (g, name)
            else:
                assert not value.requires_grad, (g, name)
            assert torch.isfinite(value), (g, name)


def test_trap5_unique_parameters_lists_shared_once(same_shape_groups):
    router = make_router(same_shape_groups, share_critic=("A", "B"))
    la, lb = router.losses["A"], router.losses["B"]
    naive = list(la.parameters()) + list(lb.parameters())
    unique = unique_parameters([la, lb])
    assert len({id(p) for p in unique}) == len(unique)
    assert {id(p) for p in unique} == {id(p) for p in naive}
    n_critic = len(module_params(router, "A")["critic"])
    assert n_critic > 0
    assert len(naive) == len(unique) + n_critic
    # a single module is accepted as well, and the router itself agrees
    assert [id(p) for p in unique_parameters(router)] == [id(p) for p in AggregatedStep(router).params]


def test_unique_parameters_skips_frozen():
    a, b = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)
    b.bias.requires_grad_(False)
    params = unique_parameters([a, b, a])
    assert [id(p) for p in params] == [id(a.weight), id(a.bias), id(b.weight)]


# -- aggregation -------------------------------------------------------------------------------------


def test_total_loss_with_weights_is_the_hand_sum(two_groups):
    router = make_router(two_groups)
    batch = router.compute_advantages(make_batch(two_groups, router))
    losses = router(batch)
    terms = {g: [losses[g, k] for k in losses[g].keys() if k.startswith("loss_")] for g in two_groups}
    assert all(len(v) >= 2 for v in terms.values())
    hand = 0.25 * sum(terms["A"]) + 3.0 * sum(terms["B"])
    assert_close(total_loss(losses, weights={"A": 0.25, "B": 3.0}), hand)
    assert_close(total_loss(losses, weights={"B": 3.0}), sum(terms["A"]) + 3.0 * sum(terms["B"]))
    assert_close(total_loss(losses), sum(terms["A"]) + sum(terms["B"]))
    # diagnostics are not summed in
    assert not torch.allclose(total_loss(losses), sum(terms["A"]) + sum(terms["B"]) + losses["A", "ESS"])
    out = AggregatedStep(router, weights={"A": 0.25, "B": 3.0})(losses)
    assert_close(out["loss"], hand.detach().reshape(1))  # one seed's: [S] with S = 1


def test_total_loss_unknown_weight_group(two_groups):
    losses = TensorDict({g: {"loss_x": torch.tensor(1.0)} for g in two_groups})
    with pytest.raises(KeyError, match=r"'C'.*groups are \['A', 'B'\]"):
        total_loss(losses, weights={"C": 2.0})


def test_total_loss_group_without_loss_terms():
    losses = TensorDict({"A": {"loss_x": torch.tensor(1.0)}, "B": {"entropy": torch.tensor(1.0)}})
    with pytest.raises(ValueError, match=r"group 'B' has no loss_\* term"):
        total_loss(losses)


# -- real VMAS scenarios ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "scenario, kwargs, agents, algorithm",
    [
        ("simple_tag", {}, {"adversary": 3, "agent": 1}, "mappo"),
        ("navigation", {"n_agents": 3}, {"agents": 3}, "mappo"),
        ("navigation", {"n_agents": 3}, {"agents": 3}, "ippo"),
    ],
)
def test_vmas_end_to_end(scenario, kwargs, agents, algorithm):
    from torchrl.envs.libs.vmas import VmasEnv

    steps, num_envs = 8, 4
    env = VmasEnv(scenario, num_envs=num_envs, continuous_actions=True, seed=0, max_steps=steps, **kwargs)
    groups = read_group_specs(env)
    assert {g: s.n_agents for g, s in groups.items()} == agents
    if len(groups) > 1:
        rows = {g: [own(1.0), team(list(groups), reduce="mean", weight=0.5)] for g in groups}
        table = RewardTable(rows).bind(groups, env)
    else:
        table = RewardTable.own_rewards(groups).bind(groups, env)
    router = GroupRouter.from_specs(groups, algorithm=algorithm, hidden=HIDDEN)
    with torch.no_grad():
        batch = env.rollout(steps, router.policy, break_when_any_done=False)
    raw_before = {g: batch["next", g, "reward"].clone() for g in groups}
    table(batch)
    router.compute_advantages(batch)
    for g, n in agents.items():
        assert batch["next", g, "train_reward"].shape == (num_envs, steps, n, 1)
        assert batch[g, "advantage"].shape == (num_envs, steps, n, 1)
        assert torch.isfinite(batch[g, "advantage"]).all()
        assert torch.equal(batch["next", g, "reward"], raw_before[g])
    before = {g: [p.detach().clone() for ps in module_params(router, g).values() for p in ps] for g in groups}
    losses = router(batch)
    assert set(losses.keys()) == set(groups)
    out = AggregatedStep(router, lr=1e-3)(losses)
    assert torch.isfinite(out["loss"]) and torch.isfinite(out["grad_norm"])
    for g in groups:
        after = [p for ps in module_params(router, g).values() for p in ps]
        assert any(not torch.equal(a, b) for a, b in zip(before[g], after)), f"{g} did not change"
    env.close()
