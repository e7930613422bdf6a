"""Bundles: groups with identical specs share one loss call, and nothing else changes.

Known answer: the bundled router and the plain router (``bundle_groups=False``), built with the
same weights and fed the same batch after the policy has moved (ratios away from 1, some clipped),
give every group the same loss terms and diagnostics, and the aggregated loss the same gradients,
for: box actions with a trained entropy and advantage normalisation; MAPPO with per-agent weights
(torchrl's ``MultiAgentMLP``); composite actions with per-head entropy coefficients; a real
PettingZoo turn-based game, whose acting-agent and legal-action masks go through the bundle.

Which groups are bundled: every set of two or more groups whose agent count, observation,
action spec, masks, entropy coefficients and network kind match; never a group with a custom
actor, never when ``clip_value`` is set; bundling leaves the router's ``state_dict`` as it is.
"""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import NormalParamExtractor, TensorDictModule
from torch.testing import assert_close
from torchrl.data import Bounded, Categorical, Composite
from torchrl.modules import ProbabilisticActor
from torchrl.modules.distributions import IndependentNormal

from marl_ppo import RewardTable
from marl_ppo.config import EnvConfig
from marl_ppo.core.aggregate import total_loss
from marl_ppo.core.router import GroupRouter
from marl_ppo.core.update import update_keys
from marl_ppo.envs import make_env
from marl_ppo.groups import GroupSpec, read_group_specs
from marl_ppo.models import SharedAgentMLP

B, T, OBS = 3, 8, 5
HIDDEN = (16, 16)


def spec(name: str, n: int, action=None, obs: int = OBS) -> GroupSpec:
    return GroupSpec(
        name=name,
        agents=tuple(f"{name}_{i}" for i in range(n)),
        observation_keys=((name, "observation"),),
        action_spec=action(n) if action is not None else Bounded(-1.0, 1.0, shape=(n, 2)),
        env_batch_ndim=0,
        raw_reward_key=(name, "reward"),
        observation_shape=(n, obs),
    )


def hybrid(n: int) -> Composite:
    return Composite({"move": Bounded(-1.0, 1.0, shape=(n, 2)), "comm": Categorical(3, shape=(n,))}, shape=(n,))


