"""HAPPO's sequential update: known answers, the order, and runs through the trainer.

* two groups in a fixed order: the second group's advantages are weighted by M, the first group's
  joint ratio after its update, computed here by hand from its policy's distribution;
* one group with ``critic=with_actor``: HAPPO is the joint PPO step, bit for bit;
* the order is drawn from the update's generator: the same seed gives the same orders, and they
  change from one iteration to the next;
* through ``marl-ppo train``: VMAS simple_tag (two groups); the depot game (composite actions, a
  random order) resumes exactly; what HAPPO cannot do is refused in one line.
"""

from __future__ import annotations

import copy
import json
import math

import pytest
import torch
from tensordict import TensorDict
from torch.testing import assert_close

from marl_ppo.cli import main
from marl_ppo.config import load_config
from marl_ppo.core import happo
from marl_ppo.core.aggregate import AggregatedStep
from marl_ppo.core.happo import happo_update, unit_order
from marl_ppo.core.router import GroupRouter
from marl_ppo.core.seeds import SeedStack
from marl_ppo.core.update import ppo_update
from marl_ppo.run.build import build
from tests.core.test_bundles import HIDDEN, B, T, move_policies, spec, synthetic_batch
from tests.run.test_recovery import FPB, ROOT, TINY, assert_straight_equals_crash_then_resume


def _router(groups, algorithm="happo", **kwargs) -> GroupRouter:
    torch.manual_seed(0)
    return GroupRouter.from_specs(groups, algorithm=algorithm, hidden=HIDDEN, entropy_coeff=0.01, **kwargs)


def _batch(groups, router):
    batch = synthetic_batch(groups, router)
    router.compute_advantages(batch)
    return batch


def test_the_second_group_is_weighted_by_the_first_groups_joint_ratio_after_its_update(monkeypatch):
    groups = {"a": spec("a", 2), "b": spec("b", 3)}
    router = _router(groups)
    batch = _batch(groups, router)
    move_policies(router)  # the behaviour policy's log-probs are the batch's: ratios start away from 1
    seen = {}

    def spy(model, step, batch, *, groups=None, **kwargs):
        if groups is not None:
            seen[groups[0]] = batch.get((groups[0], "update_weight"), None)
        return ppo_update(model, step, batch, groups=groups, **kwargs)

    monkeypatch.setattr(happo, "ppo_update", spy)
    step = AggregatedStep(router, lr=1e-2)
    happo_update(router, step, batch, num_epochs=2, minibatch_size=8, order="fixed", critic="after")
    assert seen["a"] is None  # the first unit trains as the joint step does
    with torch.no_grad():  # by hand: a's policy after the update, on a's stored actions
        dist = router.losses["a"].actor_network.get_dist(batch)
        log_ratio = dist.log_prob(batch["a", "action"]) - batch["a", "action_log_prob"]
    m = log_ratio.sum(-1).exp()  # over a's two agents: the joint action's ratio, per sample
    assert seen["b"].shape == (1, *batch.shape, 3, 1)  # the update's batch carries the seed dim, S = 1
    assert_close(seen["b"][0], m[..., None, None].expand(*batch.shape, 3, 1), rtol=1e-5, atol=1e-6)
    assert not torch.allclose(m, torch.ones_like(m), atol=1e-3)  # the policy moved: M is not 1


