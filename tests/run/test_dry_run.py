"""``marl-ppo train --dry-run`` says what each group reads and what each network makes of it: the
observation entries with their shapes and dtypes, and each trunk's output width (a CNN's conv sizes
layer by layer). Known answers: the printed widths are those the built networks write, run on the
env's first observation."""

from __future__ import annotations

import pytest
import torch

from marl_ppo.cli import main
from marl_ppo.config import load_config
from marl_ppo.models.cnn import ImageEncoder
from marl_ppo.run.build import build

CHAIN = ["env.num_envs=2", "env.kwargs.n_agents=2", "train.num_threads=1", "model.kind=[gnn, gru]"]
CHAIN += ["model.hidden=[12]", "model.rnn_hidden=6"]


def test_dry_run_prints_each_trunk_s_width_as_the_built_networks_write_it(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["train", "navigation", *CHAIN, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert list(tmp_path.iterdir()) == []
    parts = build(load_config("navigation", CHAIN))
    td = parts.env.reset()
    with torch.no_grad():
        td = parts.router.losses["agents"].critic_network(parts.policy(td))
    parts.env.close()
    observation = td["agents", "observation"]
    assert f"  observation agents/observation: {list(observation.shape[1:])} float32\n" in out
    widths = {k: td["agents", k].shape[-1] for k in ("actor_gnn", "actor_rnn_out", "critic_gnn", "critic_rnn_out")}
    assert widths == {"actor_gnn": 12, "actor_rnn_out": 6, "critic_gnn": 12, "critic_rnn_out": 6}
    assert "  actor: gnn -> 12 wide, gru -> 6 wide\n" in out
    assert "  critic (centralised): gnn -> 12 wide, gru -> 6 wide\n" in out


def test_dry_run_prints_the_conv_sizes_of_an_image_group(tmp_path, capsys, monkeypatch):
    """MAgent2 battle's 13x13x5 view through the shipped stack (kernels 3, 3; strides 2, 1): 13 -> 6 -> 4,
    16 channels: 256 features, as the built conv net gives them."""
    pytest.importorskip("magent2")
    monkeypatch.chdir(tmp_path)
    args = ["env.num_envs=2", "train.num_threads=1", "model.hidden=[16]"]
    assert main(["train", "battle_vs_random", *args, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert list(tmp_path.iterdir()) == []
    for group in ("red", "blue"):  # the opponent's entries too
        assert f"  observation {group}/observation: [6, 13, 13, 5] float32\n" in out
    conv = "cnn [red/observation 5x13x13 -> 16x6x6 -> 16x4x4: 256 features] -> 16 wide"
    assert f"  actor: {conv}\n" in out and f"  critic (centralised): {conv}\n" in out
    parts = build(load_config("battle_vs_random", args))
    (encoder,) = [m for m in parts.router.losses["red"].actor_network.modules() if isinstance(m, ImageEncoder)]
    assert encoder.conv(torch.zeros(1, 6, 5, 13, 13)).shape == (1, 6, 256)
    assert encoder(torch.zeros(1, 6, 13, 13, 5)).shape == (1, 6, 16)
    parts.env.close()
