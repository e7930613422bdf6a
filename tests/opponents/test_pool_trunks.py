"""Pools of policies with a trunk (a CNN on MAgent2 battle; a GNN, DeepSets and a chain on VMAS navigation):
the snapshots of the whole policy, each of its plain networks run for every snapshot in one vmapped call."""

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
}


@pytest.mark.parametrize("kind", list(KINDS))
def test_each_env_copy_plays_its_own_snapshot_of_the_policy(kind):
    """Known answer: with three snapshots, copy ``e``'s output from the pool's frozen policy equals that of
    snapshot ``choice[e]`` rebuilt alone (its parameters loaded into a copy of the policy) on that copy."""
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
    td = parts.env.reset()
    pool.snapshots.choice = torch.tensor([2, 0, 1])
    with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
        together = frozen(td.clone())[seat, entry]
        for e, k in enumerate(pool.snapshots.choice.tolist()):
            alone = snapshot_actor(spec, pool, k)(td[e : e + 1].clone())[seat, entry][0]
            torch.testing.assert_close(together[e], alone, rtol=1e-5, atol=1e-5)
        outputs = [snapshot_actor(spec, pool, k)(td.clone())[seat, entry] for k in range(3)]
    assert not torch.allclose(outputs[0], outputs[1])  # the snapshots differ: the known answer could fail
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
