"""Pools of policies with a trunk (a CNN on MAgent2 battle; a GNN, DeepSets, a chain, a GRU and an LSTM on VMAS
navigation): the snapshots of the whole policy, each of its plain networks run for every snapshot in one
vmapped call (a GRU/LSTM cell: one call per snapshot in play), a recurrent snapshot's state carried in the
seat's own state entries."""

from __future__ import annotations

import pytest
import torch
from torchrl.envs.utils import ExplorationType, set_exploration_type

from marl_ppo.config import load_config
from marl_ppo.run.build import build
from marl_ppo.run.opponents import snapshot_policy
from marl_ppo.run.payoff import snapshot_actor
from tests.opponents.test_opponents import BATTLE

POOL = [*BATTLE, "opponents.blue=pool:red", "pool.every=1", "model.options.cnn.channels=[4, 4]"]
POOL += ["model.options.cnn.kernels=[3, 3]", "model.options.cnn.strides=[2, 1]", "model.options.cnn.paddings=[0, 0]"]


NAVIGATION = ["env.num_envs=3", "opponents.agents=pool", "model.hidden=[16]"]
KINDS = {  # (config, overrides, the pool seat, an entry of the policy's output to compare)
    "cnn": (None, [*POOL, "env.num_envs=3"], "blue", "logits"),
    "gnn": ("navigation", [*NAVIGATION, "model.kind=gnn"], "agents", "loc"),
    "deepsets": ("navigation", [*NAVIGATION, "model.kind=deepsets"], "agents", "loc"),
    "chain": ("navigation", [*NAVIGATION, "model.kind=[mlp]"], "agents", "loc"),
    "gru": ("navigation", [*NAVIGATION, "model.kind=gru"], "agents", "loc"),
    "lstm": ("navigation", [*NAVIGATION, "model.kind=lstm", "model.critic_kind=mlp"], "agents", "loc"),
    "cnn-gru": (None, [*POOL, "env.num_envs=3", "model.kind=[cnn, gru]"], "blue", "logits"),
    # one network per agent (torchrl keeps its weights in a TensorDictParams): each copy plays its snapshot too
    "chain-unshared": ("navigation", [*NAVIGATION, "model.kind=[mlp]", "model.share_params=false"], "agents", "loc"),
    "gru-unshared": ("navigation", [*NAVIGATION, "model.kind=gru", "model.share_params=false"], "agents", "loc"),
}


def _carried(actor) -> list:
    """The entries a policy writes for the next step (a recurrent policy's state)."""
    return [k for k in actor.out_keys if isinstance(k, tuple) and k[0] == "next"]


@pytest.mark.parametrize("kind", list(KINDS))
def test_each_env_copy_plays_its_own_snapshot_of_the_policy(kind):
    """Known answer: with three snapshots, copy ``e``'s output from the pool's frozen policy equals that of
    snapshot ``choice[e]`` rebuilt alone (its parameters loaded into a copy of the policy) on that copy;
    a recurrent policy's next state too, over two steps (the second from the state the first wrote)."""
    config, overrides, seat, entry = KINDS[kind]
    if config is None:
        pytest.importorskip("magent2")
    torch.manual_seed(0)
    parts = build(load_config(config, overrides))
    pool, spec = parts.pools[seat], parts.groups[seat]
    live = parts.router.losses[seat].actor_network
    assert pool.snapshots.template is live and len(pool.snapshots) == 1
    for _ in range(2):  # two more snapshots, far from the first
        pool.snapshots.add({k: torch.randn_like(v) for k, v in live.named_parameters()}, size=5)
    frozen = snapshot_policy(live, pool.snapshots)
    assert not list(frozen.parameters())  # it runs the snapshots' tensors only
    trained = list(live.parameters())  # what the optimizer holds: a pool's call must leave these very objects
    td = parts.env.reset()
    pool.snapshots.choice = torch.tensor([2, 0, 1])
    carried = _carried(live)
    assert bool(carried) == (kind in ("gru", "lstm", "cnn-gru", "gru-unshared"))
    with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
        alone_td = [td[e : e + 1].clone() for e in range(3)]
        for _ in range(2):
            together = frozen(td.clone())
            for e, k in enumerate(pool.snapshots.choice.tolist()):
                alone = snapshot_actor(spec, pool, k)(alone_td[e])
                for key in [(seat, entry), *carried]:
                    # the vmapped call and the lone one sum in different orders: their float32 rounding is
                    # of the size of the largest values in the sums, not of each output (on an AMD EPYC a
                    # logit of 0.15 beside logits of 20 differs by 1.5e-5); a wrong snapshot differs by O(1)
                    scale = alone[key][0].abs().max().clamp(min=1.0).item()
                    torch.testing.assert_close(together[key][e], alone[key][0], rtol=1e-5, atol=1e-5 * scale)
                alone_td[e] = _next_step(alone, carried)
            td = _next_step(together, carried)
        outputs = [snapshot_actor(spec, pool, k)(td.clone())[seat, entry] for k in range(3)]
    assert not torch.allclose(outputs[0], outputs[1])  # the snapshots differ: the known answer could fail
    # the live network keeps its own Parameter objects (swapping a snapshot in under vmap once left new ones there,
    # so the optimizer trained tensors the policy no longer used)
    assert all(a is b for a, b in zip(trained, live.parameters(), strict=True))
    parts.env.close()


