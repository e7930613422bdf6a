"""``marl-ppo export`` on real runs: what it writes, and each bad input refused in one line.

* A trained run's group in three formats, with ``policy.json`` naming the run, checkpoint and
  iteration, and each file's check against the torch policy.
* A group the run does not have, a group an opponent plays, a checkpoint that does not load (the
  usable one is named), a format whose package is missing (its extra is named, before the run is
  rebuilt), and an operator ONNX cannot translate (named, with the formats that keep it).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from torch import nn
from torchrl.data import Unbounded

from marl_ppo.cli import main
from marl_ppo.export import ExportError, export_policy, policy_graph
from marl_ppo.groups.specs import GroupKeys, GroupSpec, inputs_spec
from marl_ppo.models.actor import build_actor

pytestmark = pytest.mark.filterwarnings("ignore")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    tiny = [
        "env.num_envs=4", "env.max_steps=10", "env.kwargs.n_agents=2", "train.frames_per_batch=40",
        "train.total_frames=80", "train.num_epochs=1", "train.minibatch_size=40", "model.hidden=[16]",
        "log.eval_every=0", "log.progress=false", "log.plot=false", "log.checkpoint_every=1", f"log.root={root}",
    ]  # fmt: skip
    assert main(["train", *tiny]) == 0
    (run,) = [p.parent for p in root.glob("*/config.yaml")]
    return run


def test_export_writes_each_format_beside_a_policy_json(run_dir, tmp_path, capsys):
    out = tmp_path / "out"
    args = ["export", str(run_dir), "--format", "onnx", "--format", "torchscript", "--format", "exported"]
    assert main([*args, "--out", str(out)]) == 0
    printed = capsys.readouterr().out.split()
    assert sorted(Path(p).name for p in printed) == ["policy.json", "policy.onnx", "policy.pt", "policy.pt2"]
    record = json.loads((out / "agents" / "policy.json").read_text())
    assert record["source"]["checkpoint"] == "last.pt" and record["source"]["iteration"] == 2
    assert record["source"]["run_dir"] == str(run_dir.resolve()) and record["agents"] == ["agent_0", "agent_1"]
    assert record["inputs"] == [{"name": "observation", "shape": ["batch", 2, 18], "dtype": "float32"}]
    assert {f: v["max_abs_diff"] <= 1e-5 for f, v in record["files"].items()} == {
        "onnx": True, "torchscript": True, "exported": True,
    }  # fmt: skip
    assert record["versions"]["torch"] == torch.__version__


def _error(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    return err[-1]


def test_a_group_the_run_does_not_have_is_named(run_dir, capsys):
    assert main(["export", str(run_dir), "--group", "adversary"]) == 1
    assert _error(capsys) == (
        "marl-ppo export: error: ExportError: group 'adversary': the run has no such group; its groups are ['agents']"
    )


def test_a_group_played_by_an_opponent_is_not_exported(tmp_path, capsys):
    overrides = [
        "env.kind=pettingzoo", "env.scenario=tictactoe_v3", "env.num_envs=2", "env.max_steps=9",
        "train.frames_per_batch=20", "train.total_frames=20", "train.minibatch_size=20", "train.num_epochs=1",
        "model.hidden=[8]", "opponents={player_2: random}", "log.eval_every=0", "log.progress=false",
        "log.plot=false", f"log.root={tmp_path}",
    ]  # fmt: skip
    assert main(["train", *overrides]) == 0
    (run,) = [p.parent for p in tmp_path.glob("*/config.yaml")]
    assert main(["export", str(run), "--group", "player_2"]) == 1
    assert "group 'player_2' is played by random (opponents.player_2), not trained in this run" in _error(capsys)
    assert main(["export", str(run), "--format", "exported"]) == 0  # the trained player alone
    assert (run / "export" / "player_1" / "policy.pt2").is_file() and not (run / "export" / "player_2").exists()


def test_a_checkpoint_that_does_not_load_names_the_usable_one(run_dir, tmp_path, capsys):
    broken = run_dir.parent / "broken"
    broken.mkdir()
    (broken / "checkpoints").mkdir()
    (broken / "config.yaml").write_text((run_dir / "config.yaml").read_text())
    (broken / "checkpoints" / "iter_00002.pt").write_bytes((run_dir / "checkpoints" / "iter_00002.pt").read_bytes())
    (broken / "checkpoints" / "last.pt").write_bytes(b"not a checkpoint")
    assert main(["export", str(broken)]) == 1
    error = _error(capsys)
    assert (
        "last.pt is corrupt or not a checkpoint" in error and "the newest usable checkpoint is iter_00002.pt" in error
    )
    assert main(["export", str(broken), "--checkpoint", "iter_00002.pt", "--format", "exported"]) == 0


def test_a_format_whose_package_is_missing_names_the_extra(run_dir, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "onnxscript", None)  # an import of it now fails, as when not installed
    assert main(["export", "no/such/run", "--format", "onnx"]) == 1  # refused before the run is read
    assert _error(capsys) == (
        "marl-ppo export: error: ImportError: format 'onnx' needs onnxscript, which is not installed: "
        "pip install 'marl-ppo[export]'"
    )


@torch.library.custom_op("marl_ppo_tests::halve", mutates_args=())
def _halve(x: torch.Tensor) -> torch.Tensor:
    return x / 2


@_halve.register_fake
def _(x):
    return torch.empty_like(x)


class _Halved(nn.Module):
    """An MLP followed by an operator of its own, which ONNX has no translation for."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _halve(self.net(x))


def test_an_operator_onnx_cannot_translate_is_named_with_the_formats_that_keep_it(tmp_path):
    entries = {("g", "observation"): Unbounded(shape=(2, 4))}
    group = GroupSpec(
        "g", ("a", "b"), tuple(entries), Unbounded(shape=(2, 3)), 0, ("g", "reward"),
        observation_spec=inputs_spec(entries, 2), keys=GroupKeys.for_group("g"),
    )  # fmt: skip
    plain = build_actor(group, hidden=[8])
    net = _Halved(plain.module[0].module[0])  # the MLP that gives loc and scale
    graph = policy_graph(build_actor(group, net=net), group)
    with pytest.raises(
        ExportError, match=r"no ONNX translation for operator\(s\) marl_ppo_tests.halve; .*--format exported"
    ):
        export_policy(graph, group, ["onnx"], tmp_path / "onnx")
    assert export_policy(graph, group, ["exported", "torchscript"], tmp_path / "torch")["exported"].is_file()
