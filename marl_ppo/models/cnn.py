"""The ``cnn`` model kind: a conv encoder per agent image, then an MLP, for image observations.

A group's image entry is ``[*B, n_agents, C, H, W]`` or ``[*B, n_agents, H, W, C]`` (``channel_order``:
``auto`` reads it from the spec: beside two equal sides the third, else the side smaller than both
others, is the channels; ``chw`` / ``hwc`` say it).
Each agent's image goes through the conv layers (one stack shared by the agents, or one per agent
with ``model.share_params=false``), is flattened, joined by the group's vector entries, and an MLP
(``model.hidden``) gives the trunk's output ``hidden[-1]`` wide. A centralised critic's MLP reads every
agent's encoding (the images are encoded per agent, the team is seen after). A ``uint8`` image is
scaled to [0, 1] inside the model: the batch keeps it as ``uint8`` (a quarter of float32's memory).

Options (``model.options.cnn``): ``channels`` (per conv layer), ``kernels``, ``strides``, ``paddings``
(one per layer), ``channel_order``.

>>> import torch
>>> from torchrl.data import Unbounded
>>> from marl_ppo.groups.specs import GroupSpec, inputs_spec
>>> image = ("g", "pixels")
>>> group = GroupSpec("g", ("a", "b"), (image,), Unbounded(shape=(2, 3)), 0, ("g", "reward"),
...                   observation_spec=inputs_spec({image: Unbounded(shape=(2, 8, 8, 3), dtype=torch.uint8)}, 2))
>>> trunk = cnn_trunk(group, group.inputs, role="actor", centralized=False, share_params=True, hidden=[16],
...                   activation="relu", device=None, **CNN_OPTIONS)
>>> trunk.width, trunk.module.module.channels_last, trunk.module.module.scale
(16, True, 0.00392156862745098)
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from marl_ppo.groups.specs import GroupSpec
from marl_ppo.models.mlp import ACTIVATIONS, agent_mlp
from marl_ppo.models.modules import TensorOutModule
from marl_ppo.models.registry import MODEL_KINDS, Trunk
from marl_ppo.options import ConfigError

__all__ = ["CNN_OPTIONS", "AgentConvNet", "ImageEncoder", "cnn_trunk", "channels_last"]

CNN_OPTIONS = MODEL_KINDS["cnn"].options  # the defaults, on the kind's registry line


class AgentConvNet(nn.Module):
    """Conv layers on each agent's image: ``[*B, n_agents, C, H, W] -> [*B, n_agents, features]``, any number
    of batch dims (a step ``[E]``, a batch ``[E, T]``, none).

    ``share_params=False``: ``stacks[i]`` is agent ``i``'s own, run on agent ``i``'s images only (its output,
    and its gradients, are agent ``i``'s alone). The stacks run one after another: one grouped conv over all
    agents (weights concatenated per layer) took twice as long, forward and backward, on CPU (6 agents,
    1000 views 13x13x5).
    """

    def __init__(
        self,
        in_channels: int,
        n_agents: int,
        *,
        share_params: bool,
        channels: Sequence[int],
        kernels: Sequence[int],
        strides: Sequence[int],
        paddings: Sequence[int],
        activation_class: type[nn.Module],
        device=None,
    ) -> None:
        super().__init__()
        self.share_params = share_params

        def stack() -> nn.Sequential:
            layers, last = [], in_channels
            for c, k, s, p in zip(channels, kernels, strides, paddings):
                layers += [nn.Conv2d(last, c, k, stride=s, padding=p, device=device), activation_class()]
                last = c
            return nn.Sequential(*layers, nn.Flatten(start_dim=-3))

        self.stacks = nn.ModuleList(stack() for _ in range(1 if share_params else n_agents))

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        lead, n = images.shape[:-4], images.shape[-4]
        if not lead:  # one group's images, no batch: the conv layers want a batch dim
            return self.forward(images.unsqueeze(0)).squeeze(0)
        if self.share_params:  # every agent's image in the one stack's batch
            out = self.stacks[0](images.flatten(0, -4)).unflatten(0, (-1, n))
        else:  # agent i's images, every batch dim folded into one (conv2d takes one), through stack i
            rows = images.flatten(0, -5)
            if len(self.stacks) != n:
                raise ValueError(f"one conv stack per agent: expected {len(self.stacks)} agents' images, got {n}")
            out = torch.stack([stack(rows[:, i]) for i, stack in enumerate(self.stacks)], dim=1)
        # -1 for the first batch dim rather than its size: a traced graph (marl-ppo export) keeps it free
        return out.unflatten(0, (-1, *lead[1:]))


class ImageEncoder(nn.Module):
    """The image (scaled, channels first) through the conv net, the vector entries joined, then the MLP."""

    def __init__(self, conv: AgentConvNet, mlp: nn.Module, activation: nn.Module, *, scale: float, channels_last: bool):
        super().__init__()
        self.conv, self.mlp, self.activation = conv, mlp, activation
        self.scale, self.channels_last = scale, channels_last

    def forward(self, image: torch.Tensor, *vectors: torch.Tensor) -> torch.Tensor:
        x = image.to(torch.float32)
        if self.scale != 1.0:
            x = x * self.scale
        if self.channels_last:
            x = x.movedim(-1, -3)
        features = self.conv(x)
        if vectors:
            features = torch.cat([features, *(v.to(torch.float32) for v in vectors)], dim=-1)
        return self.activation(self.mlp(features))


def channels_last(group: str, key, shape: Sequence[int], order: str) -> bool:
    """Whether a per-agent image of ``shape`` (three sides) is ``[H, W, C]``; a ConfigError when ``auto``
    cannot tell."""
    if order in ("chw", "hwc"):
        return order == "hwc"
    if order != "auto":
        raise ConfigError(f"model.options.cnn.channel_order must be auto, chw or hwc, got {order!r}")
    h, w, c = shape
    if (h == w) != (w == c):  # square images: [13, 13, 15] (a stack of frames), [3, 8, 8]
        return h == w
    first, last = h < min(w, c), c < min(h, w)  # else the smallest side: [457, 120, 3]
    if first != last:
        return last
    raise ConfigError(
        f"group {group!r}: cannot tell the channels of image {key} of shape {list(shape)}; "
        "set model.options.cnn.channel_order=chw or hwc"
    )


def cnn_trunk(
    group: GroupSpec,
    inputs,
    *,
    role: str,
    centralized: bool,
    share_params: bool,
    hidden: Sequence[int],
    activation: str,
    device=None,
    channels: Sequence[int],
    kernels: Sequence[int],
    strides: Sequence[int],
    paddings: Sequence[int],
    channel_order: str,
) -> Trunk:
    """The ``cnn`` kind's trunk (see the module docstring): one image entry, any number of vector entries."""
    shapes = {key: tuple(inputs[key].shape[1:]) for key in group.observation_keys}
    images = [k for k, s in shapes.items() if len(s) == 3]
    vectors = [k for k, s in shapes.items() if len(s) == 1]
    if len(images) != 1 or len(images) + len(vectors) != len(shapes):
        raise ConfigError(
            f"group {group.name!r}: model kind 'cnn' reads one image per agent ([C, H, W] or [H, W, C]) and "
            f"any vectors; the group's observation entries have per-agent shapes "
            f"{ {'/'.join(k[1:]): list(s) for k, s in shapes.items()} } (a vector observation: model.kind=mlp)"
        )
    layers = {"kernels": kernels, "strides": strides, "paddings": paddings}
    for name, values in layers.items():
        if len(values) != len(channels):
            raise ConfigError(
                f"model.options.cnn.{name} has {len(values)} entries; one per conv layer "
                f"(model.options.cnn.channels has {len(channels)})"
            )
    image = images[0]
    last = channels_last(group.name, image, shapes[image], channel_order)
    c, h, w = (shapes[image][-1], *shapes[image][:2]) if last else shapes[image]
    conv = AgentConvNet(
        c, group.n_agents, share_params=share_params, channels=channels,
        activation_class=ACTIVATIONS[activation], device=device, **layers,
    )  # fmt: skip
    with torch.no_grad():
        n_features = conv(torch.zeros(1, group.n_agents, c, h, w, device=device)).shape[-1]
    width = sum(shapes[k][0] for k in vectors) + n_features
    mlp = agent_mlp(
        group, hidden[-1], centralized=centralized, share_params=share_params,
        hidden=hidden[:-1], activation=activation, device=device, n_inputs=width,
    )  # fmt: skip
    scale = 1.0 / 255.0 if inputs[image].dtype == torch.uint8 else 1.0
    encoder = ImageEncoder(conv, mlp, ACTIVATIONS[activation](), scale=scale, channels_last=last)
    out_key = (group.name, f"{role}_cnn")
    return Trunk(TensorOutModule(encoder, in_keys=[image, *vectors], out_keys=[out_key]), out_key, hidden[-1])
