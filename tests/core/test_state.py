"""The core keeps its state in :class:`~marl_ppo.core.state.TrainState` and draws nothing from the global RNG.

* advantages and the PPO update leave the global torch RNG exactly as it was: the minibatch order
  comes from the training state's own generator, so two routers from the same weights and the same
  generator seed end with the same parameters whatever the global RNG holds;
* a TrainState's state_dict carries the generator, and loading it resumes the same stream.
"""

from __future__ import annotations

import copy

import torch
from torchrl.envs.libs.vmas import VmasEnv

from marl_ppo import AggregatedStep, GroupRouter, RewardTable, read_group_specs
from marl_ppo.core.state import TrainState
from marl_ppo.core.update import ppo_update


def _batch_and_router():
    env = VmasEnv("navigation", num_envs=4, continuous_actions=True, seed=0, max_steps=6, n_agents=2)
    groups = read_group_specs(env)
    table = RewardTable.own_rewards(groups).bind(groups, env)
    router = GroupRouter.from_specs(groups, hidden=(16,))
    with torch.no_grad():
        batch = table(env.rollout(6, router.policy, break_when_any_done=False))
    env.close()
    return batch, router


def _update(router, batch, seed):
    step = AggregatedStep(router, lr=1e-2)
    router.compute_advantages(batch)
    ppo_update(router, step, batch, num_epochs=2, minibatch_size=6, generator=torch.Generator().manual_seed(seed))
    return {k: v.clone() for k, v in router.state_dict().items()}


def test_advantages_and_update_leave_the_global_rng_alone():
    batch, router = _batch_and_router()
    twin = copy.deepcopy(router)
    torch.manual_seed(123)
    before = torch.get_rng_state()
    first = _update(router, batch.clone(), seed=7)
    assert torch.equal(torch.get_rng_state(), before), "the core drew from the global torch RNG"
    torch.manual_seed(999)  # another global state: the same update all the same
    second = _update(twin, batch.clone(), seed=7)
    assert all(torch.equal(first[k], second[k]) for k in first)
    third = _update(copy.deepcopy(twin), batch.clone(), seed=8)  # another order: other parameters
    assert any(not torch.equal(second[k], third[k]) for k in second)


def test_the_state_dict_carries_the_generator():
    net = torch.nn.Linear(2, 1)
    step = AggregatedStep(net, lr=0.1)

    def state():
        return TrainState(
            net,
            step,
            torch.optim.lr_scheduler.LambdaLR(step.optimizer, lambda it: 1.0),
            generator=torch.Generator().manual_seed(3),
        )

    a = state()
    torch.randperm(10, generator=a.generator)
    saved = a.state_dict()
    expected = torch.randperm(10, generator=a.generator)
    b = state()
    b.load_state_dict(saved)
    assert torch.equal(torch.randperm(10, generator=b.generator), expected)
