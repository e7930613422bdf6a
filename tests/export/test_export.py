"""Exported policies act as the torch policy does: every model kind, every action form, every format.

* Each case builds a real run's parts (VMAS navigation, VMAS with communication, tic-tac-toe with its
  mask, a picture env with a CNN and a GRU), plays a few deterministic steps with the torch policy,
  and feeds the same observations to each exported file: floats within 1e-5, discrete actions equal.
  (The export itself already checked each file on random inputs; these are real observations.)
* A recurrent policy's exported state, carried by the caller over a 20-step episode, gives the torch
  policy's actions at every step.
* ``layout=agent`` (one agent per row) equals the group layout row for row, and is refused for agents
  with their own parameters; ``outputs=params`` gives each head's distribution parameters.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from tensordict import TensorDict
from torchrl.data import Unbounded
from torchrl.envs import ExplorationType, set_exploration_type

from marl_ppo.config import load_config
from marl_ppo.export import ExportError, export_policy, policy_graph
from marl_ppo.export.formats import FORMATS
from marl_ppo.groups.specs import GroupKeys, GroupSpec, inputs_spec
from marl_ppo.models.actor import build_actor
from marl_ppo.run.build import build
from tests.envs import custom_envs

pytestmark = pytest.mark.filterwarnings("ignore")

ALL = list(FORMATS)
TINY = ["env.num_envs=3", "env.max_steps=8", "model.hidden=[16]", "log.progress=false", "log.plot=false"]
DEPOT = f"{Path(custom_envs.__file__)}:make_image_depot"
CASES = {
    "mlp_shared": ["env.kwargs.n_agents=2"],
    "mlp_unshared": ["env.kwargs.n_agents=2", "model.share_params=false"],
    "mlp_agent_id": ["env.kwargs.n_agents=3", "model.agent_id=true"],
    "gru_agent_id": ["env.kwargs.n_agents=2", "model.kind=gru", "model.agent_id=true"],
    "gru": ["env.kwargs.n_agents=2", "model.kind=gru", "model.options={gru: {rnn_hidden: 8}}"],
    "lstm_unshared": ["env.kwargs.n_agents=2", "model.kind=lstm", "model.share_params=false"],
    "gnn": ["env.kwargs.n_agents=3", "model.kind=gnn"],
    "comm_composite": ["env.scenario=simple_reference", "env.comm=true"],
    "cnn_gru_picture": [
        "env.kind=custom", f"env.factory={DEPOT}", "model.groups={scout: {kind: [cnn, gru]}}",
        "model.options={cnn: {channels: [4], kernels: [4], strides: [4], paddings: [0]}, gru: {rnn_hidden: 8}}",
    ],
    "masked_tictactoe": ["env.kind=pettingzoo", "env.scenario=tictactoe_v3", "env.num_envs=2", "env.max_steps=9"],
}  # fmt: skip


def _parts(case: str, tmp_path: Path):
    cfg = load_config(overrides=[*TINY, *CASES[case], f"log.root={tmp_path}"])
    return build(cfg)


def _play(parts, steps: int = 6) -> list[TensorDict]:
    """``steps`` steps of the torch policy, deterministic: each step's tensordict (inputs and actions)."""
    out = []
    with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
        td = parts.env.reset()
        for _ in range(steps):
            td = parts.policy(td)
            out.append(td.clone())
            td = parts.env.step_and_maybe_reset(td)[1]
    return out


def _flat(td: TensorDict, key) -> np.ndarray:
    """An entry of a batched step as the graph's rows: ``[copies, ...]`` (env batch dims folded)."""
    value = td.get(key)
    return value.reshape(-1, *value.shape[td.batch_dims :]).numpy()


@pytest.mark.parametrize("case", list(CASES))
def test_every_format_acts_as_the_torch_policy_on_real_observations(case, tmp_path):
    parts = _parts(case, tmp_path)
    try:
        steps = _play(parts)
        for g in parts.router.groups:
            actor, group = parts.router.losses[g].actor_network, parts.groups[g]
            graph = policy_graph(actor, group)
            files = export_policy(graph, group, ALL, tmp_path / g)
            record = json.loads((tmp_path / g / "policy.json").read_text())
            assert sorted(record["files"]) == sorted(ALL) and record["agents"] == list(group.agents)
            runners = {f: FORMATS[f].run(path, graph) for f, path in files.items()}
            # the state a recurrent policy read at each step was written by the torch policy the step before
            for td in steps:
                inputs = [_flat(td, p.key) for p in graph.inputs]
                for f, run in runners.items():
                    got = run(inputs)
                    for port, value in zip(graph.outputs, got):
                        want = _flat(td, port.key)
                        if np.issubdtype(want.dtype, np.floating):
                            np.testing.assert_allclose(value, want, atol=1e-5, rtol=0, err_msg=f"{f} {port.name}")
                        else:
                            np.testing.assert_array_equal(value, want, err_msg=f"{f} {port.name}")
    finally:
        parts.env.close()


