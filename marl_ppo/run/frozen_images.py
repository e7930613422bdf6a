"""The first collected batch's check that each group's image observations change: a policy that trains on a
frozen frame sees nothing, and its return still moves.

A game can give the same image at every step when it is built wrong: PettingZoo's pistonball and
cooperative pong draw the screen they observe only when built with ``render_mode="rgb_array"``
(:func:`~marl_ppo.envs.pettingzoo.observation_kwargs` builds them so). The check compares, on the first
batch a run collects, each image entry before and after every step (``(group, key)`` against
``("next", group, key)``: the same episode by construction) and stops the run, naming the group, when no
pixel of any agent of any copy changed. ``env.image.check_changes=false`` turns it off for a game whose
images do stay still for a whole batch.

>>> import torch
>>> from tensordict import TensorDict
>>> from torchrl.data import Unbounded
>>> from marl_ppo.groups.specs import GroupSpec, inputs_spec
>>> image = ("g", "pixels")
>>> group = GroupSpec("g", ("a",), (image,), Unbounded(shape=(1, 2)), 0, ("g", "reward"),
...                   observation_spec=inputs_spec({image: Unbounded(shape=(1, 4, 4, 3), dtype=torch.uint8)}, 1))
>>> frame = torch.zeros(2, 5, 1, 4, 4, 3, dtype=torch.uint8)
>>> batch = TensorDict({image: frame, ("next", *image): frame.clone()}, [2, 5])
>>> check_images_change(batch, {"g": group})
Traceback (most recent call last):
...
marl_ppo.run.frozen_images.FrozenObservation: group 'g': its image observation ('g', 'pixels') [4, 4, 3] did not ...
>>> batch["next", "g", "pixels"][0, 3, 0, 1, 1, 0] = 7
>>> check_images_change(batch, {"g": group})
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

import torch
from tensordict import TensorDictBase

from marl_ppo.groups.specs import GroupSpec

__all__ = ["FrozenObservation", "check_images_change", "checked_first_batch"]

_IMAGE_RANK = 3  # [C, H, W] or [H, W, C] per agent


class FrozenObservation(ValueError):
    """A group's image observation did not change over a whole batch."""


def image_keys(group: GroupSpec) -> list[tuple[str, ...]]:
    """The group's observation entries with three sides per agent (spec ``[n_agents, *image]``)."""
    return [
        key if isinstance(key, tuple) else (key,)
        for key, spec in group.inputs.items(include_nested=True, leaves_only=True)
        if len(spec.shape) - 1 == _IMAGE_RANK
    ]


def check_images_change(batch: TensorDictBase, groups: Mapping[str, GroupSpec]) -> None:
    """Raises :class:`FrozenObservation` naming the first group whose image entry is the same before and after
    every step of ``batch`` (any leading dims: copies, seeds, time)."""
    for name, group in groups.items():
        for key in image_keys(group):
            before, after = batch.get(key, None), batch.get(("next", *key), None)
            if before is None or after is None or not torch.equal(before, after):
                continue
            steps, shape = batch.numel(), list(before.shape[batch.ndim + 1 :])
            raise FrozenObservation(
                f"group {name!r}: its image observation {key} {shape} did not change in any of {steps} steps of "
                "the first batch: the policy would train on one frozen frame. A game that draws its observation "
                "only when it renders needs env.kwargs.render_mode=rgb_array (PettingZoo's butterfly games get it "
                "by default); env.image.check_changes=false skips this check"
            )


def checked_first_batch(
    batches: Iterable[TensorDictBase], groups: Mapping[str, GroupSpec], *, enabled: bool
) -> Iterator[TensorDictBase]:
    """``batches``, the first one checked by :func:`check_images_change` (where ``enabled``)."""
    for i, batch in enumerate(batches):
        if i == 0 and enabled:
            check_images_change(batch, groups)
        yield batch
