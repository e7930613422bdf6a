"""Image observations in each env copy, before a batch stores them: kept, resized, grayed, stacked (``env.image``).

A group's image is ``[*B, n_agents, H, W, C]``, height-width-channels as PettingZoo gives it. In
each copy of the env, in this order: :class:`~marl_ppo.envs.transforms.FlatObservation` keeps it
(or flattens it, :class:`~marl_ppo.envs.options.ImageOptions`), :class:`ImageObservation` grays and
resizes it, and torchrl's ``CatFrames`` stacks the last ``frames`` along the channels. A ``uint8``
image stays ``uint8``.

>>> import torch
>>> resize = ImageObservation(["g"], size=[2, 2], grayscale=True)
>>> frame = torch.full((1, 4, 4, 3), 200, dtype=torch.uint8)  # one agent, a 4 x 4 RGB frame
>>> out = resize._apply_transform(frame)
>>> out.shape, out.dtype, out[0, 0, 0].tolist()
(torch.Size([1, 2, 2, 1]), torch.uint8, [200])
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from tensordict import TensorDictBase
from torchrl.data import Bounded, Composite, Unbounded
from torchrl.envs import CatFrames, EnvBase, Transform

from marl_ppo.envs.options import ImageOptions
from marl_ppo.envs.transforms import FlatObservation, is_image, needs_flattening
from marl_ppo.groups.specs import GroupSpecError, group_map

__all__ = ["ImageObservation", "observation_transforms"]

# ITU-R BT.601 luma weights of R, G, B (what torchvision's rgb_to_grayscale uses)
_LUMA = (0.299, 0.587, 0.114)


class ImageObservation(Transform):
    """Grays and resizes each listed group's image ``(group, "observation")``, ``[..., H, W, C]`` in and out.

    Written by hand: torchrl's ``Resize`` and ``GrayScale`` call torchvision, whose PyPI build does not
    load beside the CPU build of torch this package installs. Bilinear, antialiased interpolation
    (``F.interpolate``, on the ``uint8`` values where the image is ``uint8``), then the luma of the
    resized image; a ``uint8`` image is rounded back to ``uint8``.

    Args:
        groups: the groups whose image is changed.
        size: ``[H, W]`` after the resize, or ``None`` to keep the size.
        grayscale: RGB to one luma channel.
    """

    def __init__(self, groups: Sequence[str], *, size: Sequence[int] | None, grayscale: bool) -> None:
        keys = [(g, "observation") for g in groups]
        super().__init__(in_keys=keys, out_keys=keys)
        self.size = None if size is None else tuple(size)
        self.grayscale = grayscale

    def _apply_transform(self, obs: torch.Tensor) -> torch.Tensor:
        *lead, h, w, c = obs.shape
        x = obs.reshape(-1, h, w, c).permute(0, 3, 1, 2)  # [N, C, H, W], channels last in memory
        if self.size is not None and self.size != (h, w):
            # uint8 resized as uint8 (torch's kernel for it rounds): 5x faster than through float32 on
            # pistonball's 457 x 120 frames; both ops are linear, so resizing before graying gives the
            # same image up to that rounding
            x = x if x.dtype == torch.uint8 else x.to(torch.float32)
            x = F.interpolate(x, size=self.size, mode="bilinear", antialias=True, align_corners=False)
        if self.grayscale:
            x = (x.to(torch.float32) * x.new_tensor(_LUMA, dtype=torch.float32).view(1, 3, 1, 1)).sum(1, keepdim=True)
        if obs.dtype == torch.uint8:
            x = x.round().clamp(0, 255) if x.is_floating_point() else x
        x = x.to(obs.dtype).permute(0, 2, 3, 1)
        return x.reshape(*lead, *x.shape[1:])

    def _reset(self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase) -> TensorDictBase:
        return self._call(tensordict_reset)

    def transform_observation_spec(self, observation_spec: Composite) -> Composite:
        for key in self.in_keys:
            leaf = observation_spec[key]
            *lead, h, w, c = leaf.shape
            shape = (*lead, *(self.size or (h, w)), 1 if self.grayscale else c)
            if isinstance(leaf, Bounded):  # the same bounds: a gray or resized pixel stays within them
                low, high = leaf.space.low.min(), leaf.space.high.max()
                observation_spec[key] = Bounded(low, high, shape=shape, dtype=leaf.dtype, device=leaf.device)
            else:
                observation_spec[key] = Unbounded(shape=shape, dtype=leaf.dtype, device=leaf.device)
        return observation_spec


def observation_transforms(env: EnvBase, image: ImageOptions) -> list[Transform]:
    """The transforms one env copy needs so that each group observes a flat float vector or a kept image,
    changed as ``image`` says; ``[]`` when it needs none. Raises :class:`GroupSpecError` for grayscale of
    an image without 3 channels."""
    out: list[Transform] = []
    if needs_flattening(env, image.observation):
        out.append(FlatObservation.for_env(env, image.observation))
    if not image.changes_images:
        return out
    spec = env.full_observation_spec
    groups = [g for g in group_map(env) if is_image(_leaf(spec[g, "observation"]), spec[g].shape, image.observation)]
    if image.grayscale:
        for g in groups:
            channels = _leaf(spec[g, "observation"]).shape[-1]
            if channels != 3:
                raise GroupSpecError(
                    f"env.image.grayscale=true: group {g!r}'s image has {channels} channels, not 3 (RGB); "
                    "set env.image.grayscale=false"
                )
    if groups and (image.size is not None or image.grayscale):
        out.append(ImageObservation(groups, size=image.size, grayscale=image.grayscale))
    if image.frames > 1:
        for g in groups:
            # each group's own reset key: a copy's groups are reset together, and CatFrames needs one key
            reset_key = (g, "_reset") if (g, "_reset") in env.reset_keys else "_reset"
            key = (g, "observation")
            out.append(CatFrames(image.frames, dim=-1, in_keys=[key], out_keys=[key], reset_key=reset_key))
    return out


def _leaf(spec):
    """A nested observation's tensor spec (torchrl nests a Dict observation's ``observation``)."""
    return spec["observation"] if isinstance(spec, Composite) else spec
