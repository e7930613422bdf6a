"""``model.agent_id``: each agent's one-hot index beside its input (EPyMARL's ``obs_agent_id``).

Known answers: a shared linear layer that reads only the id part gives each agent its own row of the
weight; a centralised one gives each agent the value of [all observations, its id]; the option reaches
the policy and critic of every model kind (their first or output layer grows by ``n_agents`` inputs), and
an agent-id policy is refused for the one-agent-per-row export, whose rows have no place in the group.
"""

from __future__ import annotations

import pytest
import torch

from marl_ppo.config import ConfigError, load_config
from marl_ppo.export import ExportError, policy_graph
from marl_ppo.models.mlp import SharedAgentMLP
from marl_ppo.run.build import build

TINY = ["env.num_envs=2", "env.max_steps=5", "model.hidden=[8]", "log.progress=false", "log.plot=false"]


def _linear(net: SharedAgentMLP) -> torch.nn.Linear:
    return net.net[-1]


def test_a_shared_layer_reading_only_the_id_gives_each_agent_its_own_row():
    net = SharedAgentMLP(4, 2, n_agents=3, centralized=False, hidden=(), activation_class=torch.nn.Tanh, agent_id=True)
    layer = _linear(net)
    assert layer.in_features == 4 + 3
    with torch.no_grad():
        layer.weight.zero_()
        layer.weight[:, 4:] = torch.tensor([[1.0, 2.0, 3.0], [10.0, 20.0, 30.0]])
        layer.bias.zero_()
    out = net(torch.randn(5, 3, 4))
    assert out.shape == (5, 3, 2)
    want = torch.tensor([[1.0, 10.0], [2.0, 20.0], [3.0, 30.0]])  # agent i: column i of the id weights
    torch.testing.assert_close(out, want.expand(5, 3, 2))


def test_a_centralised_layer_values_all_observations_beside_each_agents_id():
    net = SharedAgentMLP(2, 1, n_agents=2, centralized=True, hidden=(), activation_class=torch.nn.Tanh, agent_id=True)
    layer = _linear(net)
    assert layer.in_features == 2 * 2 + 2
    with torch.no_grad():
        layer.weight.copy_(torch.tensor([[1.0, 1.0, 1.0, 1.0, 100.0, 200.0]]))
        layer.bias.zero_()
    obs = torch.tensor([[[1.0, 2.0], [3.0, 4.0]]])  # sum 10
    torch.testing.assert_close(net(obs), torch.tensor([[[110.0], [210.0]]]))


def test_without_the_option_nothing_changes():
    torch.manual_seed(0)
    plain = SharedAgentMLP(4, 2, n_agents=3, centralized=False, hidden=(8,), activation_class=torch.nn.Tanh)
    assert _linear(plain).in_features == 8 and plain.net[0].in_features == 4


@pytest.mark.parametrize("kind", ["mlp", "gru"])
def test_the_option_reaches_policy_and_critic_of_a_model_kind(kind, tmp_path):
    """A plain MLP reads the id in its first layer; after a trunk (gru), the output layers (the heads', the
    value's) read it beside the trunk's features: the actor's and the critic's layer each grow by 3 inputs."""
    widths, ided_nets = {}, {}
    for ided in (False, True):
        cfg = load_config(
            overrides=[*TINY, "env.kwargs.n_agents=3", f"model.kind={kind}", f"model.agent_id={str(ided).lower()}",
                       f"log.root={tmp_path}"]
        )  # fmt: skip
        parts = build(cfg)
        try:
            nets = [m for m in parts.router.modules() if isinstance(m, SharedAgentMLP)]
            widths[ided] = sum(m.net[0].in_features for m in nets)
            ided_nets[ided] = sum(m.agent_id for m in nets)
        finally:
            parts.env.close()
    assert ided_nets == {False: 0, True: 2}  # the actor's and the critic's
    assert widths[True] - widths[False] == 2 * 3


def test_one_agent_per_row_export_and_the_global_critic_are_refused(tmp_path):
    cfg = load_config(overrides=[*TINY, "env.kwargs.n_agents=2", "model.agent_id=true", f"log.root={tmp_path}"])
    parts = build(cfg)
    try:
        with pytest.raises(ExportError, match=r"an agent id \(model.agent_id=true"):
            policy_graph(parts.router.losses["agents"].actor_network, parts.groups["agents"], layout="agent")
    finally:
        parts.env.close()
    with pytest.raises(ConfigError, match="model.agent_id=true: the global critic"):
        load_config(overrides=["model.agent_id=true", "model.critic=global"])
