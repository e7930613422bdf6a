"""``model.critic=global``: one critic over every group's observations (torchrl's CrossGroupCritic)."""

from __future__ import annotations

import pytest
import torch
from torchrl.envs.libs.vmas import VmasEnv

from marl_ppo import GroupRouter, RewardTable, read_group_specs
from marl_ppo.config import ModelConfig, load_config
from marl_ppo.core.aggregate import AggregatedStep
from marl_ppo.run.build import build


@pytest.fixture(scope="module")
def tag():
    torch.manual_seed(0)
    env = VmasEnv("simple_tag", num_envs=4, continuous_actions=True, seed=0, max_steps=8)
    groups = read_group_specs(env)
    router = GroupRouter.from_specs(groups, model=ModelConfig(hidden=[32, 32], critic="global"))
    table = RewardTable.own_rewards(groups).bind(groups, env)
    with torch.no_grad():
        batch = table(env.rollout(8, router.policy, break_when_any_done=False))
    return groups, router, router.compute_advantages(batch)


def test_one_groups_loss_trains_the_encoder_of_the_other_groups_observations(tag):
    groups, router, batch = tag
    critic = router.losses["adversary"].critic_network
    assert critic is router.losses["agent"].critic_network, "one critic module for every group"
    router.zero_grad()
    router(batch)["adversary", "loss_critic"].backward()
    encoder = critic.module.encoders["agent"][0].weight
    assert encoder.grad is not None and encoder.grad.abs().sum() > 0
    # and the other group's value head gets nothing from the adversary's loss
    head = critic.module.group_heads["agent"].weight
    assert head.grad is None or head.grad.abs().sum() == 0


def test_its_parameters_appear_once_in_the_optimizer(tag):
    _, router, batch = tag
    step = AggregatedStep(router, lr=1e-3)
    params = [p for group in step.optimizer.param_groups for p in group["params"]]
    assert len(params) == len({id(p) for p in params})
    critic = router.losses["agent"].critic_network
    for p in critic.parameters():
        assert sum(q is p for q in params) == 1
    before = critic.module.encoders["agent"][0].weight.detach().clone()
    step(router(batch))
    assert not torch.equal(before, critic.module.encoders["agent"][0].weight)


def test_values_depend_on_every_group(tag):
    groups, router, batch = tag
    critic = router.losses["agent"].critic_network
    td = batch[:, :1].clone()
    v0 = critic(td.clone()).get(("agent", "state_value"))
    obs = td.get(("adversary", "observation"))
    td.set(("adversary", "observation"), obs + 1.0)
    v1 = critic(td).get(("agent", "state_value"))
    assert not torch.allclose(v0, v1), "the agent's value reads the adversaries' observations"


def test_turn_based_games_are_refused():
    cfg = load_config("configs/tictactoe_two_groups.yaml", overrides=["model.critic=global"])
    with pytest.raises(ValueError, match=r"every group to act at every step.*player_2"):
        build(cfg)


def test_config_refuses_global_critic_without_mappo():
    from marl_ppo.config import ConfigError

    with pytest.raises(ConfigError, match="model.critic=global is a centralised critic"):
        load_config(overrides=["model.critic=global", "loss.algorithm=ippo"])
