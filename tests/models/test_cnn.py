"""The ``cnn`` model kind: known answers against plain torch, and a scout that learns to read a picture.

* the trunk's conv part on a hand-made image batch equals a plain ``nn.Conv2d`` stack with the same
  weights; the same picture given channels-last or channels-first, and as ``uint8`` or as floats in
  [0, 1], gives the same features; without shared parameters each agent has its own stack;
* a centralised critic's value for one agent moves with another agent's picture;
* through ``marl-ppo train`` (the depot game of ``tests/envs/custom_envs.py``, its scout seeing a
  ``uint8`` picture of the parcel, ``model.groups.scout.kind=cnn``): the scout's return rises, and
  the batch keeps the pictures as ``uint8``; two seeds in one process train too.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from tensordict import TensorDict
from torch import nn
from torchrl.data import Unbounded

from marl_ppo.cli import main
from marl_ppo.config import load_config
from marl_ppo.envs.kinds import ENV_KINDS, EnvKind, register_env_kind
from marl_ppo.groups.specs import GroupSpec, inputs_spec
from marl_ppo.models.cnn import channels_last
from marl_ppo.models.critic import build_critic
from marl_ppo.models.registry import MODEL_KINDS
from marl_ppo.run.trainer import Trainer
from tests.envs import custom_envs

IMAGE = ("g", "pixels")


def _group(shape, dtype=torch.float32, n=2) -> GroupSpec:
    entries = {IMAGE: Unbounded(shape=(n, *shape), dtype=dtype)}
    return GroupSpec(
        "g",
        tuple("ab"[:n]),
        (IMAGE,),
        Unbounded(shape=(n, 2)),
        0,
        ("g", "reward"),
        observation_spec=inputs_spec(entries, n),
    )


def _trunk(group, *, centralized=False, share_params=True, **options):
    options = {**MODEL_KINDS["cnn"].options, "channels": [4, 6], "kernels": [3, 2], "strides": [1, 2], **options}
    return MODEL_KINDS["cnn"].build_trunk(
        group, role="actor", centralized=centralized, share_params=share_params, hidden=[8], activation="relu",
        device=None, options=options,
    )  # fmt: skip


def _plain_convs(stack: nn.Sequential) -> nn.Sequential:
    """The same layers as plain torch modules, weights copied."""
    convs = [m for m in stack if isinstance(m, nn.Conv2d)]
    plain = nn.Sequential(
        nn.Conv2d(3, 4, 3, stride=1), nn.ReLU(), nn.Conv2d(4, 6, 2, stride=2), nn.ReLU(), nn.Flatten()
    )
    for mine, theirs in zip(convs, [m for m in plain if isinstance(m, nn.Conv2d)]):
        theirs.load_state_dict(mine.state_dict())
    return plain


def test_the_conv_part_equals_a_plain_conv2d_stack_with_the_same_weights():
    torch.manual_seed(0)
    encoder = _trunk(_group((3, 9, 9))).module.module
    images = torch.rand(5, 2, 3, 9, 9)
    want = _plain_convs(encoder.conv.stacks[0])(images.reshape(10, 3, 9, 9)).reshape(5, 2, -1)
    torch.testing.assert_close(encoder.conv(images), want)  # the same maths by another path: a tolerance
    assert want.shape[-1] == 6 * 3 * 3


def test_channel_order_and_uint8_scaling_give_the_same_features():
    pixels = torch.randint(0, 256, (5, 2, 9, 9, 3), dtype=torch.uint8)
    torch.manual_seed(0)
    hwc_uint8 = _trunk(_group((9, 9, 3), torch.uint8))
    torch.manual_seed(0)
    chw_float = _trunk(_group((3, 9, 9)))
    assert hwc_uint8.module.module.channels_last and not chw_float.module.module.channels_last
    a = hwc_uint8.module.module(pixels)
    b = chw_float.module.module(pixels.movedim(-1, -3).float() / 255.0)
    torch.testing.assert_close(a, b)
    assert a.shape == (5, 2, 8)


def test_unshared_agents_each_have_their_own_stack():
    torch.manual_seed(0)
    encoder = _trunk(_group((3, 9, 9)), share_params=False).module.module
    images = torch.rand(4, 2, 3, 9, 9)
    out = encoder.conv(images)
    for i in range(2):
        want = _plain_convs(encoder.conv.stacks[i])(images[:, i])
        torch.testing.assert_close(out[:, i], want)
    assert not torch.allclose(out[:, 0], encoder.conv.stacks[1](images[:, 0]))


def test_a_centralised_critic_sees_the_other_agents_picture():
    torch.manual_seed(0)
    options = {"cnn": {"channels": [4], "kernels": [3], "strides": [1], "paddings": [0]}}
    critic = build_critic(_group((3, 9, 9)), centralized=True, kind="cnn", hidden=[8], options=options)
    images = torch.rand(3, 2, 3, 9, 9)
    v1 = critic(TensorDict({IMAGE: images}, [3]))["g", "state_value"]
    images[:, 1] = torch.rand(3, 3, 9, 9)
    v2 = critic(TensorDict({IMAGE: images}, [3]))["g", "state_value"]
    assert v1.shape == (3, 2, 1) and not torch.allclose(v1[:, 0], v2[:, 0])


@pytest.mark.parametrize(
    "shape, last",
    [((13, 13, 5), True), ((13, 13, 15), True), ((3, 8, 8), False), ((15, 8, 8), False), ((457, 120, 3), True)],
)
def test_auto_channel_order_reads_the_side_beside_two_equal_ones_else_the_smallest(shape, last):
    # MAgent2's view [13, 13, 5], three stacked frames of it [13, 13, 15], pistonball's frame [457, 120, 3]
    assert channels_last("g", "pixels", shape, "auto") is last


@pytest.mark.parametrize(
    "options, message",
    [
        (
            {"kernels": [3]},
            "model.options.cnn.kernels has 1 entries; one per conv layer (model.options.cnn.channels has 2)",
        ),
        ({"channel_order": "auto"}, "cannot tell the channels of image ('g', 'pixels') of shape [3, 9, 3]"),
    ],
)
def test_bad_cnn_options_are_refused_in_one_line(options, message):
    group = _group((3, 9, 3))
    with pytest.raises(ValueError) as info:
        _trunk(group, **options)
    assert message in str(info.value)


def test_a_cnn_on_a_vector_observation_is_refused_with_the_shapes():
    entries = {("g", "observation"): Unbounded(shape=(2, 7))}
    group = GroupSpec("g", ("a", "b"), (("g", "observation"),), Unbounded(shape=(2, 2)), 0, ("g", "reward"),
                      observation_spec=inputs_spec(entries, 2))  # fmt: skip
    with pytest.raises(ValueError, match=r"model kind 'cnn' reads one image per agent .* \{'observation': \[7\]\}"):
        _trunk(group)


IMAGE_RUN = [
    "env.kind=custom",
    f"env.factory={Path(custom_envs.__file__)}:make_image_depot",
    "env.num_envs=16",
    "env.max_steps=10",
    "train.frames_per_batch=320",
    "train.num_epochs=4",
    "train.minibatch_size=160",
    "train.lr=0.003",
    "model.hidden=[32]",
    "model.groups={scout: {kind: cnn, options: {cnn: {channels: [8], kernels: [4], strides: [4], paddings: [0]}}}}",
    "log.eval_every=0",
    "log.progress=false",
    "log.plot=false",
]


@pytest.mark.slow
def test_a_scout_learns_to_read_its_picture(tmp_path, capsys):
    assert main(["train", *IMAGE_RUN, "train.total_frames=9600", f"log.root={tmp_path}", "log.name=img"]) == 0
    csv = tmp_path / "img" / "logs" / "scalars" / "collect" / "scout" / "episode_reward.csv"
    values = [float(line.split(",")[-1]) for line in csv.read_text().splitlines()]
    first, last = sum(values[:3]) / 3, sum(values[-3:]) / 3
    # naming crew_0's parcel at random is right a third of the time: 10 steps -> 3.3 per episode
    assert first < 5.0 and last > first + 2.5, values
    out = capsys.readouterr().out
    summary = json.loads(out[out.index("\n{") + 1 :])
    assert summary["eval/scout/episode_reward"] >= 8.0, summary  # the trained policy's mode reads the picture


@pytest.fixture
def image_depot_kind(isolated):
    isolated(ENV_KINDS)  # the kind is gone after the test
    make = lambda cfg, *, seed, num_envs, device=None: custom_envs.ImageDepot(  # noqa: E731
        num_envs=num_envs, max_steps=cfg.max_steps, seed=seed, device=device or "cpu"
    )
    return register_env_kind(EnvKind("image_depot", make, vectorised=True, seeds_in_one_env=True))


def test_two_seeds_train_a_cnn_in_one_process_and_the_batch_keeps_uint8(image_depot_kind, tmp_path):
    overrides = [o for o in IMAGE_RUN if not o.startswith("env.")] + [
        "env.kind=image_depot",
        "env.max_steps=10",
        "env.num_envs=16",
    ]
    cfg = load_config(overrides=[*overrides, "train.total_frames=640", "train.seeds=[0,1]", f"log.root={tmp_path}"])
    kept = []

    class Keep:
        def on_batch_collected(self, trainer, batch):
            kept.append(batch["scout", "observation"])

    summaries = Trainer(cfg, callbacks=[Keep()]).fit()
    assert [s["frames"] for s in summaries] == [640, 640]
    assert [(x.dtype, tuple(x.shape[-4:])) for x in kept] == [(torch.uint8, (1, 8, 8, 3))] * 2
    assert all(math.isfinite(s["eval/scout/episode_reward"]) for s in summaries)
