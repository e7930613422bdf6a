"""Chains of model kinds (``model.kind: [gnn, mlp]``, ``[cnn, gru]``): a chain is its parts in turn.

* known answer: the chain ``[gnn, mlp]`` built from a seed gives what the ``gnn`` trunk and then an
  MLP trunk on its output give, built one after the other from the same seed;
* a recurrent chain, ``[cnn, gru]`` for the depot game's scout (a picture per step), trains through
  ``marl-ppo train`` with its hidden states in the collected data;
* a chain that repeats a kind or names an unknown one is refused in one line.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
from tensordict import TensorDict
from torchrl.data import Unbounded

from marl_ppo.cli import main
from marl_ppo.config import load_config
from marl_ppo.groups.specs import GroupSpec, inputs_spec
from marl_ppo.models.chain import mlp_trunk, trunk_of
from marl_ppo.models.registry import MODEL_KINDS
from marl_ppo.run.trainer import Trainer
from tests.envs import custom_envs

KEY = ("g", "observation")
GROUP = GroupSpec(
    "g", ("a", "b", "c"), (KEY,), Unbounded(shape=(3, 2)), 0, ("g", "reward"),
    observation_spec=inputs_spec({KEY: Unbounded(shape=(3, 6))}, 3),
)  # fmt: skip
COMMON = dict(role="critic", share_params=True, hidden=[8, 5], activation="tanh", device=None)


def test_a_chain_is_its_parts_applied_in_turn():
    torch.manual_seed(0)
    chain = trunk_of(GROUP, ["gnn", "mlp"], centralized=True, options={}, **COMMON)
    torch.manual_seed(0)
    gnn = MODEL_KINDS["gnn"].build_trunk(GROUP, centralized=True, options={}, **COMMON)
    after = dataclasses.replace(
        GROUP, observation_keys=(gnn.out_key,), observation_spec=inputs_spec({gnn.out_key: Unbounded(shape=(3, 5))}, 3)
    )
    mlp = mlp_trunk(after, after.inputs, centralized=False, **COMMON)
    td = TensorDict({KEY: torch.randn(4, 3, 6)}, [4])
    want = mlp.module(gnn.module(td.clone()))[mlp.out_key]
    assert chain.width == 5 and chain.out_key == ("g", "critic_mlp")
    assert torch.equal(chain.module(td.clone())[chain.out_key], want)  # the same modules, the same path


def test_a_recurrent_chain_trains_the_scout_on_its_picture(tmp_path):
    cfg = load_config(
        overrides=[
            "env.kind=custom", f"env.factory={Path(custom_envs.__file__)}:make_image_depot", "env.num_envs=8",
            "env.max_steps=10", "train.frames_per_batch=160", "train.total_frames=320", "train.minibatch_size=80",
            "model.hidden=[16]", "model.seq_len=10", "model.groups={scout: {kind: [cnn, gru]}}",
            "model.options={cnn: {channels: [4], kernels: [4], strides: [4], paddings: [0]}, gru: {rnn_hidden: 12}}",
            "log.eval_episodes=2", "log.progress=false", "log.plot=false", f"log.root={tmp_path}",
        ]
    )  # fmt: skip
    kept = []

    class Keep:
        def on_batch_collected(self, trainer, batch):
            kept.append(batch.get(("scout", "actor_hidden")))

    summary = Trainer(cfg, callbacks=[Keep()]).fit()
    assert summary["frames"] == 320
    assert kept[0].shape[-3:] == (1, 1, 12)  # one GRU state of 12 per scout, stored at collection
    assert "kind:\n      - cnn\n      - gru" in (Path(summary["run_dir"]) / "config.yaml").read_text()


@pytest.mark.parametrize(
    "kind, words",
    [
        ("[cnn, cnn]", ["model.kind: a chain holds each kind once, got ['cnn', 'cnn']"]),
        ("[gnn, rnn]", ["model.kind (chain ['gnn', 'rnn']) must be one of", "'gnn'", "got 'rnn'"]),
    ],
)
def test_a_bad_chain_is_refused_in_one_line(capsys, kind, words):
    assert main(["train", f"model.kind={kind}", "--print-config"]) == 1
    err = capsys.readouterr().err
    assert all(w in err for w in words), err
