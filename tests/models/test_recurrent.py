"""Recurrent policies and critics (``model.kind=gru|lstm``): known answers on real VMAS data.

The update replays chunks of ``model.seq_len`` steps from the hidden states stored at
collection; these tests check that the replay is the collection (ratio 1 before any step, also
for chunks that cross an episode start), that gradients flow through time inside a chunk and
stop at an episode start, and that agents and envs never share a hidden state.
"""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close
from torchrl.modules import set_recurrent_mode

from marl_ppo.config import ConfigError, load_config
from marl_ppo.core.update import sequence_chunks, update_keys
from marl_ppo.models.recurrent import state_keys as recurrent_state_keys
from marl_ppo.run.build import build, build_collector

SEQ = 10
G = "agents"


def _config(kind: str, *extra: str):
    return load_config(
        overrides=[
            f"model.kind={kind}",
            "env.num_envs=6",
            "env.max_steps=15",
            "train.frames_per_batch=240",
            "train.minibatch_size=60",
            "train.total_frames=240",
            "model.hidden=[32]",
            "model.rnn_hidden=16",
            f"model.seq_len={SEQ}",
            "env.kwargs.n_agents=2",
            "log.checkpoint_every=0",
            *extra,
        ]
    )


def _collected(kind: str, *extra: str):
    """A real collected batch [6 envs, 40 steps] (episodes of 15 steps: resets inside chunks)."""
    cfg = _config(kind, *extra)
    parts = build(cfg)
    collector = build_collector(cfg, parts.env, parts.router.policy, total_frames=cfg.train.frames_per_batch)
    batch = next(iter(collector))
    collector.shutdown()
    batch = parts.reward_table(batch)
    parts.router.compute_advantages(batch)
    return cfg, parts, batch


def _log_prob(actor, td):
    with set_recurrent_mode(True):
        dist = actor.get_dist(td)
    return dist.log_prob(td.get((G, "action")))


def _crossing(chunks):
    """Chunks with an episode start after their first step."""
    inside = chunks.get("is_init")[:, 1:].reshape(chunks.shape[0], -1).any(-1)
    assert inside.any(), "some chunks must cross an episode start for the test to mean anything"
    return inside


@pytest.mark.parametrize(
    "kind, extra",
    [("gru", ()), ("lstm", ()), ("gru", ("model.share_params=false",))],
    ids=["gru", "lstm", "gru-unshared"],
)
def test_replayed_chunks_reproduce_the_collected_log_probs(kind, extra):
    """float32, real collection: |ratio - 1| below 3e-5 everywhere (measured: 3e-6 to 1.1e-5 at
    most, 1.2e-7 median; the MLP policy re-evaluated on its own batch differs from its collection
    by as much, 3e-6: float32 rounding of batched matmuls; the exact check is the float64 test
    below). Replayed from zero states instead, the log-probs differ by far more."""
    _, parts, batch = _collected(kind, *extra)
    chunks = sequence_chunks(batch.select(*update_keys(parts.router)), SEQ)
    inside = _crossing(chunks)
    actor = parts.router.losses[G].actor_network
    with torch.no_grad():
        new = _log_prob(actor, chunks)
    stored = chunks.get((G, "action_log_prob"))
    assert ((new - stored).exp() - 1).abs().max() < 3e-5
    assert ((new[inside] - stored[inside]).exp() - 1).abs().max() < 3e-5
    zeroed = chunks.clone()
    for key in parts.router.recurrent_keys[:-1]:
        zeroed.set(key, torch.zeros_like(zeroed.get(key)))
    with torch.no_grad():
        from_zero = _log_prob(actor, zeroed)
    assert (from_zero - stored).abs().max() > 1e-2


