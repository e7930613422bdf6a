"""Collection backends (:mod:`marl_ppo.collect.collectors`): torchrl's ``process`` and ``ray`` collectors.

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

from marl_ppo.config import ConfigError, load_config
from marl_ppo.run.build import build, build_collector
from marl_ppo.run.trainer import Trainer
from tests.same_run import assert_same_run

TINY = [
    "env.num_envs=4",
    "env.max_steps=7",
    "train.frames_per_batch=40",
    "train.total_frames=80",
    "train.num_epochs=1",
    "train.minibatch_size=20",
    "model.hidden=[16]",
    "train.num_threads=1",
    "log.progress=false",
    "log.plot=false",
    "log.eval_every=0",
    "log.eval_episodes=2",
    "log.checkpoint_every=0",
]
BACKENDS = ["process", "ray"]


def _cfg(backend: str, *extra: str):
    n = 1 if backend == "direct" else 2
    return load_config(
        overrides=[*TINY, f"train.collector.backend={backend}", f"train.collector.num_collectors={n}", *extra]
    )


@pytest.fixture(params=BACKENDS)
def backend(request):
    if request.param == "ray":
        request.getfixturevalue("ray_cluster")  # the session's cluster, not one per collector
    return request.param


@pytest.mark.slow
def test_trains_two_iterations(backend, tmp_path):
    summary = Trainer(_cfg(backend), run_dir=tmp_path).fit()
    assert (summary["iteration"], summary["frames"]) == (2, 80)
    assert json.loads((tmp_path / "summary.json").read_text())["frames"] == 80
    assert "eval/agents/episode_reward" in summary


def _batches(cfg, n: int = 1, between=None):
    parts = build(cfg)
    collector = build_collector(cfg, parts.env, parts.router.policy, total_frames=n * cfg.train.frames_per_batch)
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


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
def test_config_errors_name_the_keys():
    with pytest.raises(ConfigError, match="num_collectors must be 1 with backend 'direct', got 2"):
        load_config(overrides=["train.collector.num_collectors=2"])
    with pytest.raises(ConfigError, match=r"train.collector.backend must be one of \['direct', 'process', 'ray'\]"):
        load_config(overrides=["train.collector.backend=mpi"])
    with pytest.raises(ConfigError, match="did you mean 'train.collector.backend'"):
        load_config(overrides=["train.collector.bakend=ray"])
    with pytest.raises(
        ConfigError, match=r"env.num_envs \(5\) must be divisible by train.collector.num_collectors \(2\)"
    ):
        _cfg("process", "env.num_envs=5", "train.frames_per_batch=50")  # refused with the config, before any build


# -- the lean VMAS collector (marl_ppo.collect.lean_vmas) against torchrl's Collector ---------------------


def _collect(cfg, *, lean: bool, batches: int, restart_at: tuple[int, ...] = (), seed: int = 123):
    """``batches`` batches from the direct collector (lean or torchrl's), restarting episodes from
    ``seed + i`` before batch ``i`` for each ``i`` in ``restart_at`` (as the trainer does at checkpoints)."""
    parts = build(cfg)
    collector = build_collector(
        cfg, parts.env, parts.router.policy, total_frames=batches * cfg.train.frames_per_batch, lean=lean
    )
    assert (type(collector).__name__ == "LeanVmasCollector") == lean
    out = []
    try:
        if 0 in restart_at:
            assert collector.restart(seed)
        for batch in collector:
            out.append(batch.clone())
            if len(out) in restart_at:
                assert collector.restart(seed + len(out))
    finally:
        collector.shutdown()
    return out


def _assert_same_batches(expected, actual):
    assert len(expected) == len(actual)
    for i, (e, a) in enumerate(zip(expected, actual)):
        assert set(e.keys(True)) == set(a.keys(True)), (i, set(e.keys(True)) ^ set(a.keys(True)))
        for key in e.keys(True):
            x, y = e.get(key), a.get(key)
            if isinstance(x, torch.Tensor):
                assert (x.shape, x.dtype, x.device) == (y.shape, y.dtype, y.device), (i, key)
                assert torch.equal(x, y), (i, key, (x != y).sum().item())
            else:  # a sub-tensordict: same batch size (group [B, T, n_agents], info) and device
                assert (x.batch_size, x.device) == (y.batch_size, y.device), (i, key)
        assert (e.batch_size, e.device) == (a.batch_size, a.device)


@pytest.mark.parametrize(
    "extra",
    [
        [],  # continuous (TanhNormal): every env's episode ends together (max_steps 7 < T 10), truncated
        ["env.continuous_actions=false"],  # discrete (Categorical) actions
        ["env.time_limit=terminate"],  # VMAS's own max_steps: the limit is a termination, no step counter
    ],
)
def test_lean_vmas_collector_gives_torchrl_collectors_batches(extra):
    """Same seeds, same batches: keys, shapes, dtypes, values, episode returns, trajectory ids, restarts."""
    cfg = _cfg("direct", *extra)
    restarts = (0, 2)  # before the first batch (a resumed run) and between batches (a checkpoint)
    expected = _collect(cfg, lean=False, batches=4, restart_at=restarts)
    _assert_same_batches(expected, _collect(cfg, lean=True, batches=4, restart_at=restarts))
    assert (expected[0].get(("next", "done")).sum(1) > 0).all()  # episodes end inside each batch


@pytest.mark.slow
@pytest.mark.parametrize("time_limit", ["truncate", "terminate"])
def test_lean_vmas_collector_partial_resets(time_limit):
    """Balance episodes end at different steps in different envs: VMAS resets them one by one
    (and with truncate, the step counter restarts for those envs only)."""
    cfg = _cfg(
        "direct",
        "env.scenario=balance",
        "env.kwargs={}",
        "env.num_envs=6",
        "env.max_steps=60",
        "train.frames_per_batch=60",
        f"env.time_limit={time_limit}",
    )
    expected = _collect(cfg, lean=False, batches=10)
    done = torch.stack([b.get(("next", "done")).squeeze(-1) for b in expected])  # [batches, envs, T]
    assert (done.any(1) & ~done.all(1)).any()  # some steps reset some envs, not all
    _assert_same_batches(expected, _collect(cfg, lean=True, batches=10))


def test_training_with_the_lean_collector_equals_torchrls(tmp_path, monkeypatch):
    """A run with checkpoints (episode restarts) ends with the same parameters and logs either way."""
    import functools

    import marl_ppo.run.trainer as trainer_module

    cfg = _cfg("direct", "train.total_frames=160", "log.checkpoint_every=2")
    lean = Trainer(cfg, run_dir=tmp_path / "lean")
    lean.fit()
    monkeypatch.setattr(trainer_module, "build_collector", functools.partial(build_collector, lean=False))
    plain = Trainer(cfg, run_dir=tmp_path / "torchrl")
    plain.fit()
    assert_same_run(plain, lean, tmp_path / "torchrl", tmp_path / "lean")


GRU = ("model.kind=gru", "model.seq_len=5")  # the lean VMAS path declines it: torchrl's Collector runs


def test_a_reused_batch_holds_what_a_cloned_one_holds_until_the_next_is_drawn():
    """``reuse_batch``: the same values as torchrl's clone, in one buffer; keys added stay out of it."""

    def collect(reuse: bool):
        cfg = _cfg("direct", *GRU)
        parts = build(cfg)
        collector = build_collector(
            cfg, parts.env, parts.router.policy, total_frames=3 * cfg.train.frames_per_batch, reuse_batch=reuse
        )
        kept, values = [], []
        for batch in collector:
            assert ("agents", "advantage") not in batch.keys(True)  # the previous batch's, added below
            kept.append(batch)
            values.append(batch.clone())
            batch.set(("agents", "advantage"), torch.zeros_like(batch["next", "agents", "reward"]))
        collector.shutdown()
        return collector, kept, values

    cloned, kept_cloned, expected = collect(reuse=False)
    reused, kept, got = collect(reuse=True)
    assert "its buffer reused" in reused.description and "reused" not in cloned.description
    assert len(got) == len(expected) == 3
    for e, g in zip(expected, got, strict=True):
        assert (e == g).all()  # every key, bit for bit
    obs = ("agents", "observation")
    assert kept[0][obs].data_ptr() == kept[2][obs].data_ptr()  # one buffer, overwritten
    assert not torch.equal(got[0][obs], kept[0][obs])  # the first batch's values are gone
    assert kept_cloned[0][obs].data_ptr() != kept_cloned[2][obs].data_ptr()


def test_a_run_reuses_the_batch_only_where_no_callback_reads_it(tmp_path):
    """The same run with and without a batch-reading callback: the same parameters and logs; the
    callback's batches are its own (kept ones are not overwritten by the next collection)."""
    kept = []

    class Keep:
        def on_batch_collected(self, trainer, batch):
            kept.append((batch, batch.clone()))

    class Quiet:  # a callback without the hook
        def on_update_end(self, trainer, stats):
            pass

    cfg = _cfg("direct", *GRU, "train.total_frames=120")
    reading = Trainer(cfg, run_dir=tmp_path / "reading", callbacks=[Keep()])
    assert "reused" not in reading.fit()["collector"]
    plain = Trainer(cfg, run_dir=tmp_path / "plain", callbacks=[Quiet()])
    assert "its buffer reused" in plain.fit()["collector"]
    assert_same_run(reading, plain, tmp_path / "reading", tmp_path / "plain")
    assert len(kept) == 3
    for batch, at_the_time in kept:
        assert (batch == at_the_time).all()


def test_lean_vmas_collector_declines_what_it_cannot_reproduce():
    from tensordict.nn import TensorDictModule

    from marl_ppo.collect.lean_vmas import lean_vmas_collector

    parts = build(_cfg("direct"))
    kw = dict(frames_per_batch=40, total_frames=40)
    assert lean_vmas_collector(parts.env, parts.router.policy, **kw) is not None
    other_policy = TensorDictModule(
        nn.Linear(18, 2), in_keys=[("agents", "observation")], out_keys=[("agents", "action")]
    )
    assert lean_vmas_collector(parts.env, other_policy, **kw) is None
    assert lean_vmas_collector(parts.env.base_env, parts.router.policy, **kw) is None  # no episode returns
    assert lean_vmas_collector(parts.env, parts.router.policy, frames_per_batch=42, total_frames=42) is None
    comm = build(_cfg("direct", "env.scenario=simple_reference", "env.kwargs={}", "env.comm=true"))
    assert lean_vmas_collector(comm.env, comm.router.policy, **kw) is None


@pytest.mark.slow
def test_the_run_records_which_collector_ran_and_why_the_lean_path_declined(tmp_path):
    lean = Trainer(_cfg("direct"), run_dir=tmp_path / "lean")
    summary = lean.fit()
    assert summary["collector"] == "lean VMAS collector (direct, in this process)"
    assert "collector: lean VMAS collector" in (tmp_path / "lean" / "run.log").read_text()
    # a recurrent policy: the lean path cannot replay its hidden states, torchrl's collector runs instead
    gru = Trainer(_cfg("direct", "model.kind=gru", "model.seq_len=5"), run_dir=tmp_path / "gru")
    summary = gru.fit()
    assert summary["collector"].startswith(
        "torchrl Collector (direct, in this process, its buffer reused); the lean VMAS collector declined: "
    ), summary["collector"]
    assert "other transforms than the time limit and the episode returns" in summary["collector"]
    assert "TensorDictPrimer" in summary["collector"]  # the recurrent states' entries
    assert json.loads((tmp_path / "gru" / "summary.json").read_text())["collector"] == summary["collector"]
    assert summary["collector"] in (tmp_path / "gru" / "run.log").read_text()
