"""No host read of a tensor value per collection step or per minibatch: on an accelerator, each one
(``bool(t)``, ``t.item()``, ...) makes the host wait for the device.

Counted on CPU, where such reads cost nothing and are therefore easy to add unnoticed: a
``TorchFunctionMode`` sees every ``Tensor.__bool__``/``item``/``tolist``/``__int__``/``__float__``/
``__index__``. Before this was checked, torchrl's ``TanhNormal`` read its bounds three times at
every construction (every collection step and every minibatch) and torchrl's PPO entropy read its
finiteness once per minibatch; :class:`~marl_ppo.models.distributions.StableTanhNormal` and
:mod:`marl_ppo.core.losses` avoid those, and the control test shows the counter sees torchrl's.
"""

from __future__ import annotations

import collections
import traceback

import pytest
import torch
from torch.overrides import TorchFunctionMode
from torchrl.envs.libs.vmas import VmasEnv
from torchrl.modules.distributions import TanhNormal

from marl_ppo import RewardTable, read_group_specs
from marl_ppo.core.aggregate import AggregatedStep
from marl_ppo.core.router import GroupRouter
from marl_ppo.core.update import ppo_update

_READS = {
    torch.Tensor.__bool__,
    torch.Tensor.item,
    torch.Tensor.tolist,
    torch.Tensor.__int__,
    torch.Tensor.__float__,
    torch.Tensor.__index__,
}


class HostReads(TorchFunctionMode):
    """Counts host reads of tensor values, by the line that made them."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: collections.Counter = collections.Counter()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in _READS:
            caller = traceback.extract_stack()[-2]
            self.lines[f"{caller.filename}:{caller.lineno}"] += 1
        return func(*args, **(kwargs or {}))

    @property
    def total(self) -> int:
        return sum(self.lines.values())


def _router_and_batch(continuous: bool, entropy_coeff: float):
    torch.manual_seed(0)
    env = VmasEnv("navigation", num_envs=4, continuous_actions=continuous, seed=0, max_steps=8)
    groups = read_group_specs(env)
    table = RewardTable.own_rewards(groups).bind(groups, env)
    router = GroupRouter.from_specs(groups, hidden=(16,), entropy_coeff=entropy_coeff)
    with torch.no_grad():
        batch = table(env.rollout(8, router.policy, break_when_any_done=False))
    router.compute_advantages(batch)
    return router, batch


@pytest.mark.parametrize("continuous", [True, False], ids=["continuous", "discrete"])
@pytest.mark.parametrize("entropy_coeff", [0.0, 0.01], ids=["entropy-logged", "entropy-trained"])
def test_no_host_read_in_a_policy_step_or_a_gradient_step(continuous, entropy_coeff):
    router, batch = _router_and_batch(continuous, entropy_coeff)
    step = AggregatedStep(router, lr=1e-3)
    minibatch = batch.reshape(-1)[:16]
    for what, run in [
        ("policy step", lambda: router.policy(batch[:, 0].clone())),
        ("loss and optimizer step", lambda: step(router(minibatch))),
    ]:
        with HostReads() as reads:
            run()
        assert reads.total == 0, f"{what}: host reads at {dict(reads.lines)}"


def test_no_host_read_in_a_masked_turn_based_gradient_step():
    """Tic-tac-toe's action masks: torchrl's check of the masked entropy (a read per minibatch) is skipped, as
    that entropy is finite for any logits."""
    from marl_ppo.config import load_config
    from marl_ppo.run.build import build

    parts = build(load_config("tictactoe_two_groups", overrides=["env.num_envs=2", "loss.entropy_coeff=0.01"]))
    with torch.no_grad():
        batch = parts.reward_table(parts.env.rollout(12, parts.policy, break_when_any_done=False))
    parts.env.close()
    parts.router.compute_advantages(batch)
    minibatch = batch.reshape(-1)[:16]
    step = AggregatedStep(parts.router, lr=1e-3)
    with HostReads() as reads:
        step(parts.router(minibatch))
    assert reads.total == 0, dict(reads.lines)


def test_the_update_reads_the_host_once_per_epoch_on_an_accelerator():
    """``check_each_step=False`` (an accelerator's default): the finiteness of the epoch's losses only."""
    router, batch = _router_and_batch(True, 0.0)
    with HostReads() as reads:
        ppo_update(
            router, AggregatedStep(router, lr=1e-3), batch, num_epochs=3, minibatch_size=8, check_each_step=False
        )
    assert reads.total == 3, dict(reads.lines)


def test_the_counter_sees_torchrls_tanh_normal_reads():
    """The control: torchrl's own construction reads its bounds, and the counter sees it."""
    loc, scale = torch.zeros(4, 2), torch.ones(4, 2)
    with HostReads() as reads:
        TanhNormal(loc, scale, low=-torch.ones(2), high=torch.ones(2))
    assert reads.total >= 1


@pytest.mark.parametrize("seeds", [1, 3], ids=["one-run", "three-seeds"])
def test_the_lean_vmas_collector_reads_the_host_once_per_step(seeds):
    """Balance episodes end at different steps in different envs (VMAS resets them one by one): the
    collector's only read is each step's done column (VMAS's ``reset_at`` takes an env index), not a
    ``done.any()``, a ``mask.all()``, the indices and a count as before. The same with three seeds'
    policies stacked over one simulator (``train.seeds``). VMAS's own step reads the host too (its
    action asserts and collision culling: about 29 reads a step here), which no collector can avoid."""
    from marl_ppo.collect.lean_vmas import lean_vmas_collector
    from marl_ppo.config import load_config
    from marl_ppo.envs import make_env
    from marl_ppo.run.build import build

    cfg = load_config(
        overrides=[
            "env.scenario=balance",
            "env.kwargs={}",
            "env.num_envs=6",
            "env.max_steps=60",
            "model.hidden=[16]",
            f"train.seeds={list(range(seeds))}",
        ]
    )
    if seeds == 1:
        parts = build(cfg)
        env, policy = parts.env, parts.router.policy
    else:
        from marl_ppo.core.seeds import SeedStack
        from marl_ppo.run.seeds import seed_config, seed_policy

        routers = [build(seed_config(cfg, s)).router for s in range(seeds)]
        env, policy = make_env(cfg.env, seed=0, num_envs=seeds * 6), seed_policy(SeedStack(routers))
    steps = 60
    collector = lean_vmas_collector(env, policy, frames_per_batch=steps * seeds * 6, total_frames=-1)
    assert collector is not None
    try:
        with HostReads() as reads:
            batch = next(iter(collector))
    finally:
        collector.shutdown()
    done = batch.get(("next", "done")).squeeze(-1)
    assert (done.any(0) & ~done.all(0)).any()  # some steps reset some envs, not all
    ours = {line: n for line, n in reads.lines.items() if "/marl_ppo/" in line}
    assert sum(ours.values()) == steps and len(ours) == 1, ours
    assert reads.total > steps  # the counter sees VMAS's own reads
