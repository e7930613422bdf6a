"""Checkpoint files: written atomically, loaded without running code, chosen safely on resume.

A checkpoint holds tensors and plain containers only (numbers, strings, lists, dicts), so it
loads with ``torch.load(weights_only=True)``: a file that asks for anything else (an object whose
unpickling would run code) is refused with :class:`CheckpointError`, naming the file and the
type it asked for. The RNG states are stored as tensors and lists for that reason.

Checkpoints written by earlier versions of marl_ppo still load, converted to today's format here
(the core knows only that one): numpy's RNG state kept as a numpy array (numpy arrays of plain
numbers are the one extra type allowed: their reconstruction runs no user code), and router entries
that today's router no longer holds (:func:`is_legacy_key`), dropped.

A write goes to ``NAME.tmp``, is flushed to disk (``fsync``), then
renamed over ``NAME``: a crash leaves either the old file or the new one, never half of one.

>>> import tempfile, torch
>>> path = Path(tempfile.mkdtemp()) / "c.pt"
>>> write_checkpoint({"router": {"w": torch.ones(2)}, "iteration": 3}, [path])
>>> load_checkpoint(path)["iteration"]
3
"""

from __future__ import annotations

import copy
import io
import os
import pickle
import random
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

__all__ = [
    "CheckpointError",
    "write_checkpoint",
    "load_checkpoint",
    "is_legacy_key",
    "usable_iterations",
    "rng_state",
    "set_rng_state",
    "preserved_rng",
    "checkpoint_candidates",
    "remove_stale_temporaries",
    "Choice",
    "choose_checkpoint",
]


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be written, read, trusted or used for this run."""


def write_checkpoint(state: dict[str, Any], paths: Sequence[Path]) -> None:
    """Serialises ``state`` once and writes it atomically to every path (temp file, fsync, rename).

    A failed write (a full disk, a read-only folder) raises :class:`CheckpointError` naming the
    path; the file that was there before is untouched and the temp file is removed.
    """
    buffer = io.BytesIO()
    torch.save(state, buffer)
    data = buffer.getbuffer()
    for path in paths:
        path = Path(path)
        tmp = path.with_name(path.name + ".tmp")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except OSError as err:
            try:
                tmp.unlink(missing_ok=True)
            except OSError:
                pass
            reason = err.strerror or str(err)
            raise CheckpointError(f"cannot write checkpoint {path}: [Errno {err.errno}] {reason}") from err


def _numpy_array_globals() -> list:
    """The types numpy arrays of plain numbers need to unpickle (older checkpoints' RNG state)."""
    try:
        from numpy._core.multiarray import _reconstruct
    except ImportError:  # numpy < 2
        from numpy.core.multiarray import _reconstruct  # type: ignore[no-redef]
    dtypes = [type(np.dtype(t)) for t in ("uint32", "int64", "float64", "float32", "int32")]
    return [_reconstruct, np.ndarray, np.dtype, *dtypes]


_UNSUPPORTED = re.compile(r"GLOBAL ([\w.]+)")


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """Loads a checkpoint with ``weights_only=True``, onto the CPU.

    Raises :class:`CheckpointError` naming the file for a missing, empty, truncated or corrupt
    file, and for one that asks to unpickle a type that could run code (named in the message).
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"no checkpoint at {path}")
    if path.stat().st_size == 0:
        raise CheckpointError(f"checkpoint {path} is empty (0 bytes): it was cut off while being written")
    try:
        with torch.serialization.safe_globals(_numpy_array_globals()):
            state = torch.load(path, weights_only=True, map_location="cpu")
    except pickle.UnpicklingError as err:
        found = _UNSUPPORTED.search(str(err))
        if found:
            raise CheckpointError(
                f"refusing checkpoint {path}: it asks to unpickle {found.group(1)!r}, which is not a tensor "
                "or a plain container and could run code when loaded. marl_ppo checkpoints hold tensors, "
                "numbers, strings, lists and dicts only; do not load this file unless you trust where it "
                "came from"
            ) from None
        raise CheckpointError(f"checkpoint {path} is corrupt or not a checkpoint: {_first_line(err)}") from None
    except Exception as err:  # noqa: BLE001 -- damaged bytes make the unpickler raise nearly anything
        # (IndexError, KeyError, TypeError, ... besides RuntimeError/EOFError/BadZipFile/ValueError)
        raise CheckpointError(
            f"checkpoint {path} is truncated or corrupt: {type(err).__name__}: {_first_line(err)}"
        ) from None
    if not isinstance(state, dict) or "router" not in state or "iteration" not in state:
        raise CheckpointError(f"{path} is not a marl_ppo checkpoint (no 'router' and 'iteration' entries)")
    rng = state.get("rng")
    if isinstance(rng, dict) and isinstance(rng.get("numpy"), tuple):  # written before numpy states were lists
        rng["numpy"] = _numpy_state_to_plain(rng["numpy"])
    router = state["router"]
    for key in [k for k in router if is_legacy_key(k)] if isinstance(router, dict) else []:
        del router[key]  # in place: a state_dict's OrderedDict keeps its _metadata
    return state


# Router entries of earlier formats, dropped on load: before the one GAE path, recurrent and global
# critics had a second estimator (``_estimators.<group>.gamma/lmbda``, the same values as the loss's);
# before the entropy schedule became the training state's value, each loss held its configured
# coefficients twice (``base_head_entropy_coeffs``; a resumed run takes them from its config anyway).
LEGACY_ROUTER_PREFIXES = ("_estimators.",)
LEGACY_ROUTER_SUFFIXES = (".base_head_entropy_coeffs",)


def is_legacy_key(key: str) -> bool:
    """Whether a router state-dict entry is one earlier checkpoints hold and today's router does not.

    >>> is_legacy_key("_estimators.agents.gamma"), is_legacy_key("losses.agents.head_entropy_coeffs")
    (True, False)
    """
    return key.startswith(LEGACY_ROUTER_PREFIXES) or key.endswith(LEGACY_ROUTER_SUFFIXES)


def _first_line(err: BaseException) -> str:
    """The informative part of an error: torch's weights-only errors open with a generic paragraph."""
    paragraphs = [p.strip() for p in str(err).split("\n\n") if p.strip()]
    if len(paragraphs) > 1 and paragraphs[0].startswith("Weights only load failed"):
        paragraphs = paragraphs[1:]
    text = paragraphs[0].splitlines()[0] if paragraphs else ""
    return f"{type(err).__name__}: {text}"


# -- RNG states as tensors and lists -------------------------------------------------------------


def _numpy_state_to_plain(state: tuple) -> dict[str, Any]:
    name, keys, pos, has_gauss, cached = state
    return {
        "name": str(name),
        "keys": torch.from_numpy(np.asarray(keys, dtype=np.int64)),
        "pos": int(pos),
        "has_gauss": int(has_gauss),
        "cached_gaussian": float(cached),
    }


def rng_state() -> dict[str, Any]:
    """The torch (CPU and CUDA), numpy and python RNG states, as tensors and plain containers."""
    version, internal, gauss = random.getstate()
    return {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
        "numpy": _numpy_state_to_plain(np.random.get_state()),
        "python": [version, list(internal), gauss],
    }


def set_rng_state(state: dict[str, Any]) -> None:
    """Restores what :func:`rng_state` returned."""
    torch.set_rng_state(state["torch"])
    if state.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    npy = state["numpy"]
    np.random.set_state(
        (npy["name"], npy["keys"].numpy().astype(np.uint32), npy["pos"], npy["has_gauss"], npy["cached_gaussian"])
    )
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))