def synthetic_batch(groups: dict[str, GroupSpec], router: GroupRouter, device: str = "cpu") -> TensorDict:
    """A [B, T] rollout-shaped batch with routed training rewards, episodes ending at T/2 and T."""
    root, nxt = {}, {}
    done = torch.zeros(B, T, dtype=torch.bool)
    done[:, T // 2 - 1] = done[:, -1] = True
    for g, s in groups.items():
        n, obs = s.observation_shape
        seq = torch.randn(B, T + 1, n, obs)
        d = done[:, :, None, None].expand(B, T, n, 1).clone()
        root[g] = TensorDict({"observation": seq[:, :-1]}, [B, T, n])
        nxt[g] = TensorDict(
            {
                "observation": seq[:, 1:],
                "train_reward": torch.randn(B, T, n, 1),
                "train_done": d,
                "train_terminated": d.clone(),
            },
            [B, T, n],
        )
    td = TensorDict({**root, "next": TensorDict(nxt, [B, T])}, [B, T]).to(device)
    with torch.no_grad():
        router.policy(td)
    return td


def tictactoe_batch(router: GroupRouter, env, groups) -> TensorDict:
    table = RewardTable.own_rewards(groups).bind(groups, env)
    with torch.no_grad():
        return table(env.rollout(12, router.policy, break_when_any_done=False))


def twin_routers(groups, **kwargs) -> tuple[GroupRouter, GroupRouter]:
    torch.manual_seed(0)
    plain = GroupRouter.from_specs(groups, hidden=HIDDEN, bundle_groups=False, **kwargs)
    torch.manual_seed(0)
    bundled = GroupRouter.from_specs(groups, hidden=HIDDEN, **kwargs)
    for (name, p), (_, q) in zip(plain.state_dict().items(), bundled.state_dict().items()):
        assert torch.equal(p, q), name
    return plain, bundled


def move_policies(*routers: GroupRouter, scale: float = 0.3) -> None:
    """The same random step on every parameter of each router: ratios leave 1, some get clipped."""
    gen = torch.Generator().manual_seed(1)
    params = [list(r.parameters()) for r in routers]
    with torch.no_grad():
        for ps in zip(*params):
            noise = (torch.randn(ps[0].shape, generator=gen) * scale / ps[0].shape[-1] ** 0.5).to(ps[0].device)
            for p in ps:
                p.add_(noise)


def assert_same_update(
    plain: GroupRouter, bundled: GroupRouter, batch: TensorDict, expect_bundle, tol: float = 1e-5
) -> None:
    assert bundled.bundles == expect_bundle and plain.bundles == []
    plain.compute_advantages(batch)
    flat = batch.select(*update_keys(plain)).reshape(-1)
    move_policies(plain, bundled)
    out_plain, out_bundled = plain(flat), bundled(flat)
    assert sorted(out_plain.keys()) == sorted(out_bundled.keys()) == sorted(plain.groups)
    clipped = 0.0
    for g in plain.groups:
        names = sorted(out_plain[g].keys(include_nested=True, leaves_only=True), key=str)
        assert names == sorted(out_bundled[g].keys(include_nested=True, leaves_only=True), key=str), g
        for name in names:
            a, b = out_plain[g].get(name), out_bundled[g].get(name)
            assert a.shape == b.shape == torch.Size([]), (g, name)
            assert a.requires_grad == b.requires_grad, (g, name)
            assert_close(b, a, rtol=tol, atol=tol / 10, msg=f"{g}/{name}")
        clipped += float(out_plain[g, "clip_fraction"])
    assert clipped > 0, "the policies moved too little: no ratio was clipped, the check is too easy"
    first, second = list(plain.groups)[:2]
    assert not torch.equal(out_plain[first, "loss_objective"], out_plain[second, "loss_objective"])

    total_loss(out_plain).backward()
    total_loss(out_bundled).backward()
    with_grad = 0
    for (name, p), (_, q) in zip(plain.named_parameters(), bundled.named_parameters()):
        assert (p.grad is None) == (q.grad is None), name
        if p.grad is not None:
            assert_close(q.grad, p.grad, rtol=tol, atol=tol / 100, msg=name)
            with_grad += 1
    assert with_grad == len(list(plain.parameters()))


@pytest.mark.parametrize("n_agents", [1, 2])
def test_box_actions_with_entropy_and_normalisation(n_agents):
    groups = {g: spec(g, n_agents) for g in ("a", "b", "c", "d")}
    plain, bundled = twin_routers(groups, algorithm="ippo", entropy_coeff=0.05, normalize_advantage=True)
    assert_same_update(plain, bundled, synthetic_batch(groups, plain), [("a", "b", "c", "d")])


def test_mappo_with_per_agent_weights():
    groups = {g: spec(g, 2) for g in ("red", "green", "blue")}
    plain, bundled = twin_routers(groups, algorithm="mappo", share_params=False, entropy_coeff=0.01)
    assert_same_update(plain, bundled, synthetic_batch(groups, plain), [("red", "green", "blue")])


def test_composite_actions_with_per_head_entropy():
    groups = {g: spec(g, 2, hybrid) for g in ("x", "y", "z")}
    plain, bundled = twin_routers(groups, algorithm="mappo", entropy_coeff=0.01, head_entropy_coeff={"comm": 0.1})
    batch = synthetic_batch(groups, plain)
    assert_same_update(plain, bundled, batch, [("x", "y", "z")])


@pytest.mark.parametrize("normalize", [False, True])
def test_turn_based_game_with_masks(normalize):
    cfg = EnvConfig(
        kind="pettingzoo", scenario="tictactoe_v3", num_envs=3, max_steps=9, continuous_actions=False, kwargs={}
    )
    env = make_env(cfg, seed=0)
    groups = read_group_specs(env)
    plain, bundled = twin_routers(groups, algorithm="mappo", entropy_coeff=0.01, normalize_advantage=normalize)
    batch = tictactoe_batch(plain, env, groups)
    env.close()
    assert (~batch["player_1", "mask"]).any() and (~batch["player_2", "mask"]).any()
    assert_same_update(plain, bundled, batch, [("player_1", "player_2")])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_bundles_on_cuda():
    groups = {g: spec(g, 2, hybrid) for g in ("x", "y", "z")}
    plain, bundled = twin_routers(groups, algorithm="mappo", entropy_coeff=0.01, device="cuda")
    loss = bundled._bundles[0].loss
    assert all(b.device.type == "cuda" for b in loss.buffers())
    # CUDA matmuls may pick different kernels for different shapes: a looser tolerance
    assert_same_update(plain, bundled, synthetic_batch(groups, plain, "cuda"), [("x", "y", "z")], tol=1e-4)


# -- which groups are bundled ------------------------------------------------------------------------


def bundles_of(groups, **kwargs):
    return GroupRouter.from_specs(groups, hidden=HIDDEN, **kwargs).bundles


def test_only_groups_whose_specs_match_are_bundled():
    groups = {
        "a": spec("a", 2),
        "big": spec("big", 3),
        "b": spec("b", 2),
        "wide": spec("wide", 2, obs=7),
        "hyb": spec("hyb", 2, hybrid),
        "c": spec("c", 2),
        "hyb2": spec("hyb2", 2, hybrid),
    }
    assert bundles_of(groups) == [("a", "b", "c"), ("hyb", "hyb2")]
    # a group with its own entropy coefficient keeps its own call
    assert bundles_of(groups, head_entropy_coeff={"b:action": 0.1}) == [("a", "c"), ("hyb", "hyb2")]
    assert bundles_of(groups, bundle_groups=False) == []
    # value clipping reports one clip fraction per loss call: every group keeps its own
    assert bundles_of(groups, clip_value=0.2) == []
    assert bundles_of({"only": spec("only", 4)}) == []


def test_a_group_with_a_custom_actor_is_not_bundled():
    """Even one made of our MLP and NormalParamExtractor: a bundle rebuilds a group's actor from its
    spec (a TanhNormal here), which would silently replace this actor's IndependentNormal."""
    groups = {g: spec(g, 2) for g in ("a", "b", "c")}
    torch.manual_seed(0)
    base = GroupRouter.from_specs(groups, hidden=HIDDEN)
    actors = {g: base.losses[g].actor_network for g in groups}
    critics = {g: base.losses[g].critic_network for g in groups}
    net = SharedAgentMLP(OBS, 4, 2, centralized=False, hidden=HIDDEN, activation_class=torch.nn.Tanh)
    module = TensorDictModule(
        torch.nn.Sequential(net, NormalParamExtractor()),
        in_keys=[("c", "observation")],
        out_keys=[("c", "loc"), ("c", "scale")],
    )
    actors["c"] = ProbabilisticActor(
        module,
        in_keys=[("c", "loc"), ("c", "scale")],
        out_keys=[("c", "action")],
        distribution_class=IndependentNormal,
        return_log_prob=True,
        log_prob_key=("c", "action_log_prob"),
    )
    assert base.networks.of(actors["c"]) is None and base.networks.of(actors["a"]) is not None
    assert GroupRouter(groups, actors, critics, networks=base.networks).bundles == [("a", "b")]
    assert GroupRouter(groups, actors, critics).bundles == []  # no table: nothing known to be bundleable


def test_bundling_keeps_the_state_dict_and_follows_dtype_moves():
    groups = {g: spec(g, 2) for g in ("a", "b")}
    plain, bundled = twin_routers(groups)
    assert list(plain.state_dict()) == list(bundled.state_dict())
    bundled.double()
    loss = bundled._bundles[0].loss
    assert loss.head_entropy_coeffs.dtype == torch.float64
    assert all(p.dtype == torch.float64 for p in bundled.parameters())


def test_a_schedules_entropy_scale_reaches_the_bundled_loss_call():
    groups = {g: spec(g, 2) for g in ("a", "b")}
    plain, bundled = twin_routers(groups, entropy_coeff=0.01)
    batch = synthetic_batch(groups, plain)
    plain.compute_advantages(batch)
    batch = batch.select(*update_keys(plain)).reshape(-1)
    half, full = bundled(batch, torch.tensor(0.5)), bundled(batch)
    for g in groups:
        assert full[g, "loss_entropy"].abs() > 0
        assert_close(half[g, "loss_entropy"], full[g, "loss_entropy"] * 0.5)
        assert_close(half[g, "loss_entropy"], plain(batch, torch.tensor(0.5))[g, "loss_entropy"])


@pytest.mark.parametrize("value_norm", ["running", "popart"])
def test_value_normalisation_with_each_groups_own_statistics(value_norm):
    """Bundled groups keep their own normalisers: with rewards of very different scales per group,
    the bundled losses and gradients are the unbundled ones."""
    groups = {g: spec(g, 2) for g in ("a", "b", "c")}
    plain, bundled = twin_routers(groups, algorithm="mappo", value_norm=value_norm, entropy_coeff=0.01)
    for _ in range(2):  # two batches: PopArt's second update also rescales the output layers
        batch = synthetic_batch(groups, plain)
        for i, g in enumerate(groups):
            key = ("next", g, "train_reward")
            batch.set(key, batch.get(key) * 10**i + 5.0 * i)
        bundled.compute_advantages(batch.clone())
        if _ == 0:
            plain.compute_advantages(batch.clone())
    means = [float(bundled._value_norms[g][0].denormalize(torch.zeros(1))) for g in groups]
    assert len({round(m, 3) for m in means}) == 3, means
    assert_same_update(plain, bundled, batch, [("a", "b", "c")])
