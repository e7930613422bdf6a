"""``marl-ppo export`` as a deployment meets it: the files ``policy.json`` lists, its axes, what it refuses.

* Exactly the files ``policy.json`` lists for a format, copied into an empty folder, load and run
  in onnxruntime (weights inlined in ``policy.onnx``; above the inline limit, ``policy.onnx.data``
  listed beside it, and a stale one from an earlier export removed).
* The ONNX graph's axes carry the names ``policy.json`` gives them (``batch``, not ``s95``), inputs
  and outputs, a recurrent policy's state and ``is_init`` included.
* ``--layout agent`` refuses, in one line, a radius GNN (it reads other agents); and a policy that
  reads other agents unseen by that scan (the scan switched off here) fails the run-back check on the
  run's own observations, where agents come within the radius, although it passes on random rows.
* ``policy.json`` records what the env does to an observation: a pistonball policy reads 24 x 24
  gray frames (the env's own luma weights) stacked by two, not the game's RGB frame.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest

import marl_ppo.envs.images as images
import marl_ppo.export.formats as formats
import marl_ppo.export.graph as graph_module
from marl_ppo.cli import main

pytestmark = pytest.mark.filterwarnings("ignore")

TINY = [
    "env.num_envs=4", "env.max_steps=10", "train.frames_per_batch=40",
    "train.total_frames=80", "train.num_epochs=1", "train.minibatch_size=40", "model.hidden=[16]",
    "log.eval_every=0", "log.progress=false", "log.plot=false", "train.num_threads=1",
]  # fmt: skip
RADIUS_GNN = [
    "env.kwargs.n_agents=3", "model.kind=gnn",
    "model.options={gnn: {topology: from_pos, radius: 0.5, position: [0, 2]}}",
]  # fmt: skip


def _train(root: Path, *overrides: str) -> Path:
    assert main(["train", *TINY, *overrides, f"log.root={root}"]) == 0
    (run,) = [p.parent for p in root.glob("*/config.yaml")]
    return run


def _error(capsys) -> str:
    return capsys.readouterr().err.strip().splitlines()[-1]


def _deployed(folder: Path, tmp_path: Path) -> tuple[onnxruntime.InferenceSession, dict]:
    """The onnx policy run from a fresh folder holding exactly the files its policy.json lists."""
    record = json.loads((folder / "policy.json").read_text())
    target = tmp_path / "deployed"
    target.mkdir()
    for name in record["files"]["onnx"]["needs"]:
        shutil.copy(folder / name, target / name)
    return onnxruntime.InferenceSession(str(target / record["files"]["onnx"]["file"])), record


def _feed(record: dict, batch: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    out = {}
    for port in record["inputs"]:
        shape = [batch if d == "batch" else d for d in port["shape"]]
        out[port["name"]] = (
            rng.standard_normal(shape).astype(np.float32)
            if port["dtype"] == "float32"
            else (np.zeros(shape, dtype=port["dtype"]))
        )
    return out


@pytest.fixture(scope="module")
def gru_run(tmp_path_factory) -> Path:
    gru = ["env.kwargs.n_agents=3", "model.kind=gru", "model.options={gru: {rnn_hidden: 8}}"]
    return _train(tmp_path_factory.mktemp("gru"), *gru)


def test_the_listed_files_alone_run_in_onnxruntime_and_name_their_axes_as_policy_json(gru_run, tmp_path):
    out = tmp_path / "out"
    assert main(["export", str(gru_run), "--format", "onnx", "--out", str(out)]) == 0
    session, record = _deployed(out / "agents", tmp_path)
    assert record["files"]["onnx"]["needs"] == ["policy.onnx"]  # a small model: its weights inside the graph
    assert record["files"]["onnx"]["env_rows"] == 4 * record["files"]["onnx"]["env_steps"]
    action, hidden = session.run(None, _feed(record, 7))
    assert action.shape == (7, 3, 2) and hidden.shape == (7, 3, 1, 8)
    graph = onnx.load(str(out / "agents" / "policy.onnx"))
    axes = {
        v.name: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]
        for v in [*graph.graph.input, *graph.graph.output]
    }
    listed = {p["name"]: p["shape"] for p in [*record["inputs"], *record["output_ports"]]}
    assert axes == listed and axes["is_init"] == ["batch", 1]


def test_weights_above_the_inline_limit_are_listed_beside_the_graph(gru_run, tmp_path, monkeypatch):
    out = tmp_path / "out"
    (out / "agents").mkdir(parents=True)
    monkeypatch.setattr(formats, "ONNX_INLINE_LIMIT", 0)  # every model "large": its weights go to policy.onnx.data
    assert main(["export", str(gru_run), "--format", "onnx", "--out", str(out)]) == 0
    record = json.loads((out / "agents" / "policy.json").read_text())
    assert record["files"]["onnx"]["needs"] == ["policy.onnx", "policy.onnx.data"]
    session, _ = _deployed(out / "agents", tmp_path)
    assert session.run(None, _feed(record, 2))[0].shape == (2, 3, 2)
    monkeypatch.undo()  # a small model again: the weights inlined, the earlier data file gone
    assert main(["export", str(gru_run), "--format", "onnx", "--out", str(out)]) == 0
    assert sorted(p.name for p in (out / "agents").iterdir()) == ["policy.json", "policy.onnx"]


def test_a_radius_gnn_is_refused_per_agent_and_fails_the_run_back_on_real_observations(tmp_path, capsys, monkeypatch):
    run = _train(tmp_path / "runs", *RADIUS_GNN)
    assert main(["export", str(run), "--layout", "agent"]) == 1
    assert _error(capsys) == (
        "marl-ppo export: error: ExportError: group 'agents': --layout agent runs each agent alone, but this "
        "policy has a gnn, whose agents exchange messages over their graph; export it with --layout group"
    )
    # a model that reads other agents without saying so: random rows (no two agents within 0.5) pass it,
    # the run's own observations do not
    monkeypatch.setattr(graph_module, "reads_other_agents", lambda actor: None)
    assert main(["export", str(run), "--layout", "agent", "--out", str(tmp_path / "agent")]) == 1
    error = _error(capsys)
    assert error.startswith("marl-ppo export: error: ExportError: output 'action' differs from what the trained "
                            "policy played in the run's env (8 steps, group layout) by "), error  # fmt: skip
    assert float(error.rsplit(" ", 1)[1]) > 1e-3
    assert main(["export", str(run), "--out", str(tmp_path / "group")]) == 0  # the group layout is the policy


def test_policy_json_records_the_pistonball_frames_the_policy_reads(tmp_path):
    run = _train(
        tmp_path, "env.kind=pettingzoo", "env.scenario=pettingzoo.butterfly.pistonball_v6", "env.num_envs=1",
        "env.max_steps=20", "env.image.size=[24,24]", "env.image.grayscale=true", "env.image.frames=2",
        "env.kwargs={n_pistons: 3}", "model.kind=cnn", "train.frames_per_batch=20", "train.total_frames=20",
        "model.options={cnn: {channels: [4], kernels: [4], strides: [4], paddings: [0]}}", "train.minibatch_size=20",
        "log.eval_episodes=1",
    )  # fmt: skip
    assert main(["export", str(run)]) == 0
    record = json.loads((run / "export" / "piston" / "policy.json").read_text())
    assert record["inputs"] == [{"name": "observation", "shape": ["batch", 3, 24, 24, 2], "dtype": "uint8"}]
    (entry,) = record["observation"]["entries"]
    assert [(s["op"], s.get("size"), s.get("frames")) for s in entry["steps"]] == [
        ("resize", [24, 24], None), ("grayscale", None, None), ("frame_stack", None, 2),
    ]  # fmt: skip
    assert tuple(entry["steps"][1]["weights"]) == images._LUMA and "channels last" in entry["layout"]
