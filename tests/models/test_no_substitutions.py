"""No silent substitutions, through ``marl-ppo train`` where a user meets them:

* ``model.kind=deepsets`` on VMAS navigation (no set entry) says that its policy (and an IPPO critic) is
  an MLP on the vectors and names ``model.critic_kind=deepsets``; a centralised DeepSets critic, or a
  group with a set entry, is not warned;
* a GNN's ``radius`` under ``topology: full`` (where no radius is read) is refused in one line, for the
  run's options and a group's, before any run directory; with ``topology: from_pos`` it is taken.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from torchrl.data import Unbounded

from marl_ppo.cli import main
from marl_ppo.groups.specs import GroupSpec, inputs_spec
from marl_ppo.models.registry import MODEL_KINDS

NAVIGATION = ["navigation", "env.num_envs=2", "env.kwargs.n_agents=2", "train.num_threads=1", "model.hidden=[8]"]
# a budget of one small batch: were a refusal missing, the run would end in seconds
NAVIGATION += ["env.max_steps=10", "train.frames_per_batch=20", "train.total_frames=20", "train.minibatch_size=20"]
NAVIGATION += ["train.num_epochs=1", "log.eval_every=0", "log.progress=false", "log.plot=false"]


def _deepsets_warnings(*overrides: str) -> list[str]:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert main(["train", *NAVIGATION, *overrides, "--dry-run"]) == 0
    return [str(w.message) for w in seen if "'deepsets'" in str(w.message)]


def test_deepsets_without_a_set_entry_says_its_policy_is_an_mlp(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (message,) = _deepsets_warnings("model.kind=deepsets")  # MAPPO: the critic is a DeepSets over the agents
    assert message.startswith(
        "group 'agents': model kind 'deepsets' found no set entry [N, F] among its observation entries "
        "{'observation': [18]}: its policy is an MLP on the vectors"
    )
    assert "model.kind=mlp model.critic_kind=deepsets" in message
    ippo = _deepsets_warnings("model.kind=deepsets", "loss.algorithm=ippo")
    assert [m.split(" is an MLP")[0].split("its ")[-1] for m in ippo] == ["policy", "decentralised critic"]
    assert _deepsets_warnings("model.critic_kind=deepsets") == []
    assert list(tmp_path.iterdir()) == []


def test_deepsets_on_a_set_entry_is_not_warned():
    key = ("g", "others")
    group = GroupSpec("g", ("a", "b"), (key,), Unbounded(shape=(2, 3)), 0, ("g", "reward"),
                      observation_spec=inputs_spec({key: Unbounded(shape=(2, 5, 4))}, 2))  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        trunk = MODEL_KINDS["deepsets"].build_trunk(
            group, role="actor", centralized=False, share_params=True, hidden=[8], activation="tanh"
        )
    assert trunk.module.module(torch.zeros(3, 2, 5, 4)).shape == (3, 2, 8)


@pytest.mark.parametrize(
    "options, where",
    [
        (["model.options.gnn.radius=0.5"], "model.options.gnn"),
        (["model.options.gnn={radius: 0.5, topology: full}"], "model.options.gnn"),
        (["model.groups.agents.options={gnn: {radius: 2}}"], "model.groups.agents.options.gnn"),
        (  # the run's radius, the group's full topology: the group's key
            [
                "model.options.gnn={topology: from_pos, radius: 0.5, position: [0, 2]}",
                "model.groups.agents.options={gnn: {topology: full}}",
            ],
            "model.groups.agents.options.gnn",
        ),  # fmt: skip
    ],
)
def test_a_gnn_radius_under_full_topology_is_refused_in_one_line(tmp_path, capsys, monkeypatch, options, where):
    monkeypatch.chdir(tmp_path)
    assert main(["train", *NAVIGATION, "model.kind=gnn", *options, f"log.root={tmp_path / 'runs'}"]) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err
    assert f"ConfigError: {where}.radius=" in err and "with topology=full: every agent hears every other" in err
    assert f"set {where}.topology=from_pos (and its position slice), or leave the radius out" in err
    assert list(tmp_path.iterdir()) == []


def test_a_gnn_radius_with_from_pos_is_taken(capsys):
    gnn = "model.options.gnn={topology: from_pos, radius: 0.5, position: [0, 2]}"
    assert main(["train", *NAVIGATION, "model.kind=gnn", gnn, "--print-config"]) == 0
    assert "radius: 0.5" in capsys.readouterr().out
