"""The ``gnn`` model kind: a hand-computed message pass, equivariance, and a VMAS run.

* one layer on a 3-agent graph whose edges come from positions and a radius equals the message
  pass computed here agent by agent, edge by edge (an agent without neighbours gets zeros);
* permuting the agents permutes the outputs; moving an agent out of range cuts its edges;
* ``model.kind=gnn`` with ``topology=from_pos`` trains MAPPO on VMAS navigation through
  ``marl-ppo train``, for one seed and for two in one process;
* ``from_pos`` without positions, and a slice outside the observation, are refused in one line.
"""

from __future__ import annotations

import json

import pytest
import torch
from torchrl.data import Unbounded

from marl_ppo.cli import main
from marl_ppo.groups.specs import GroupSpec, inputs_spec
from marl_ppo.models.registry import MODEL_KINDS
from marl_ppo.options import ConfigError

KEY = ("g", "observation")


def _graph(n=3, obs=5, **options):
    group = GroupSpec(
        "g", tuple(f"a{i}" for i in range(n)), (KEY,), Unbounded(shape=(n, 2)), 0, ("g", "reward"),
        observation_spec=inputs_spec({KEY: Unbounded(shape=(n, obs))}, n),
    )  # fmt: skip
    options = {**MODEL_KINDS["gnn"].options, "topology": "from_pos", "radius": 1.0, "position": [0, 2], **options}
    torch.manual_seed(0)
    trunk = MODEL_KINDS["gnn"].build_trunk(
        group, role="actor", centralized=False, share_params=True, hidden=[6], activation="tanh", device=None,
        options=options,
    )  # fmt: skip
    return trunk.module.module


def test_one_layer_equals_the_message_pass_computed_by_hand():
    graph = _graph()
    obs = torch.randn(1, 3, 5)
    obs[0, :, :2] = torch.tensor([[0.0, 0.0], [0.6, 0.0], [5.0, 5.0]])  # 0 and 1 within 1.0, 2 alone
    layer = graph.layers[0]
    h0 = torch.tanh(graph.encoder[0](obs[0]))
    want = []
    for i in range(3):
        messages = []
        for j in range(3):
            rel = obs[0, j, :2] - obs[0, i, :2]
            if j != i and rel.norm() <= 1.0:
                edge = torch.cat([h0[j], rel, rel.norm().reshape(1)])
                messages.append(torch.tanh(layer.message(edge)))
        pooled = torch.stack(messages).mean(0) if messages else torch.zeros(6)
        want.append(torch.tanh(layer.update(torch.cat([h0[i], pooled]))))
    torch.testing.assert_close(graph(obs)[0], torch.stack(want))
    assert graph.adjacency(obs)[0].tolist() == [[False, True, False], [True, False, False], [False, False, False]]


def test_permuting_the_agents_permutes_the_outputs():
    graph = _graph(n=4, velocity=[2, 4], layers=2)
    obs = torch.randn(7, 4, 5)
    order = torch.tensor([2, 0, 3, 1])
    torch.testing.assert_close(graph(obs[:, order]), graph(obs)[:, order])


@pytest.mark.parametrize(
    "options, message",
    [
        ({"position": None}, "topology=from_pos needs the agents' positions: set model.options.gnn.position"),
        ({"position": [3, 7]}, "model.options.gnn.position must be [start, stop] within the observation's 5 features"),
        ({"topology": "ring"}, "model.options.gnn.topology must be full or from_pos, got 'ring'"),
    ],
)
def test_bad_gnn_options_are_refused_in_one_line(options, message):
    with pytest.raises(ConfigError) as info:
        _graph(**options)
    assert message in str(info.value)


@pytest.mark.parametrize("seeds", ["[0]", "[0,1]"])
def test_a_gnn_trains_mappo_on_vmas_navigation(tmp_path, capsys, seeds):
    args = [
        "env.num_envs=8", "env.max_steps=20", "env.kwargs.n_agents=3", "train.frames_per_batch=320",
        "train.total_frames=640", "train.minibatch_size=160", "model.hidden=[32]", "model.kind=gnn",
        "model.options.gnn={topology: from_pos, radius: 0.5, position: [0, 2], velocity: [2, 4]}",
        f"train.seeds={seeds}", "log.eval_episodes=2", "log.progress=false", "log.plot=false",
    ]  # fmt: skip
    assert main(["train", *args, f"log.root={tmp_path}", "log.name=gnn"]) == 0
    out = capsys.readouterr().out
    summaries = json.loads(out[out.index("\n[") + 1 :])
    assert [s["frames"] for s in summaries] == [640] * (seeds.count(",") + 1)
    state = torch.load(tmp_path / "gnn-seed0" / "checkpoints" / "last.pt", weights_only=True)["router"]
    assert any("layers.0.message.weight" in k for k in state)