def test_the_agents_of_a_group_without_shared_parameters_are_units_of_their_own(monkeypatch):
    groups = {"a": spec("a", 2)}
    router = _router(groups, share_params=False)
    assert happo.units_of(router) == [("a", 0), ("a", 1)] and router.unshared == ["a"]
    batch = _batch(groups, router)
    move_policies(router)
    weights = [p for name, p in router.named_parameters() if name.startswith("losses.a.actor_network")]
    assert weights and all(p.shape[0] == 2 for p in weights)  # torchrl's per-agent weights, stacked
    seen = []

    def spy(model, step, batch, *, groups=None, **kwargs):
        before = [p.detach().clone() for p in weights]
        out = ppo_update(model, step, batch, groups=groups, **kwargs)
        moved = [[not torch.equal(b[i], p[i]) for i in range(2)] for b, p in zip(before, weights)]
        seen.append((batch.get(("a", "update_weight"), None), batch.get(("a", "update_mask"), None), moved))
        return out

    monkeypatch.setattr(happo, "ppo_update", spy)
    happo_update(router, AggregatedStep(router, lr=1e-2), batch, num_epochs=2, minibatch_size=8, order="fixed")
    (w0, mask0, moved0), (w1, mask1, moved1), (_, mask_c, _) = seen
    assert w0 is None and mask0[0, ..., :, 0].tolist() == [[[True, False]] * T] * B and mask_c is None  # seed 0's
    assert all(m == [True, False] for m in moved0) and all(m == [False, True] for m in moved1)  # one agent each
    with torch.no_grad():  # M for agent 1: agent 0's ratio alone, after its update
        dist = router.losses["a"].actor_network.get_dist(batch)
        log_ratio = (dist.log_prob(batch["a", "action"]) - batch["a", "action_log_prob"])[..., 0]
    assert_close(w1[0, ..., 1, 0], log_ratio.exp(), rtol=1e-5, atol=1e-6)


def test_one_group_with_its_critic_is_the_joint_step_bit_for_bit():
    groups = {"a": spec("a", 2)}
    joint, sequential = _router(groups, algorithm="mappo"), _router(groups)
    batch = _batch(groups, joint)
    move_policies(joint, sequential)
    out = []
    for router, update in ((joint, ppo_update), (sequential, happo_update)):
        kwargs = {"critic": "with_actor"} if update is happo_update else {}
        step = AggregatedStep(router, lr=1e-2)
        gen = torch.Generator().manual_seed(3)
        stats = update(router, step, batch.clone(), num_epochs=2, minibatch_size=8, generator=gen, **kwargs)
        out.append((stats, router.state_dict(), gen.get_state()))
    (stats_j, state_j, gen_j), (stats_s, state_s, gen_s) = out
    assert all(torch.equal(state_j[k], state_s[k]) for k in state_j)
    assert torch.equal(gen_j, gen_s) and torch.equal(stats_j["loss"], stats_s["loss"])
    assert torch.equal(stats_j["a", "loss_objective"], stats_s["a", "loss_objective"])


def test_the_critic_after_the_policies_trains_every_critic_once():
    groups = {"a": spec("a", 2), "b": spec("b", 2)}
    router = _router(groups)
    batch = _batch(groups, router)
    before = copy.deepcopy(router.state_dict())
    stats = happo_update(router, AggregatedStep(router, lr=1e-2), batch, num_epochs=1, minibatch_size=12)
    after = router.state_dict()
    moved = {k for k in before if k.startswith("losses.") and not torch.equal(before[k], after[k])}
    for g in ("a", "b"):  # both policies and both critics moved
        assert any(k.startswith(f"losses.{g}.actor_network") for k in moved), moved
        assert any(k.startswith(f"losses.{g}.critic_network") for k in moved), moved
    assert {"loss_objective", "loss_critic", "explained_variance", "kl_approx"} <= set(stats["a"].keys())
    assert all(stats["a", k].ndim == 0 for k in ("loss_critic", "explained_variance"))


def test_the_order_comes_from_the_generator_and_changes_each_iteration():
    def orders(seed):
        gen = torch.Generator().manual_seed(seed)
        return [tuple(unit_order(["a", "b", "c", "d"], "random", gen)) for _ in range(8)]

    assert orders(0) == orders(0) and orders(0) != orders(1)
    assert len(set(orders(0))) > 1
    assert unit_order(["a", "b"], "fixed", torch.Generator()) == ["a", "b"]
    with pytest.raises(ValueError, match="'random' or 'fixed', got 'sideways'"):
        unit_order(["a", "b"], "sideways", None)


