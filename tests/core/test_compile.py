"""``train.compile``: the update's losses under ``torch.compile`` compute what the eager ones do.

Known answer: a compiled router trains a few PPO epochs on a VMAS batch (the trainer's path), then
an eager router with the same weights and the compiled one compute the losses of one minibatch:
every loss term, every diagnostic and every gradient agree to float32 rounding. A second update
runs without recompiling. ``marl_ppo.models.activations.Tanh`` (ATen's
tanh inside the compiled graph) is part of what is compared: forward and backward.
"""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from marl_ppo.config import load_config
from marl_ppo.core.aggregate import AggregatedStep, total_loss
from marl_ppo.core.update import ppo_update, update_keys
from marl_ppo.models.activations import Tanh, aten_tanh
from marl_ppo.run.build import build

TINY = [
    "env.num_envs=4",
    "env.max_steps=10",
    "env.kwargs.n_agents=2",
    "train.frames_per_batch=80",
    "train.minibatch_size=20",
    "model.hidden=[32, 32]",
    "loss.entropy_coeff=0.01",
    "train.lr=3e-3",
    "log.progress=false",
    "log.plot=false",
]


@pytest.mark.slow
def test_compiled_losses_and_gradients_match_eager():
    eager, compiled = build(load_config(overrides=TINY)), build(load_config(overrides=[*TINY, "train.compile=true"]))
    for (name, a), (_, b) in zip(eager.router.state_dict().items(), compiled.router.state_dict().items()):
        assert torch.equal(a, b), name  # the same seed: the same weights, and compiling kept the keys
    with torch.no_grad():
        batch = eager.env.rollout(20, eager.router.policy, break_when_any_done=False)
    batch = eager.reward_table(batch)
    eager.router.compute_advantages(batch)
    # a few compiled epochs move the policy (ratios leave 1); then both routers hold those weights.
    # Comparing whole runs instead would compare chaos: Adam's first steps move every weight by about
    # lr whatever the gradient's size, so float32 rounding in tiny gradients grows step after step.
    step = AggregatedStep(compiled.router, lr=1e-3)
    stats = ppo_update(compiled.router, step, batch.clone(), num_epochs=3, minibatch_size=20)
    assert compiled.router._compiled_call_impl is not None and eager.router._compiled_call_impl is None
    assert torch.isfinite(stats["loss"])
    # a later update reuses the compiled graph: nothing the update does invalidates its guards
    with torch.compiler.set_stance("fail_on_recompile"):
        ppo_update(compiled.router, step, batch.clone(), num_epochs=1, minibatch_size=20)
    eager.router.load_state_dict(compiled.router.state_dict())
    minibatch = batch.select(*update_keys(eager.router)).reshape(-1)[:40]
    out = {}
    for name, parts in (("eager", eager), ("compiled", compiled)):
        parts.router.zero_grad(set_to_none=True)
        losses = parts.router(minibatch)
        total_loss(losses).backward()
        out[name] = losses
    assert float(out["eager"]["agents", "clip_fraction"]) > 0, "the policy did not move: the check is too easy"
    for key in out["eager"].keys(include_nested=True, leaves_only=True):
        assert_close(out["compiled"].get(key), out["eager"].get(key), rtol=1e-4, atol=1e-6, msg=str(key))
    for (name, a), (_, b) in zip(eager.router.named_parameters(), compiled.router.named_parameters()):
        assert a.grad is not None and a.grad.abs().sum() > 0, name
        assert_close(b.grad, a.grad, rtol=1e-4, atol=1e-7, msg=name)


def test_tanh_is_nn_tanh_in_eager_and_compiled():
    x = torch.randn(64, 8, requires_grad=True)
    assert isinstance(Tanh(), torch.nn.Tanh) and list(Tanh().state_dict()) == []
    y = Tanh()(x)
    (g,) = torch.autograd.grad(y.square().sum(), x)
    assert torch.equal(y, torch.tanh(x))
    y_op = aten_tanh(x)
    (g_op,) = torch.autograd.grad(y_op.square().sum(), x)
    assert torch.equal(y_op, y)
    assert_close(g_op, g)  # the custom op's backward: grad * (1 - y^2), ATen's tanh_backward