def _vmas_shared_state() -> list | None:
    """VMAS's own RNG state, one for every VMAS env of the process, or ``None`` (VMAS not loaded).

    VMAS 1.5 runs ``__init__``, ``seed``, ``reset`` and ``step`` of every env inside
    ``local_seed(Environment.vmas_random_state)``: it swaps in a class-level torch/numpy/python
    state, so its envs leave the global RNG alone but draw from one shared stream: resetting an
    evaluation env moves the training env's stream.
    """
    module = sys.modules.get("vmas.simulator.environment.environment")
    return getattr(getattr(module, "Environment", None), "vmas_random_state", None)


class preserved_rng:
    """Context manager: the RNG states after the block are those from before it.

    The global torch/numpy/python states and VMAS's shared one (see :func:`_vmas_shared_state`).
    For work that must not shift the training's random streams: building, seeding and running an
    evaluation env.
    """

    def __enter__(self) -> "preserved_rng":
        self._state = rng_state()
        shared = _vmas_shared_state()
        self._vmas = None if shared is None else [copy.deepcopy(x) for x in shared]
        return self

    def __exit__(self, *exc) -> None:
        set_rng_state(self._state)
        shared = _vmas_shared_state()
        if shared is not None and self._vmas is not None:
            shared[:] = self._vmas  # in place: VMAS's methods hold this very list


