"""The export formats, one row each: how a captured policy is written, and how the file is run back.

Every format starts from one ``torch.export`` capture of a :class:`~marl_ppo.export.graph.PolicyGraph`
(its batch dim free), so all three run the same graph of ATen operators:

==============  =========  ==========================================  ==========================
format          file       runs with                                   needs
==============  =========  ==========================================  ==========================
``onnx``        ``.onnx``  onnxruntime, or any ONNX runtime              extra ``export``
``torchscript`` ``.pt``    ``torch.jit.load`` (C++: libtorch)          torch
``exported``    ``.pt2``   ``torch.export.load(f).module()``;          torch
                           AOTInductor can compile it
==============  =========  ==========================================  ==========================

``run(path)`` gives a callable from a list of numpy arrays (in the graph's input order) to a list
of numpy arrays: how the export checks each file it writes against the torch policy; ``needs(path)``
every file a runtime must have beside it to load it (``policy.json`` lists them: a copy of those
files alone runs).

The free leading dim is named :data:`BATCH` wherever a file names its axes (an ONNX graph's
``dim_param``), as ``policy.json`` names it. An ONNX policy's weights are kept inside the ``.onnx``
(one file) up to :data:`ONNX_INLINE_LIMIT` bytes; above it (protobuf's 2 GB limit is near) they go
to ``policy.onnx.data`` beside it, which ``needs`` then lists.
"""

from __future__ import annotations

import importlib
import logging
import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from marl_ppo.export.graph import ExportError, PolicyGraph

__all__ = ["Format", "FORMATS", "export_format", "capture", "BATCH", "ONNX_INLINE_LIMIT"]

BATCH = "batch"  # the free leading dim's name, in the files as in policy.json
ONNX_INLINE_LIMIT = 1 << 30  # bytes of weights kept inside policy.onnx; more go to policy.onnx.data

Runner = Callable[[list[np.ndarray]], list[np.ndarray]]


@dataclass(frozen=True)
class Format:
    """One export format: its file suffix, the packages it needs (and the extra that installs them),
    how it writes a captured graph, and how it runs the file back."""

    name: str
    suffix: str
    packages: tuple[str, ...]
    extra: str | None
    write: Callable[[torch.export.ExportedProgram, PolicyGraph, tuple, Path], None]
    run: Callable[[Path, PolicyGraph], Runner]
    needs: Callable[[Path], list[str]] = lambda path: [path.name]

    def check_installed(self) -> None:
        missing = [p for p in self.packages if not _imports(p)]
        if missing:
            raise ImportError(
                f"format {self.name!r} needs {', '.join(missing)}, which is not installed: "
                f"pip install 'marl-ppo[{self.extra}]'"
            )


def _imports(package: str) -> bool:
    try:
        importlib.import_module(package)
    except ImportError:
        return False
    return True


def capture(graph: PolicyGraph, example: tuple) -> torch.export.ExportedProgram:
    """``graph`` captured by ``torch.export`` with its leading (batch) dim free."""
    batch = torch.export.Dim(BATCH, min=1, max=1 << 20)
    shapes = (tuple({0: batch} for _ in example),)  # forward(*inputs): one tuple of per-input specs
    with warnings.catch_warnings():  # torchrl's and tensordict's own warnings while tracing
        warnings.simplefilter("ignore")
        return torch.export.export(graph, example, dynamic_shapes=shapes, strict=False)


def _torch_runner(module: Callable) -> Runner:
    def run(inputs: list[np.ndarray]) -> list[np.ndarray]:
        with torch.no_grad():
            out = module(*[torch.from_numpy(np.ascontiguousarray(x)) for x in inputs])
        return [o.numpy() for o in out]

    return run


def _write_exported(program, graph, example, path: Path) -> None:
    with warnings.catch_warnings():  # "no complete tensor found": about weights on another device; all are on the CPU
        warnings.simplefilter("ignore")
        torch.export.save(program, str(path))


def _run_exported(path: Path, graph: PolicyGraph) -> Runner:
    return _torch_runner(torch.export.load(str(path)).module())


def _write_torchscript(program, graph, example, path: Path) -> None:
    # traced from the captured ATen graph, not from the policy: tracing a tensordict module directly
    # reads its deprecated attributes, and torchrl's safe tanh is an autograd.Function TorchScript
    # cannot hold; the captured graph holds tensors and operators only. Its sizes are plain numbers by
    # then: a size read off the data becomes a constant, so the models reshape with -1 (and the check
    # below runs 5 rows through a graph captured on 3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = torch.jit.trace(program.module(), example, check_trace=False)
    traced.save(str(path))


def _run_torchscript(path: Path, graph: PolicyGraph) -> Runner:
    return _torch_runner(torch.jit.load(str(path)))


def _write_onnx(program, graph, example, path: Path) -> None:
    names = dict(input_names=[p.name for p in graph.inputs], output_names=[p.name for p in graph.outputs])
    # the axes named as policy.json names them: given as strings, the exporter renames its symbols (s95) to them
    axes = (tuple({0: BATCH} for _ in example),)
    size = sum(t.numel() * t.element_size() for t in program.state_dict.values()) + sum(
        t.numel() * t.element_size() for t in program.constants.values() if isinstance(t, torch.Tensor)
    )
    stale = path.with_name(path.name + ".data")
    stale.unlink(missing_ok=True)  # a previous export's weights must not pass for this one's
    registry = logging.getLogger("torch.onnx")  # one warning per torchvision operator it cannot register
    level = registry.level
    registry.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                program, example, str(path), verbose=False, optimize=True, dynamic_shapes=axes,
                external_data=size > ONNX_INLINE_LIMIT, **names,
            )  # fmt: skip
    except torch.onnx.OnnxExporterError as err:  # an operator ONNX has no translation for: name it, and what would do
        ops = sorted(set(re.findall(r"OpOverload\(op='([\w.:]+)'", str(err)))) or ["(see the ONNX exporter's report)"]
        raise ExportError(
            f"format 'onnx': no ONNX translation for operator(s) {', '.join(ops)}; export this policy with "
            "--format exported or --format torchscript, which keep every torch operator"
        ) from None
    finally:
        registry.setLevel(level)


def _onnx_needs(path: Path) -> list[str]:
    """``path`` and every external data file its initializers name (read from the graph, not guessed)."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    tensors = [*model.graph.initializer, *(a.t for n in model.graph.node for a in n.attribute if a.HasField("t"))]
    files = {e.value for t in tensors for e in t.external_data if e.key == "location"}
    return [path.name, *sorted(files)]


def _run_onnx(path: Path, graph: PolicyGraph) -> Runner:
    import onnxruntime

    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [p.name for p in graph.inputs]

    def run(inputs: list[np.ndarray]) -> list[np.ndarray]:
        return session.run(None, dict(zip(names, inputs)))

    return run


FORMATS: dict[str, Format] = {
    f.name: f
    for f in (
        Format("onnx", ".onnx", ("onnx", "onnxscript", "onnxruntime"), "export", _write_onnx, _run_onnx, _onnx_needs),
        Format("torchscript", ".pt", (), None, _write_torchscript, _run_torchscript),
        Format("exported", ".pt2", (), None, _write_exported, _run_exported),
    )
}


def export_format(name: str) -> Format:
    """The format named ``name``; an ExportError listing the formats for an unknown one."""
    if name not in FORMATS:
        raise ExportError(f"unknown export format {name!r}; expected one of {list(FORMATS)}")
    return FORMATS[name]