def _next_step(td, carried):
    """``td``'s observation again, with the state the policy wrote and ``is_init`` off: a step inside an episode."""
    for key in carried:
        td.set(key[1:], td.get(key))
    if "is_init" in td.keys():
        td.set("is_init", torch.zeros_like(td.get("is_init")))
    return td


@pytest.mark.parametrize("kind", ["gru", "lstm"])
def test_a_recurrent_pool_seat_carries_each_copy_s_own_player_s_state(kind):
    """In the pool seat's player, a copy against a snapshot stores the snapshot's next state (and acts as it),
    a copy on the latest policy the latest policy's: the state each copy reads at its next step is the one
    its own player wrote. Checked against each policy run alone, over two steps."""
    torch.manual_seed(0)
    parts = build(load_config("navigation", [*NAVIGATION, "env.num_envs=8", f"model.kind={kind}"]))
    player, spec = parts.pools["agents"], parts.groups["agents"]
    live = parts.router.losses["agents"].actor_network
    for _ in range(2):
        player.snapshots.add({k: torch.randn_like(v) for k, v in live.named_parameters()}, size=5)
    player.latest_share = 0.25
    carried = _carried(live)
    td = parts.env.reset()
    alone_td = [td[e : e + 1].clone() for e in range(8)]
    with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
        for _ in range(2):
            with set_exploration_type(ExplorationType.RANDOM):  # the pool draws its players outside evaluations
                out = player(td.clone())
            drawn = out["agents", "opponent"][:, 0].tolist()
            for e, k in enumerate(drawn):
                me = live if k == -1 else snapshot_actor(spec, player, k)
                alone = me(alone_td[e])
                for key in carried:
                    torch.testing.assert_close(out[key][e], alone[key][0], rtol=1e-5, atol=1e-5)
                alone_td[e] = _next_step(alone, carried)
            td = _next_step(out, carried)
    assert -1 in drawn and {0, 1, 2} & set(drawn)  # both kinds of copies were checked
    parts.env.close()


def test_a_cnn_pool_run_resumes_exactly_with_its_pool(tmp_path, monkeypatch):
    pytest.importorskip("magent2")
    from marl_ppo.run.checkpoints import load_checkpoint
    from tests.run.test_recovery import assert_straight_equals_crash_then_resume

    quick = ["env.num_envs=2", "env.max_steps=5", "train.frames_per_batch=20", "train.total_frames=80"]
    quick += ["train.minibatch_size=10", "train.num_epochs=1", "log.checkpoint_every=2", "log.eval_episodes=2"]
    quick += ["log.progress=false", "log.plot=false", "pool.latest_share=0.5"]
    cfg = load_config(None, [*POOL, *quick])
    assert_straight_equals_crash_then_resume(cfg, tmp_path, monkeypatch, 3, 20)
    a, b = (load_checkpoint(tmp_path / run / "checkpoints" / "last.pt")["pools"]["blue"] for run in ("straight", "run"))
    assert a["taken_at"] == b["taken_at"] == [0, 1, 2, 3, 4]
    assert any(name.startswith("module.0.") for name in a["params"])  # the whole policy's parameters
    for name, value in a["params"].items():
        assert torch.equal(value, b["params"][name]), name
