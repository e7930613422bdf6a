"""What the env does to an observation before the policy reads it, written into ``policy.json``.

An exported graph starts where the policy starts: at the observation the run's env *gives* it,
after the adapter's flattening and ``env.image``'s resize, grayscale and frame stack. A runtime fed
the game's own observation instead (pistonball's RGB frame where the policy was trained on 64 x 64
gray stacks) runs without error and acts blind, so ``policy.json`` says, per observation input,
where the observation comes from (``source``), each step in order (``flatten``, ``cast``,
``resize``, ``grayscale``, ``frame_stack``, with what a runtime needs to redo it exactly), and the
layout the graph reads (``layout``). It is read from the run's ``env`` section (``env.kind``,
``env.image``) and the graph's ports; this layer does not build envs.

>>> from types import SimpleNamespace
>>> image_steps(SimpleNamespace(size=[64, 64], grayscale=True, frames=4))[1]["weights"]
[0.299, 0.587, 0.114]
"""

from __future__ import annotations

from typing import Any

from marl_ppo.envs.kinds import env_kind
from marl_ppo.export.graph import Port

__all__ = ["preprocessing", "image_steps", "LUMA"]

LUMA = (0.299, 0.587, 0.114)  # ITU-R BT.601, as marl_ppo.envs.images grays (a test holds the two equal)


def image_steps(image: Any) -> list[dict[str, Any]]:
    """``env.image``'s steps on a kept image ``[H, W, C]``, in the order the env applies them."""
    steps: list[dict[str, Any]] = []
    if image.size is not None:
        steps.append({
            "op": "resize", "size": list(image.size), "interpolation": "bilinear, antialiased, half-pixel centres "
            "(torch.nn.functional.interpolate(mode='bilinear', antialias=True, align_corners=False))",
            "uint8": "resized as uint8 (rounded)",
        })  # fmt: skip
    if image.grayscale:
        steps.append({
            "op": "grayscale", "weights": list(LUMA), "channels_out": 1,
            "uint8": "sum of the weighted float channels, rounded and clipped to 0..255",
        })  # fmt: skip
    if image.frames > 1:
        steps.append({
            "op": "frame_stack", "frames": image.frames, "axis": -1, "order": "oldest first, newest last",
            "at_reset": "the first frame repeated",
        })  # fmt: skip
    return steps


def _entry(port: Port, cfg: Any, layout: str) -> dict[str, Any]:
    """One observation input: the steps from what the env gives to what the graph reads, and its layout."""
    per_agent = list(port.shape[2:] if layout == "group" else port.shape[1:])
    image = len(per_agent) == 3
    steps: list[dict[str, Any]] = []
    prep = env_kind(cfg.kind).export_prep
    if prep == "flatten" and not image:  # FlatObservation: what is not one float32 vector per agent
        steps.append({
            "op": "flatten", "order": "C (row-major: the last axis fastest)", "dtype": "float32",
            "discrete": f"an integer observation becomes a one-hot vector of {per_agent[-1]}",
        })  # fmt: skip
    elif prep == "cast":
        steps.append({"op": "cast", "dtype": "float32"})
    if image:
        steps += image_steps(cfg.image)
    rows = "[batch, n_agents, " if layout == "group" else "[batch, "
    scaled = " 0..255 (the graph scales it to [0, 1])" if port.dtype == "uint8" else ""
    return {
        "input": port.name,
        "steps": steps,
        "layout": f"{rows}H, W, C] = {list(port.shape)}: channels last (as the game gives it), {port.dtype}{scaled}"
        if image
        else f"{rows}features] = {list(port.shape)}: one {port.dtype} vector per agent",
    }


def preprocessing(cfg: Any, ports: list[Port], layout: str) -> dict[str, Any]:
    """``policy.json``'s ``observation`` record for a group's observation ``ports`` (in ``layout``) of a
    run whose env section is ``cfg`` (its ``kind``, ``scenario`` and ``image``)."""
    return {
        "env": cfg.kind,
        "scenario": cfg.scenario,
        "source": env_kind(cfg.kind).export_source,
        "agent_axis": "axis 1: the agents in policy.json's 'agents' order"
        if layout == "group"
        else "none: each row is one agent (any agent of the group, from any env copy)",
        "entries": [_entry(p, cfg, layout) for p in ports],
    }
