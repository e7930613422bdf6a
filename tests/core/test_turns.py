"""GAE through the steps a group does not act on (a turn-based game's other turns): known answers."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from marl_ppo.core.advantages import group_estimator, pass_through_padding
from marl_ppo.groups.specs import GroupKeys

KEYS = GroupKeys.for_group("p", mask=("p", "mask"))


def _batch(mask, reward, done, value, next_value):
    def col(x, dtype=torch.float32):
        return torch.tensor(x, dtype=dtype).reshape(1, len(x), 1, 1)

    present = torch.tensor(mask, dtype=torch.bool).reshape(1, len(mask), 1)
    nxt = {"p": {"train_reward": col(reward), "train_done": col(done, torch.bool)}}
    nxt["p"]["train_terminated"] = nxt["p"]["train_done"].clone()
    nxt["p"]["state_value"] = col(next_value)
    return TensorDict(
        {"p": {"mask": present, "state_value": col(value)}, "next": nxt}, batch_size=[1, len(mask)]
    ).auto_batch_size_(batch_dims=2)


@pytest.mark.parametrize("lmbda", [0.0, 0.5, 0.95])
def test_an_acting_step_bootstraps_past_the_opponents_turn_on_its_next_own_value(lmbda):
    """Acts at 0 and 2; its opponent's turn at 1 brings reward 0.5, the game ends on the opponent's turn
    at 3 with reward 1. The critic's values at 1 and 3 (never trained: 9.0) must not matter."""
    gamma = 0.9
    td = _batch(
        mask=[1, 0, 1, 0],
        reward=[0.0, 0.5, 0.0, 1.0],
        done=[0, 0, 0, 1],
        value=[0.1, 9.0, 0.2, 9.0],
        next_value=[9.0, 0.2, 9.0, 7.0],
    )
    pass_through_padding(td, KEYS, gamma)
    group_estimator(KEYS, gamma=gamma, lmbda=lmbda)(td)
    adv = td["p", "advantage"].flatten()
    # step 2: its last move; the game's end (reward 1, on the opponent's turn) is one step later
    assert adv[2].item() == pytest.approx(gamma * 1.0 - 0.2)
    # step 0: 0 + gamma * 0.5 + gamma^2 * V(2) - V(0), then lambda-weighted towards step 2's advantage
    td_error = gamma * 0.5 + gamma**2 * 0.2 - 0.1
    assert adv[0].item() == pytest.approx(td_error + (gamma * lmbda) ** 2 * (gamma * 1.0 - 0.2))


def test_a_group_that_acts_at_every_step_is_untouched():
    td = _batch([1, 1, 1], [0.0, 1.0, 0.0], [0, 0, 1], [0.1, 0.2, 0.3], [0.2, 0.3, 5.0])
    before = td.clone()
    pass_through_padding(td, KEYS, 0.9)
    assert torch.equal(td["p", "state_value"], before["p", "state_value"])
    assert torch.equal(td["next", "p", "state_value"], before["next", "p", "state_value"])