# -- choosing a checkpoint to resume from -------------------------------------------------------

_ITER = re.compile(r"iter_(\d+)\.pt$")


def checkpoint_candidates(ckpt_dir: Path) -> list[Path]:
    """``last.pt`` and the ``iter_*.pt`` files, newest iteration first (``last.pt`` first on a tie)."""
    ckpt_dir = Path(ckpt_dir)
    iters = sorted(
        (p for p in ckpt_dir.glob("iter_*.pt") if _ITER.search(p.name)),
        key=lambda p: int(_ITER.search(p.name).group(1)),
        reverse=True,
    )
    last = ckpt_dir / "last.pt"
    return ([last] if last.exists() else []) + iters


def remove_stale_temporaries(ckpt_dir: Path) -> list[Path]:
    """Deletes ``*.tmp`` files a killed write left behind; returns them."""
    stale = sorted(Path(ckpt_dir).glob("*.tmp"))
    for p in stale:
        p.unlink(missing_ok=True)
    return stale


@dataclass
class Choice:
    """What :func:`choose_checkpoint` found: the checkpoint to resume from (or none) and why."""

    path: Path | None = None
    state: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)


def usable_iterations(ckpt_dir: Path) -> set[int]:
    """The iterations of the checkpoints in ``ckpt_dir`` that load."""
    out = set()
    for path in checkpoint_candidates(ckpt_dir):
        try:
            out.add(int(load_checkpoint(path)["iteration"]))
        except CheckpointError:
            continue
    return out


def choose_checkpoint(
    ckpt_dir: Path, mismatch: Callable[[dict[str, Any]], str | None], at_most: int | None = None
) -> Choice:
    """The newest checkpoint in ``ckpt_dir`` that loads and fits the run (``at_most``: of iteration
    ``<= at_most``, the point a group of seeds resumes from together).

    Removes stale ``*.tmp`` files first. Reads ``last.pt``, then any ``iter_*.pt`` newer than it
    (newest first), stopping at the first that loads and for which ``mismatch(state)`` is
    ``None``; when ``last.pt`` is unusable, the newest usable ``iter_*.pt``. Every file skipped is
    named in :attr:`Choice.notes` with the reason. No checkpoint file at all gives an empty
    choice (the run starts afresh); files that exist but none usable raise :class:`CheckpointError`.
    """
    ckpt_dir = Path(ckpt_dir)
    notes = [f"removed {p.name}, left by a write that was cut off" for p in remove_stale_temporaries(ckpt_dir)]
    candidates = checkpoint_candidates(ckpt_dir)
    if not candidates:
        return Choice(notes=notes)

    def usable(path: Path) -> dict[str, Any] | None:
        try:
            state = load_checkpoint(path)
        except CheckpointError as err:
            notes.append(f"skipped {path.name}: {err}")
            return None
        why = mismatch(state)
        if why is None and at_most is not None and int(state["iteration"]) > at_most:
            why = f"iteration {state['iteration']}: the group's seeds resume together from iteration {at_most}"
        if why is not None:
            notes.append(f"skipped {path.name}: {why}")
            return None
        return state

    last = ckpt_dir / "last.pt"
    best = (last, usable(last)) if candidates[0] == last else (None, None)
    floor = int(best[1]["iteration"]) if best[1] is not None else -1
    for path in (p for p in candidates if p != last):
        if int(_ITER.search(path.name).group(1)) <= floor:
            break
        if at_most is not None and int(_ITER.search(path.name).group(1)) > at_most:
            notes.append(f"skipped {path.name}: the group's seeds resume together from iteration {at_most}")
            continue
        state = usable(path)
        if state is not None:
            if best[1] is not None:
                notes.append(f"{path.name} is newer than last.pt (iteration {floor})")
            best = (path, state)
            break
    if best[1] is None:
        raise CheckpointError(
            f"cannot resume: no usable checkpoint in {ckpt_dir} ({'; '.join(notes)}); move the "
            "checkpoints/ folder away to start the run afresh"
        )
    return Choice(best[0], best[1], notes)