def test_the_exported_ports_name_heads_masks_and_state(tmp_path):
    comm = _parts("comm_composite", tmp_path)
    lstm = _parts("lstm_unshared", tmp_path)
    game = _parts("masked_tictactoe", tmp_path)
    try:
        speaker = policy_graph(comm.router.losses["agents"].actor_network, comm.groups["agents"])
        assert [p.name for p in speaker.outputs] == ["action.move", "action.comm"]
        params = policy_graph(comm.router.losses["agents"].actor_network, comm.groups["agents"], outputs="params")
        assert [p.name for p in params.outputs] == ["params.move.loc", "params.move.scale", "params.comm.logits"]
        rnn = policy_graph(lstm.router.losses["agents"].actor_network, lstm.groups["agents"])
        assert [p.name for p in rnn.inputs] == ["observation", "actor_hidden", "actor_cell", "is_init"]
        assert [p.name for p in rnn.outputs] == ["action", "next.actor_hidden", "next.actor_cell"]
        g = next(iter(game.router.groups))
        board = policy_graph(game.router.losses[g].actor_network, game.groups[g])
        assert [(p.name, p.dtype) for p in board.inputs][-1] == ("action_mask", "bool")
        assert board.outputs[0].dtype == "int64"
    finally:
        for parts in (comm, lstm, game):
            parts.env.close()


@pytest.mark.parametrize("fmt", ALL)
def test_a_recurrent_policy_carried_by_its_exported_state_matches_over_20_steps(fmt, tmp_path):
    parts = _parts("gru", tmp_path)
    try:
        steps = _play(parts, steps=20)
        actor, group = parts.router.losses["agents"].actor_network, parts.groups["agents"]
        graph = policy_graph(actor, group)
        run = FORMATS[fmt].run(export_policy(graph, group, [fmt], tmp_path)[fmt], graph)
        state = np.zeros((3, *graph.inputs[1].shape[1:]), dtype=np.float32)  # the caller's state, from zero
        assert any(bool(td["is_init"].any()) for td in steps[1:])  # an episode restarts inside the 20 steps
        for td in steps:
            action, state = run([_flat(td, ("agents", "observation")), state, _flat(td, "is_init")])
            np.testing.assert_allclose(action, _flat(td, ("agents", "action")), atol=1e-5, rtol=0)
    finally:
        parts.env.close()


def _set_group() -> GroupSpec:
    entries = {("g", "items"): Unbounded(shape=(3, 5, 4)), ("g", "own"): Unbounded(shape=(3, 2))}
    return GroupSpec(
        "g", ("a", "b", "c"), tuple(entries), Unbounded(shape=(3, 2)), 0, ("g", "reward"),
        observation_spec=inputs_spec(entries, 3), keys=GroupKeys.for_group("g"),
    )  # fmt: skip


def test_a_deepsets_policy_on_sets_of_entities_exports_in_every_format(tmp_path):
    group = _set_group()
    graph = policy_graph(build_actor(group, kind="deepsets", hidden=[8]), group)
    export_policy(graph, group, ALL, tmp_path)  # each file checked against the torch policy on random sets
    record = json.loads((tmp_path / "policy.json").read_text())
    assert [i["name"] for i in record["inputs"]] == ["items", "own"]
    assert record["inputs"][0]["shape"] == ["batch", 3, 5, 4]
    assert record["action_space"] == [{"head": "action", "kind": "box", "low": None, "high": None}]


def test_the_agent_layout_is_one_agent_per_row_and_needs_shared_parameters(tmp_path):
    parts = _parts("gru", tmp_path)
    unshared = _parts("mlp_unshared", tmp_path)
    try:
        actor, group = parts.router.losses["agents"].actor_network, parts.groups["agents"]
        per_agent = policy_graph(actor, group, layout="agent")
        whole = policy_graph(actor, group)
        assert per_agent.inputs[0].shape == ("batch", 18) and per_agent.outputs[0].shape == ("batch", 2)
        inputs = whole.example(4, torch.Generator().manual_seed(3))
        inputs = (inputs[0], inputs[1], torch.tensor([[True], [False], [True], [False]]))
        rows = (inputs[0].flatten(0, 1), inputs[1].flatten(0, 1), inputs[2].repeat_interleave(2, 0))
        path = export_policy(per_agent, group, ["onnx"], tmp_path)["onnx"]
        got = FORMATS["onnx"].run(path, per_agent)([t.numpy() for t in rows])
        for want, value in zip(whole(*inputs), got):
            np.testing.assert_allclose(value, want.flatten(0, 1).numpy(), atol=1e-5, rtol=0)
        with pytest.raises(
            ExportError,
            match=r"--layout agent runs each agent alone, but this policy has one set of "
            r"parameters per agent \(PerAgentMLP, model.share_params=false\); export it with --layout group",
        ):
            policy_graph(unshared.router.losses["agents"].actor_network, unshared.groups["agents"], layout="agent")
    finally:
        parts.env.close()
        unshared.env.close()


def test_bad_arguments_are_refused_in_one_line(tmp_path):
    group = _set_group()
    actor = build_actor(group, kind="deepsets", hidden=[8])
    with pytest.raises(ExportError, match=r"outputs='mode': expected one of \['action', 'params'\]"):
        policy_graph(actor, group, outputs="mode")
    with pytest.raises(ExportError, match=r"layout='env': expected one of \['group', 'agent'\]"):
        policy_graph(actor, group, layout="env")
    with pytest.raises(ExportError, match=r"unknown export format 'tflite'; expected one of \['onnx', 'torchscript'"):
        export_policy(policy_graph(actor, group), group, ["tflite"], tmp_path)
