"""``policy.json``: everything a runtime needs beside an exported policy, in plain JSON.

Its ports (names, shapes with ``"batch"`` for the free dim, as the files name their axes, dtypes),
what the env does to an observation before the policy reads it (``observation``:
:mod:`~marl_ppo.export.preprocessing`), each action head's space (a box's bounds, a categorical's
size, a multi-categorical's sizes, whether a mask applies), the group's agents in row order, which
run and checkpoint the parameters come from, the package versions that wrote it, and per format the
file, every file a runtime needs beside it (``needs``: copy these) and the largest difference found
against the torch policy when it was checked.
"""

from __future__ import annotations

import importlib.metadata
from typing import Any

from marl_ppo.export.graph import PolicyGraph, Port
from marl_ppo.groups.specs import GroupSpec
from marl_ppo.models.distributions import Head, MultiCategorical, StableTanhNormal, action_heads

__all__ = ["manifest", "action_space", "VERSIONED"]

VERSIONED = ("marl-ppo", "torch", "torchrl", "tensordict", "onnx", "onnxruntime")


def _port(p: Port) -> dict[str, Any]:
    return {"name": p.name, "shape": list(p.shape), "dtype": p.dtype}


def _head(head: Head, group: GroupSpec) -> dict[str, Any]:
    cls, kwargs = head.dist_class, head.dist_kwargs
    out: dict[str, Any] = {"head": head.label}
    if cls is StableTanhNormal:
        out |= {"kind": "box", "low": kwargs["low"].tolist(), "high": kwargs["high"].tolist()}
    elif head.param_names == ("loc", "scale"):
        out |= {"kind": "box", "low": None, "high": None}
    elif cls is MultiCategorical:
        out |= {"kind": "multi_categorical", "nvec": list(kwargs["nvec"])}
    else:
        one_hot = "OneHot" in cls.__name__
        out |= {"kind": "one_hot" if one_hot else "categorical", "n": head.n_params}
        out["masked"] = group.action_mask_key is not None
    return out


def action_space(group: GroupSpec) -> list[dict[str, Any]]:
    """Each action head of ``group``, as a runtime reads it (``kind``: box, categorical, one_hot,
    multi_categorical)."""
    return [_head(h, group) for h in action_heads(group)]


def _versions() -> dict[str, str]:
    out = {}
    for name in VERSIONED:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return out


def manifest(
    graph: PolicyGraph,
    group: GroupSpec,
    *,
    outputs: str,
    files: dict[str, dict[str, Any]],
    source: dict[str, Any],
    preprocessing: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The ``policy.json`` of one group's export; ``files``: per format, the file, every file a runtime
    needs beside it, and its check; ``source``: the run, checkpoint, iteration and env it came from;
    ``preprocessing``: what the env does to an observation before the graph reads it (``observation``)."""
    return {
        "group": group.name,
        "agents": list(group.agents),
        "layout": graph.layout,
        "outputs": outputs,
        "deterministic": "each head's mode (a bounded box: its bounds' affine map of tanh(loc))"
        if outputs == "action"
        else "each head's distribution parameters; a mask, if any, is not applied",
        "inputs": [_port(p) for p in graph.inputs],
        "output_ports": [_port(p) for p in graph.outputs],
        "observation": preprocessing or {"env": None, "note": "exported without a run: feed what the policy read"},
        "action_space": action_space(group),
        "files": files,
        "source": source,
        "versions": _versions(),
    }
