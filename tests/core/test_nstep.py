"""n-step returns (``loss.estimator=nstep``), against answers worked by hand.

``A_t = r_t + g r_{t+1} + ... + g^{n-1} r_{t+n-1} + g^n V(s_{t+n}) - V(s_t)``, cut at an episode's end: a
terminated step adds no value after it, a truncated one (or the batch's last step) bootstraps from the value
of its own next observation. The value target is ``A_t + V(s_t)``.
"""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from marl_ppo.core.advantages import NStepReturns, group_estimator
from marl_ppo.groups import GroupKeys

KEYS = GroupKeys.for_group("g")


def _batch(reward, value, next_value, done, terminated, agents: int = 1) -> TensorDict:
    """One env, T steps, ``agents`` agents with the same signals: ``[1, T, agents, 1]``."""

    def per_agent(x, dtype=torch.float32):
        return torch.tensor(x, dtype=dtype).reshape(1, -1, 1, 1).expand(1, len(x), agents, 1).clone()

    return TensorDict(
        {
            "g": {"state_value": per_agent(value)},
            "next": {
                "g": {
                    "state_value": per_agent(next_value),
                    "train_reward": per_agent(reward),
                    "train_done": per_agent(done, torch.bool),
                    "train_terminated": per_agent(terminated, torch.bool),
                }
            },
        },
        [1, len(reward)],
    )


def _returns(td, n: int, gamma: float = 0.5):
    est = group_estimator(KEYS, gamma=gamma, lmbda=0.95, estimator="nstep", nstep=n)
    assert isinstance(est, NStepReturns)
    out = est(td)
    return out["g", "advantage"][0, :, 0, 0].tolist(), out["g", "value_target"][0, :, 0, 0].tolist()


def test_two_step_returns_within_one_episode_bootstrap_from_the_value_two_steps_on():
    # values V(s_0..s_3) = 0, 10, 20, 30; V(s_4) = 40 (the next observation of the last step)
    td = _batch([1.0, 2.0, 3.0, 4.0], [0.0, 10.0, 20.0, 30.0], [10.0, 20.0, 30.0, 40.0], [0] * 4, [0] * 4)
    adv, target = _returns(td, n=2)
    # t=0: 1 + .5*2 + .25*20 = 7; t=1: 2 + .5*3 + .25*30 = 11; t=2: 3 + .5*4 + .25*40 = 15; t=3: 4 + .5*40 = 24
    assert target == pytest.approx([7.0, 11.0, 15.0, 24.0])
    assert adv == pytest.approx([7.0, 1.0, -5.0, -6.0])


def test_a_terminated_step_ends_the_sum_and_a_truncated_one_bootstraps_from_its_own_next_observation():
    # steps 0-1 one episode ending terminated at step 1; steps 2-3 another, truncated at step 3 (V(s'_3) = 8)
    value, next_value = [4.0, 4.0, 4.0, 4.0], [4.0, 100.0, 4.0, 8.0]  # 100: never read (terminal)
    done, terminated = [0, 1, 0, 1], [0, 1, 0, 0]
    adv, target = _returns(_batch([1.0] * 4, value, next_value, done, terminated), n=3)
    # t=0: 1 + .5*1 (terminal: nothing after) = 1.5; t=1: 1; t=2: 1 + .5*(1 + .5*8) = 3.5; t=3: 1 + .5*8 = 5
    assert target == pytest.approx([1.5, 1.0, 3.5, 5.0])
    assert adv == pytest.approx([t - 4.0 for t in target])


def test_one_step_is_the_td_error_and_a_long_horizon_is_the_monte_carlo_return():
    value = [1.0, 2.0, 3.0]
    td = _batch([1.0, 1.0, 1.0], value, [2.0, 3.0, 0.0], [0, 0, 1], [0, 0, 1])
    adv, _ = _returns(td.clone(), n=1)
    assert adv == pytest.approx([1 + 0.5 * 2 - 1, 1 + 0.5 * 3 - 2, 1 - 3])
    _, target = _returns(td, n=50)
    assert target == pytest.approx([1.75, 1.5, 1.0])  # the discounted rewards to the terminal step


def test_each_agent_and_each_env_copy_keep_their_own_returns():
    td = _batch([1.0, 1.0], [0.0, 0.0], [0.0, 0.0], [0, 0], [0, 0], agents=3)
    td["next", "g", "train_reward"][0, :, 1] = 2.0  # agent 1 gets twice the reward
    out = group_estimator(KEYS, gamma=0.5, lmbda=0.95, estimator="nstep", nstep=2)(td)["g", "advantage"]
    assert out[0, :, 0, 0].tolist() == pytest.approx([1.5, 1.0])
    assert out[0, :, 1, 0].tolist() == pytest.approx([3.0, 2.0])
    two = torch.stack([_batch([1.0, 0.0], [0.0] * 2, [0.0] * 2, [0, 0], [0, 0]), _batch([0.0, 1.0], [0.0] * 2,
                       [0.0] * 2, [0, 0], [0, 0])]).squeeze(1)  # fmt: skip
    both = group_estimator(KEYS, gamma=0.5, lmbda=0.95, estimator="nstep", nstep=2)(two)["g", "advantage"]
    torch.testing.assert_close(both[:, :, 0, 0], torch.tensor([[1.0, 0.0], [0.5, 1.0]]))


def test_a_team_signal_without_the_agent_dim_is_broadcast_over_the_agents_as_multiagent_gae_does():
    td = _batch([1.0, 1.0], [0.0, 0.0], [0.0, 0.0], [0, 0], [0, 0], agents=2)
    est = group_estimator(KEYS, gamma=0.5, lmbda=0.95, estimator="nstep", nstep=2)
    # torchrl's MultiAgentGAE rule: a team signal [*B, T, 1] is broadcast over the agents
    td["next", "g", "train_reward"] = torch.ones(1, 2, 1)
    out = est(td)["g", "advantage"]
    assert out.shape == (1, 2, 2, 1) and out[0, 0, :, 0].tolist() == pytest.approx([1.5, 1.5])
