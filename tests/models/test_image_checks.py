"""Image models checked from the spec before anything is built (``marl_ppo/models/image_checks.py``):

* known answers: the conv sizes layer by layer and the stack's parameters equal those of a real
  ``nn.Conv2d`` stack, and a stack is "too deep" exactly where torch refuses it;
* through ``marl-ppo train`` on MAgent2 battle (13x13 view): a stack too deep is refused in one line
  naming the group, its image size, the layer and the option, and no run directory is made;
  ``model.critic=global`` over images says what works instead;
* the parameter warning: its count equals the conv stacks and the first layer after them as built
  (shared or per agent, centralised critic or not); over ``model.max_params`` a run is warned with the
  option that shrinks it, and the shipped battle config is not; a large MLP is warned after the build
  with the exact count ``--dry-run`` prints.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import replace

import pytest
import torch
from torch import nn
from torchrl.data import Unbounded

from marl_ppo.cli import main
from marl_ppo.groups.specs import GroupSpec, inputs_spec
from marl_ppo.models.builder import build_models
from marl_ppo.models.cnn import ImageEncoder
from marl_ppo.models.image_checks import ConvPlan, check_images
from marl_ppo.models.options import ModelConfig

DEEP = "model.options.cnn={channels: [8,8,8,8], kernels: [5,5,5,5], strides: [1,1,1,1], paddings: [0,0,0,0]}"
TINY = ["env.num_envs=2", "env.max_steps=8", "train.num_threads=1", "model.hidden=[16]"]
# a budget of one small batch: were a refusal missing, the run would end in seconds
TINY += ["train.frames_per_batch=16", "train.total_frames=16", "train.minibatch_size=16", "train.num_epochs=1"]
TINY += ["log.eval_every=0", "log.progress=false", "log.plot=false"]

STACKS = [  # (C, H, W), channels, kernels, strides, paddings
    ((5, 13, 13), [16, 16], [3, 3], [2, 1], [0, 0]),
    ((3, 64, 16), [16, 16], [4, 3], [2, 2], [0, 0]),
    ((1, 7, 11), [4, 6, 2], [3, 2, 3], [1, 2, 1], [1, 0, 2]),
    ((5, 3, 3), [32, 32], [3, 3], [1, 1], [0, 0]),  # tiger_deer's deer view: too deep at layer 2
    ((5, 13, 13), [8, 8, 8, 8], [5, 5, 5, 5], [1, 1, 1, 1], [0, 0, 0, 0]),  # too deep at layer 4
]


def _stack(image, channels, kernels, strides, paddings) -> nn.Sequential:
    ins = [image[0], *channels[:-1]]
    return nn.Sequential(
        *(nn.Conv2d(i, c, k, s, p) for i, c, k, s, p in zip(ins, channels, kernels, strides, paddings))
    )


@pytest.mark.parametrize("stack", STACKS)
def test_conv_sizes_and_parameters_equal_a_real_conv2d_stack(stack):
    image, *layers = stack
    plan = ConvPlan("g", ("g", "pixels"), image, *layers, option="model.options.cnn")
    convs = _stack(image, *layers)
    assert plan.params == sum(p.numel() for p in convs.parameters())
    x = torch.zeros(1, *image)
    for i, conv in enumerate(convs):
        if i == len(plan.sizes):  # where the plan says too deep, torch refuses: the same layer
            assert plan.too_deep
            with pytest.raises(RuntimeError, match="Kernel size can't be greater than actual input size"):
                conv(x)
            return
        x = conv(x)
        assert tuple(x.shape[1:]) == plan.sizes[i]
    assert not plan.too_deep and plan.features == x.numel()


def test_a_stack_too_deep_for_the_view_is_refused_in_one_line_before_any_run_directory(tmp_path, capsys, monkeypatch):
    pytest.importorskip("magent2")
    monkeypatch.chdir(tmp_path)
    assert main(["train", "battle_vs_random", DEEP, *TINY, f"log.root={tmp_path / 'runs'}"]) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err, err
    assert err.startswith("marl-ppo train: error: ConfigError: group 'red': its image red/observation is 13x13"), err
    assert "layer 4 of 4 (kernel 5, stride 1, padding 0) gets 1x1 (13x13 -> 9x9 -> 5x5 -> 1x1)" in err
    assert "use fewer layers, smaller kernels or strides, or paddings in model.options.cnn" in err
    assert list(tmp_path.iterdir()) == []  # no run directory, no log root


def test_a_global_critic_over_images_says_what_works_instead(tmp_path, capsys, monkeypatch):
    pytest.importorskip("magent2")
    monkeypatch.chdir(tmp_path)
    assert main(["train", "battle_vs_random", "model.critic=global", *TINY, "--dry-run"]) == 1
    err = capsys.readouterr().err
    assert "group 'red' observes {'red/observation': [13, 13, 5]}" in err
    assert "use model.critic=group: MAPPO's centralised critic of each group reads all its agents" in err


def _group(n: int = 3, image=(9, 9, 3), vector: int = 4) -> GroupSpec:
    keys = (("g", "pixels"), ("g", "extra"))
    entries = {keys[0]: Unbounded(shape=(n, *image), dtype=torch.uint8), keys[1]: Unbounded(shape=(n, vector))}
    agents = tuple(f"a{i}" for i in range(n))
    return GroupSpec(
        "g", agents, keys, Unbounded(shape=(n, 2)), 0, ("g", "reward"), observation_spec=inputs_spec(entries, n)
    )


@pytest.mark.parametrize("share_params", [True, False])
@pytest.mark.parametrize("centralized", [True, False])
def test_the_warned_count_is_the_conv_stacks_and_the_first_layer_after_them_as_built(share_params, centralized):
    """Known answer: with ``hidden=[h]`` an image encoder is its conv stack(s) and one layer; the count the
    warning gives before the build equals their parameters once built, in the actor and the critic."""
    cnn = {"channels": [4, 6], "kernels": [3, 2], "strides": [1, 2], "paddings": [1, 0]}
    model = ModelConfig(kind="cnn", hidden=[8], share_params=share_params, options={"cnn": cnn}, max_params=1)
    groups = {"g": _group()}
    with pytest.warns(UserWarning, match="over model.max_params=1;") as record:
        assert check_images(groups, model, centralized=centralized)
    count = int(re.search(r"holds at least ([\d,]+) parameters", str(record[0].message)).group(1).replace(",", ""))
    actors, critics, _ = build_models(groups, replace(model, max_params=0), centralized=centralized)
    encoders = [m for net in (actors["g"], critics["g"]) for m in net.modules() if isinstance(m, ImageEncoder)]
    assert len(encoders) == 2
    assert count == sum(p.numel() for e in encoders for p in e.parameters())


def test_a_model_over_max_params_is_warned_with_the_option_that_shrinks_it(tmp_path, capsys, monkeypatch):
    pytest.importorskip("magent2")
    monkeypatch.chdir(tmp_path)
    with pytest.warns(UserWarning) as record:
        assert main(["train", "battle_vs_random", *TINY, "model.max_params=20000", "--dry-run"]) == 0
    (message,) = [str(w.message) for w in record if "model.max_params" in str(w.message)]
    assert "over model.max_params=20,000; most in group 'red'" in message
    assert "red/observation 5x13x13 -> 16x6x6 -> 16x4x4: 256 features" in message
    assert "larger strides in model.options.cnn.strides (now [2, 1])" in message
    with warnings.catch_warnings(record=True) as seen:  # the shipped config, at the default: no warning
        warnings.simplefilter("always")
        assert main(["train", "battle_vs_random", *TINY, "--dry-run"]) == 0
    assert not [w for w in seen if "max_params" in str(w.message)]


def test_a_large_mlp_is_warned_after_the_build_with_its_exact_count(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = ["train", "navigation", "env.num_envs=2", "train.num_threads=1", "model.hidden=[512, 512]"]
    with pytest.warns(UserWarning) as record:
        assert main([*args, "model.max_params=100000", "--dry-run"]) == 0
    (message,) = [str(w.message) for w in record if "model.max_params" in str(w.message)]
    total = re.search(r"all groups: ([\d,]+) trainable parameters", capsys.readouterr().out).group(1)
    assert message.startswith(f"the model holds {total} trainable parameters, over model.max_params=100,000")
    assert "a smaller model.hidden (now [512, 512]) shrinks it" in message
    assert main(["train", "--print-config", "model.max_params=-1"]) == 1
    assert "model.max_params must be >= 0 (0: no warning), got -1" in capsys.readouterr().err


def test_tiger_deer_s_3x3_deer_view_names_the_group_s_own_option(tmp_path, capsys, monkeypatch):
    pytest.importorskip("magent2")
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "tiger_deer.yaml"
    config.write_text(
        "env: {kind: pettingzoo, scenario: magent2.environments.tiger_deer_v4, num_envs: 2, max_steps: 8,\n"
        "      continuous_actions: false, image: {observation: image}}\n"
        "model: {kind: cnn, hidden: [16]}\n"
    )
    assert main(["train", str(config), *TINY, f"log.root={tmp_path / 'runs'}"]) == 1
    err = capsys.readouterr().err
    assert "group 'deer': its image deer/observation is 3x3 (5 channels)" in err
    assert "layer 2 of 2 (kernel 3, stride 1, padding 0) gets 1x1 (3x3 -> 1x1)" in err
    assert "in model.options.cnn (or model.groups.deer.options.cnn for this group alone)" in err
    assert not (tmp_path / "runs").exists()
