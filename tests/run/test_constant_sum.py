"""Constant-sum games are logged per seat and per agent, never as a mean that is 0 by construction."""

from __future__ import annotations

import torch

from marl_ppo.config import load_config
from marl_ppo.groups.specs import GroupKeys
from marl_ppo.run.build import build
from marl_ppo.run.metrics import constant_sum_metrics


def _batch(name, *overrides, steps=60):
    parts = build(load_config(name, overrides=["env.num_envs=4", *overrides]))
    with torch.no_grad():
        td = parts.env.rollout(steps, parts.policy, break_when_any_done=False)
    parts.env.close()
    return td, parts.groups


def test_each_seat_of_tictactoe_gets_its_win_draw_and_loss_rates():
    td, groups = _batch("tictactoe_two_groups")
    out = constant_sum_metrics(td, groups)
    done = td["next", "done"].squeeze(-1)
    first = td["next", "player_1", "episode_reward"][done].flatten()
    assert len(first) >= 10
    assert out["collect/player_1/win_rate"] == (first > 0).float().mean().item()
    assert out["collect/player_1/draw_rate"] == (first == 0).float().mean().item()
    assert out["collect/player_2/win_rate"] == out["collect/player_1/loss_rate"]
    assert sum(out[f"collect/player_2/{r}_rate"] for r in ("win", "draw", "loss")) == 1.0


def test_both_players_in_one_group_get_their_own_returns():
    """rock-paper-scissors with both seats in one group: the group's mean is 0 in every episode."""
    rps = ["env.kind=pettingzoo", "env.scenario=rps_v2", "env.continuous_actions=false", "env.max_steps=5"]
    td, groups = _batch(None, *rps, "env.kwargs={group_map: all_in_one_group}")
    (group,) = groups
    agents = groups[group].agents
    out = constant_sum_metrics(td, groups)
    done = td["next", "done"].squeeze(-1)
    returns = td[("next", *GroupKeys.for_group(group).episode_reward)][done].squeeze(-1)
    assert torch.allclose(returns.sum(-1), torch.zeros(())), "rps is zero-sum"
    for i, agent in enumerate(agents):
        assert out[f"collect/{group}/{agent}/episode_reward"] == returns[:, i].mean().item()
    assert not any(k.endswith("win_rate") for k in out)  # one group: no seat to compare with


def test_a_cooperative_task_gets_none_of_them():
    td, groups = _batch("navigation", "env.max_steps=10", steps=30)
    assert constant_sum_metrics(td, groups) == {}