@pytest.mark.parametrize("kind", ["gru", "lstm"])
def test_chunk_replay_equals_stepping_in_float64(kind):
    """The replay's state handling, exactly: in float64, a chunk in recurrent mode gives the
    log-probs of stepping through it one step at a time from its first stored state, with the
    state zeroed at every episode start (what collection does). Agrees to 1e-10."""
    _, parts, batch = _collected(kind)
    chunks = sequence_chunks(batch.select(*update_keys(parts.router)), SEQ)
    chunks = chunks[_crossing(chunks)].apply(lambda t: t.double() if t.is_floating_point() else t)
    actor = parts.router.losses[G].actor_network.double()
    state_keys = recurrent_state_keys(actor)[:-1]  # the actor's own: hidden (and cell for an LSTM)
    with torch.no_grad():
        replayed = _log_prob(actor, chunks)
        states = {k: chunks.get(k)[:, 0] for k in state_keys}
        stepped = []
        for t in range(SEQ):
            step = chunks[:, t].clone()
            init = step.get("is_init")
            for k in state_keys:
                step.set(k, torch.where(init.view(-1, 1, 1, 1), 0.0, states[k]))
            step.set("is_init", torch.zeros_like(init))  # the state is already reset by hand
            stepped.append(actor.get_dist(step).log_prob(step.get((G, "action"))))
            actor(step)
            states = {k: step.get(("next", *k)) for k in state_keys}
    assert_close(replayed, torch.stack(stepped, 1), atol=1e-10, rtol=0)


ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]
SMALL = ["model.hidden=[16]", "model.rnn_hidden=8", "log.checkpoint_every=0", "train.num_epochs=1"]
CASES = {
    "navigation": (
        None,
        [
            "env.num_envs=6",
            "env.max_steps=15",
            "train.frames_per_batch=240",
            "train.minibatch_size=60",
            f"model.seq_len={SEQ}",
            "env.kwargs.n_agents=2",
        ],
    ),
    # two groups, masked categorical actions (PettingZoo, turn-based)
    "tictactoe": (
        ROOT / "configs" / "tictactoe_two_groups.yaml",
        ["env.num_envs=2", "train.frames_per_batch=40", "train.minibatch_size=20", "model.seq_len=10"],
    ),
    # composite {move, comm} actions, two heads
    "simple_reference-comm": (
        None,
        [
            "env.scenario=simple_reference",
            "env.comm=true",
            "env.kwargs={}",
            "env.num_envs=4",
            "env.max_steps=8",
            "train.frames_per_batch=80",
            "train.minibatch_size=40",
            "model.seq_len=10",
        ],
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("kind", ["gru", "lstm"])
def test_first_minibatch_ratio_is_one_through_the_loss(case, kind):
    """The losses' own diagnostics on the first minibatch of chunks: every group's (and head's)
    approximate KL is 0 and nothing is clipped, with masks, composite heads and two groups."""
    from marl_ppo.config import load_config as load

    path, overrides = CASES[case]
    cfg = load(path, overrides=[f"model.kind={kind}", *SMALL, *overrides])
    parts = build(cfg)
    collector = build_collector(cfg, parts.env, parts.router.policy, total_frames=cfg.train.frames_per_batch)
    batch = parts.reward_table(next(iter(collector)))
    collector.shutdown()
    parts.router.compute_advantages(batch)
    chunks = sequence_chunks(batch.select(*update_keys(parts.router)), cfg.model.seq_len)
    with set_recurrent_mode(True):
        losses = parts.router(chunks[: cfg.train.minibatch_size // cfg.model.seq_len])
    kls = {k: float(v) for k, v in losses.items(True, True) if k[-1] in ("kl_approx", "clip_fraction")}
    assert len(kls) >= 2 * len(parts.groups)
    assert all(abs(v) < 1e-6 for v in kls.values()), kls


def test_gradients_flow_through_time_inside_a_chunk_and_stop_at_an_episode_start():
    _, parts, batch = _collected("gru")
    chunks = sequence_chunks(batch.select(*update_keys(parts.router)), SEQ)
    is_init = chunks.get("is_init").squeeze(-1)
    row = int(is_init[:, 2:-2].any(-1).nonzero()[0])  # an episode start well inside the chunk
    start = int(is_init[row, 2:-2].nonzero()[0]) + 2
    td = chunks[row : row + 1].clone()
    obs = td.get((G, "observation")).clone().requires_grad_(True)
    td.set((G, "observation"), obs)
    lp = _log_prob(parts.router.losses[G].actor_network, td)
    lp[0, start + 1].sum().backward()  # a step just after the episode start
    grad = obs.grad[0].abs().sum(dim=(-2, -1))  # per time step
    assert grad[start] > 0 and grad[start + 1] > 0, "through time, inside the episode"
    assert grad[:start].sum() == 0, "nothing across the episode start"
    assert grad[start + 2 :].sum() == 0, "nothing from the future"
    obs.grad = None
    lp = _log_prob(parts.router.losses[G].actor_network, td)
    lp[0, start - 1].sum().backward()  # the previous episode: reaches back to the chunk's first step
    grad = obs.grad[0].abs().sum(dim=(-2, -1))
    assert grad[0] > 0 and grad[start:].sum() == 0


@pytest.mark.parametrize("recurrent", [True, False], ids=["chunks", "step-by-step"])
def test_agents_and_envs_never_share_a_hidden_state(recurrent):
    _, parts, batch = _collected("gru")
    chunks = sequence_chunks(batch.select(*update_keys(parts.router)), SEQ)[:4]
    actor = parts.router.losses[G].actor_network
    perturbed = chunks.clone()
    obs = perturbed.get((G, "observation")).clone()
    obs[0, 0, 0] += 5.0  # chunk 0, step 0, agent 0
    perturbed.set((G, "observation"), obs)
    with torch.no_grad(), set_recurrent_mode(recurrent):
        if recurrent:
            a, b = _log_prob(actor, chunks), _log_prob(actor, perturbed)
        else:  # step by step, each step from its stored state: only the perturbed step moves
            a = actor.get_dist(chunks.reshape(-1)).log_prob(chunks.reshape(-1).get((G, "action"))).reshape(4, SEQ, 2)
            b = (
                actor.get_dist(perturbed.reshape(-1))
                .log_prob(perturbed.reshape(-1).get((G, "action")))
                .reshape(4, SEQ, 2)
            )
    moved = (a - b).abs() > 0
    assert moved[0, 0, 0]
    assert not moved[0, :, 1].any(), "the other agent of the same env"
    assert not moved[1:].any(), "the other chunks (other envs or other times)"
    if recurrent:
        episode_end = chunks.get("is_init")[0, 1:].squeeze(-1).nonzero()
        last = int(episode_end[0]) + 1 if len(episode_end) else SEQ
        assert moved[0, 1:last, 0].all(), "the perturbed agent's later steps of the same episode"


def test_recurrent_critic_values_are_the_collected_ones():
    """The critic runs in the collection policy (its states are collected); GAE's values equal
    what it wrote then, and the next value equals the following step's value inside an episode."""
    cfg = _config("gru", "loss.value_norm=none")
    parts = build(cfg)
    collector = build_collector(cfg, parts.env, parts.router.policy, total_frames=cfg.train.frames_per_batch)
    batch = parts.reward_table(next(iter(collector)))
    collector.shutdown()
    keys = parts.groups[G].keys
    collected = batch.get(keys.value).clone()
    parts.router.compute_advantages(batch)
    assert_close(batch.get(keys.value), collected, atol=1e-6, rtol=0)
    nxt = batch.get(("next", *keys.value))
    done = batch.get(("next", "done")).squeeze(-1)
    same_episode = ~done[:, :-1]
    assert_close(nxt[:, :-1][same_episode], batch.get(keys.value)[:, 1:][same_episode], atol=1e-5, rtol=0)


def test_config_refuses_what_recurrent_updates_cannot_do():
    with pytest.raises(ConfigError, match="model.seq_len=7 must divide the 40 steps"):
        _config("gru", "model.seq_len=7")
    with pytest.raises(ConfigError, match="train.compile=true does not support recurrent models"):
        _config("gru", "train.compile=true")
    with pytest.raises(ConfigError, match="minibatch_size=55 must be a multiple of model.seq_len=10"):
        _config("gru", "train.minibatch_size=55", "train.frames_per_batch=240")


def test_a_checkpoint_of_the_earlier_layout_still_loads():
    """Recurrent runs checkpointed before the one GAE path held `_estimators.<group>.gamma/lmbda`
    (a second estimator with the loss's values), and every run before the entropy schedule became the
    training state's value held `losses.<group>.base_head_entropy_coeffs`: they still load, and resume
    does not refuse them."""
    from marl_ppo.run.resume import network_mismatch

    parts = build(load_config(overrides=[*SMALL, "env.num_envs=2", "model.kind=gru"]))
    old = dict(parts.router.state_dict())
    old["_estimators.agents.gamma"] = torch.tensor(0.99)
    old["_estimators.agents.lmbda"] = torch.tensor(0.9)
    old["losses.agents.base_head_entropy_coeffs"] = torch.tensor([0.01])
    assert network_mismatch(parts.router, {"router": old}) is None
    # loading them into the router goes through run/checkpoints.py (tests/run/test_checkpoint_formats.py)