SMALL = [
    "env.num_envs=8",
    "env.max_steps=20",
    "train.frames_per_batch=320",
    "train.total_frames=640",
    "train.minibatch_size=160",
    "model.hidden=[32]",
    "model.share_params=false",
    "log.eval_episodes=2",
    "log.progress=false",
    "log.plot=false",
]


def test_happo_trains_the_groups_of_simple_tag_through_the_command_line(tmp_path, capsys):
    args = ["env.scenario=simple_tag", "loss.algorithm=happo", *SMALL, f"log.root={tmp_path}", "log.name=tag"]
    assert main(["train", *args]) == 0
    text = (tmp_path / "tag" / "config.yaml").read_text()
    assert "algorithm: happo" in text and "order: random" in text and "critic: after" in text
    scalars = tmp_path / "tag" / "logs" / "scalars" / "train"
    for g in ("adversary", "agent"):  # each group's policy diagnostics and its critic's, one file each
        assert {"loss_objective.csv", "loss_critic.csv", "explained_variance.csv"} <= {
            p.name for p in (scalars / g).iterdir()
        }


@pytest.mark.parametrize(
    "overrides",
    [
        ["env.kind=pettingzoo", "env.scenario=tictactoe_v3", "env.num_envs=4", "env.max_steps=10"],
        ["env.scenario=simple_tag", "model.kind=gru", "model.seq_len=10", "loss.value_norm=running"],
    ],
    ids=["tictactoe-turns-and-masks", "simple_tag-gru-value-norm"],
)
def test_happo_runs_with_masks_turns_recurrent_models_and_value_norm(tmp_path, capsys, overrides):
    args = [*[o for o in SMALL if not o.startswith("env.")], *overrides, "loss.algorithm=happo"]
    args += ["train.frames_per_batch=160" if "tictactoe" in overrides[1] else "env.num_envs=8"]
    assert (
        main(
            ["train", *args, "train.total_frames=320", "train.minibatch_size=80", f"log.root={tmp_path}", "log.name=r"]
        )
        == 0
    )
    out = capsys.readouterr().out
    summary = json.loads(out[out.index("\n{") + 1 :])
    assert summary["frames"] == 320 and all(math.isfinite(v) for v in summary.values() if isinstance(v, float))


def test_happo_on_the_depot_game_resumes_exactly(tmp_path, monkeypatch):
    """Two groups in a random order, a composite action: a crash and a resume give the straight run."""
    factory = f"{ROOT / 'tests' / 'envs' / 'custom_envs.py'}:make_depot"
    overrides = [o for o in TINY if "n_agents" not in o] + ["env.kind=custom", f"env.factory={factory}"]
    cfg = load_config(overrides=[*overrides, "loss.algorithm=happo", "loss.entropy_coeff=0.01"])
    assert_straight_equals_crash_then_resume(cfg, tmp_path, monkeypatch, 4, FPB)


SEEDED = {  # HAPPO in a fixed order on real envs: two groups as two units; agents without shared weights as units
    "two-groups": ["env.scenario=simple_tag", "env.kwargs={}"],
    "agent-units": ["model.share_params=false"],
    "gru-two-groups": ["env.scenario=simple_tag", "env.kwargs={}", "model.kind=gru", "model.seq_len=4"],
}


