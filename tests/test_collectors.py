"""Collection backends (:mod:`marl_ppo.collectors`): torchrl's ``process`` and ``ray`` collectors.

Covered, on VMAS navigation with 2 workers each: a run trains for 2 iterations; the batch layout is
the direct collector's (``[envs, T]``, the same keys, no seam inside an env's time axis: a new
trajectory starts only after a done); the workers act with the learner's weights after an update
(the policy's outputs in the batch are those of the updated policy).
"""
from __future__ import annotations

import json
import warnings

import pytest
import torch
from torch import nn

from marl_ppo.collectors import make_collector
from marl_ppo.config import ConfigError, load_config
from marl_ppo.trainer import Trainer, build

TINY = ["env.num_envs=4", "env.max_steps=7", "train.frames_per_batch=40", "train.total_frames=80",
        "train.num_epochs=1", "train.minibatch_size=20", "model.hidden=[16]", "train.num_threads=1",
        "log.progress=false", "log.plot=false", "log.eval_every=0", "log.eval_episodes=2", "log.checkpoint_every=0"]
BACKENDS = ["process", "ray"]


def _cfg(backend: str, *extra: str):
    n = 1 if backend == "direct" else 2
    return load_config(overrides=[*TINY, f"train.collector.backend={backend}", f"train.collector.num_collectors={n}",
                                  *extra])


@pytest.fixture(params=BACKENDS)
def backend(request):
    if request.param == "ray":
        request.getfixturevalue("ray_cluster")  # the session's cluster, not one per collector
    return request.param


def test_trains_two_iterations(backend, tmp_path):
    summary = Trainer(_cfg(backend), run_dir=tmp_path).fit()
    assert (summary["iteration"], summary["frames"]) == (2, 80)
    assert json.loads((tmp_path / "summary.json").read_text())["frames"] == 80
    assert "eval/agents/episode_reward" in summary


def _batches(cfg, n: int = 1, between=None):
    parts = build(cfg)
    collector = make_collector(cfg, parts.env, parts.router.policy, total_frames=n * cfg.train.frames_per_batch)
    out = []
    try:
        for batch in collector:
            out.append(batch)
            if between is not None and len(out) < n:
                between(parts.router.policy)
                collector.update_policy_weights_()
    finally:
        collector.shutdown()
    return parts, out


def test_batch_layout_equals_direct(backend):
    _, (direct,) = _batches(_cfg("direct"))
    _, (batch,) = _batches(_cfg(backend))
    assert batch.batch_size == direct.batch_size == torch.Size([4, 10])  # envs x time
    assert set(batch.keys(True, True)) == set(direct.keys(True, True))
    for b in (direct, batch):  # no seam: a row's trajectory changes only right after a done
        traj, done = b.get(("collector", "traj_ids")), b.get(("next", "done")).squeeze(-1)
        changes = traj[:, 1:] != traj[:, :-1]
        assert changes.any()  # max_steps=7 < T=10: every env starts a new episode inside the batch
        assert torch.equal(changes, done[:, :-1]), (traj, done)


def _push_loc_up(policy: nn.Module) -> None:
    last = [m for m in policy.modules() if isinstance(m, nn.Linear)][-1]  # loc then scale, 2 + 2
    with torch.no_grad():
        last.bias[:2] += 10.0


def test_weights_reach_the_workers(backend):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        parts, (first, second) = _batches(_cfg(backend), n=2, between=_push_loc_up)
    # synced once before the first batch: torchrl's RayCollector warns otherwise
    assert not [w for w in caught if "before weight synchronization" in str(w.message)]
    policy = parts.router.policy
    assert first.get(("agents", "loc")).abs().mean() < 2.0
    assert second.get(("agents", "loc")).mean() > 8.0  # the workers act with the updated weights
    assert second.get(("agents", "action")).mean() > 0.9  # actions change: pushed against the bound (1.0)
    with torch.no_grad():
        again = policy(second.select(("agents", "observation")).clone())
    torch.testing.assert_close(again.get(("agents", "loc")), second.get(("agents", "loc")))


def test_config_errors_name_the_keys():
    with pytest.raises(ConfigError, match="num_collectors must be 1 with backend 'direct', got 2"):
        load_config(overrides=["train.collector.num_collectors=2"])
    with pytest.raises(ConfigError, match=r"train.collector.backend must be one of \['direct', 'process', 'ray'\]"):
        load_config(overrides=["train.collector.backend=mpi"])
    with pytest.raises(ConfigError, match="did you mean 'train.collector.backend'"):
        load_config(overrides=["train.collector.bakend=ray"])
    with pytest.raises(ConfigError, match=r"env.num_envs \(5\) must be divisible by train.collector.num_collectors \(2\)"):
        _cfg("process", "env.num_envs=5", "train.frames_per_batch=50")  # refused with the config, before any build
