"""PerAgentMLP: torchrl's MultiAgentMLP(share_params=False) run as batched matmuls, same values and parameters."""

import pytest
import torch
from torch import nn
from torchrl.modules import MultiAgentMLP

from marl_ppo.models.mlp import PerAgentMLP


def _nets(centralized: bool, activation=nn.Tanh, seed: int = 0):
    kwargs = dict(
        n_agent_inputs=5,
        n_agent_outputs=3,
        n_agents=4,
        centralized=centralized,
        share_params=False,
        depth=2,
        num_cells=[16, 8],
        activation_class=activation,
    )
    torch.manual_seed(seed)
    ours = PerAgentMLP(**kwargs)
    torch.manual_seed(seed)
    theirs = MultiAgentMLP(**kwargs)
    return ours, theirs


def _by_hand(net: MultiAgentMLP, agent: int, activation=nn.Tanh) -> nn.Sequential:
    """Agent ``agent``'s own network: plain Linear layers holding its slice of the stacked weights."""
    layers, keys = [], sorted((k for k in net.params.keys() if (k, "weight") in net.params.keys(True)), key=int)
    for i, key in enumerate(keys):
        weight = net.params[key, "weight"][agent].detach()
        linear = nn.Linear(weight.shape[1], weight.shape[0])
        linear.weight.data.copy_(weight)
        linear.bias.data.copy_(net.params[key, "bias"][agent].detach())
        layers += [linear] + ([activation()] if i < len(keys) - 1 else [])
    return nn.Sequential(*layers)


@pytest.mark.parametrize("centralized", [False, True])
def test_each_agent_runs_its_own_weights(centralized):
    ours, _ = _nets(centralized)
    x = torch.randn(6, 4, 5)
    out = ours(x)
    for agent in range(4):
        own = _by_hand(ours, agent)
        inp = x.flatten(-2) if centralized else x[:, agent]
        torch.testing.assert_close(out[:, agent], own(inp))


@pytest.mark.parametrize("centralized", [False, True])
@pytest.mark.parametrize("batch", [(), (7,), (3, 2)])
@pytest.mark.parametrize("activation", [nn.Tanh, nn.ReLU])
def test_same_values_and_gradients_as_torchrl(centralized, batch, activation):
    ours, theirs = _nets(centralized, activation)
    assert all((a == b).all() for a, b in zip(ours.state_dict().values(), theirs.state_dict().values()))
    x = torch.randn(*batch, 4, 5)
    a, b = ours(x), theirs(x)
    assert a.shape == b.shape == (*batch, 4, 3)
    torch.testing.assert_close(a, b)
    a.square().sum().backward()
    b.square().sum().backward()
    for (name, p), q in zip(ours.named_parameters(), theirs.parameters()):
        torch.testing.assert_close(p.grad, q.grad, msg=name)


def test_checkpoints_are_multi_agent_mlp_s():
    ours, theirs = _nets(False, seed=1)
    other, _ = _nets(False, seed=2)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    other.load_state_dict(theirs.state_dict())
    x = torch.randn(3, 4, 5)
    torch.testing.assert_close(other(x), theirs(x))


def test_several_inputs_are_joined_and_a_wrong_agent_count_is_named():
    ours, theirs = _nets(False)
    x = torch.randn(2, 4, 5)
    torch.testing.assert_close(ours(x[..., :2], x[..., 2:]), theirs(x))
    with pytest.raises(ValueError, match=r"expected observations \[\*B, 4, obs_dim\], got \[2, 3, 5\]"):
        ours(torch.randn(2, 3, 5))