@pytest.mark.parametrize("case", list(SEEDED))
def test_each_seed_of_a_stack_updates_as_its_single_happo_run(case):
    """Known answer, as ``tests/core/test_seeds.py`` has it for the joint step: three seeds stacked in one
    process, HAPPO's units in a fixed order, end with each seed's single-run parameters and Adam moments."""
    from tests.core.test_seeds import BASE, EPOCHS, MINIBATCH, _of

    runs = []
    for s in range(3):
        cfg = load_config(
            None, [*BASE, *SEEDED[case], "loss.algorithm=happo", "loss.happo.order=fixed", f"train.seed={s}"]
        )
        parts = build(cfg)
        with torch.no_grad():
            batch = parts.reward_table(parts.env.rollout(8, parts.policy, break_when_any_done=False))
        parts.env.close()
        runs.append((parts, batch))
    assert len(happo.units_of(runs[0][0].router)) > 1  # a sequence of units: M is not all ones
    lr = cfg.train.lr
    seq_len = 4 if runs[0][0].router.recurrent_keys else None
    run = dict(num_epochs=EPOCHS, minibatch_size=MINIBATCH, seq_len=seq_len, order="fixed")
    stack = SeedStack([copy.deepcopy(parts.router) for parts, _ in runs])
    step = AggregatedStep(stack.trainable, lr=lr, seeds=stack.seeds)
    batch = stack.compute_advantages(stack.split(torch.cat([b for _, b in runs])))
    stats = happo_update(
        stack, step, batch, generator=[torch.Generator().manual_seed(1000 + s) for s in range(3)], **run
    )
    for s, (parts, batch) in enumerate(runs):
        router = copy.deepcopy(parts.router)
        single = AggregatedStep(router, lr=lr)
        single_stats = happo_update(
            router,
            single,
            router.compute_advantages(batch.clone()),
            generator=torch.Generator().manual_seed(1000 + s),
            **run,
        )
        want, got = router.state_dict(), stack.state_dict(s)
        moved = 0
        for key, value in want.items():
            assert_close(got[key], value, rtol=0, atol=1e-5, msg=f"seed {s}: {key}")
            moved += int(not torch.equal(value, parts.router.state_dict()[key]))
        assert moved > 4, "the update moved (almost) nothing: the comparison would prove little"
        for p_single, p_stacked in zip(single.params, step.params, strict=True):
            m_single, m_stacked = single.optimizer.state[p_single], step.optimizer.state[p_stacked]
            for moment in ("exp_avg", "exp_avg_sq"):
                assert_close(_of(m_stacked[moment], s, 3), m_single[moment], rtol=0, atol=1e-5)
            assert int(m_stacked["step"]) == int(m_single["step"])  # each unit's parameters stepped as alone
        for key in single_stats.keys(include_nested=True, leaves_only=True):  # each seed's diagnostics, its own
            assert_close(stats.get(key)[s], single_stats.get(key), rtol=1e-4, atol=1e-5, msg=str(key))


def test_a_stack_of_seeds_refuses_a_random_order_of_units():
    routers = [
        build(load_config(None, ["env.num_envs=2", "loss.algorithm=happo", "model.share_params=false"])).router
        for _ in range(2)
    ]
    stack = SeedStack(routers)
    step = AggregatedStep(stack.trainable, lr=1e-3, seeds=2)
    with pytest.raises(ValueError, match="set loss.happo.order=fixed"):
        generators = [torch.Generator().manual_seed(s) for s in range(2)]
        batch = TensorDict(batch_size=[2, 4])
        happo_update(stack, step, batch, num_epochs=1, minibatch_size=2, order="random", generator=generators)


@pytest.mark.parametrize(
    "overrides, words",
    [
        (
            ["train.seeds=[0,1]"],
            [
                "many seeds in one process do not support loss.algorithm=happo",
                "loss.happo.order=random",
                "set loss.happo.order=fixed",
            ],
        ),
        (
            ["env.kind=pettingzoo", "env.scenario=tictactoe_v3", "opponents={player_2: self}"],
            ["loss.algorithm=happo updates the groups one after another", "['player_2']"],
        ),
        (["loss.happo.order=sideways"], ["loss.happo.order", "'random', 'fixed'", "'sideways'"]),
        (["loss.happo.critic=never"], ["loss.happo.critic", "'after', 'with_actor'"]),
    ],
)
def test_what_happo_cannot_do_is_refused_in_one_line(tmp_path, capsys, overrides, words):
    assert main(["train", "loss.algorithm=happo", *overrides, f"log.root={tmp_path / 'runs'}"]) == 1
    err = capsys.readouterr().err
    assert all(w in err for w in words), err
    assert not (tmp_path / "runs").exists()
