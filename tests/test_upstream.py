"""The table of private upstream names (:mod:`marl_ppo.upstream`) holds for the installed libraries, and is whole.

Each row's name still exists where the table says, with the parameters we rely on; and the
package's source touches no private name of another library (an attribute ``x._name`` of an
object that is not ours, or a private name imported from torch, torchrl, tensordict, VMAS or numpy)
that the table does not list.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from pathlib import Path

import pytest

from marl_ppo.upstream import PRIVATE_NAMES

PACKAGE = Path(__file__).resolve().parents[1] / "marl_ppo"
# private attributes of the package's own objects read across them (ours to change)
OWN = {"_output_layers", "_files"}
KINDS = {"override", "call", "read", "import", "mirror", "hook"}


def _resolve(path: str):
    try:
        return importlib.import_module(path)
    except ImportError:
        module, _, attr = path.rpartition(".")
        return getattr(_resolve(module), attr)


@pytest.mark.parametrize("row", PRIVATE_NAMES, ids=lambda r: f"{r.owner}.{r.name}")
def test_private_name_still_exists_with_the_parameters_we_use(row):
    assert row.kind in KINDS
    owner = _resolve(row.owner)
    if not hasattr(owner, row.name):  # an attribute set in __init__: its class's source assigns it
        source = "".join(inspect.getsource(c) for c in inspect.getmro(owner) if c.__module__ != "builtins")
        assert re.search(rf"\bself\.{row.name}\s*(:[^=\n]*)?=", source), (
            f"{row.owner} no longer has {row.name} ({row.used_in})"
        )
    if row.params is not None:
        params = tuple(p for p in inspect.signature(getattr(owner, row.name)).parameters if p != "self")
        assert params == row.params, f"{row.owner}.{row.name}{params}: {row.used_in} relies on {row.params}"


def _touched_private_names() -> dict[str, list[str]]:
    """``name -> [file:line]`` for every private attribute of an object that is not ``self``/``cls`` and
    every private name imported from another library, in the package's source."""
    found: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        where = str(path.relative_to(PACKAGE.parent))
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
                base = node.value
                if not (isinstance(base, ast.Name) and base.id in ("self", "cls")) and not (
                    isinstance(base, ast.Call) and isinstance(base.func, ast.Name) and base.func.id == "super"
                ):
                    names.append(node.attr)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.module.startswith("marl_ppo"):
                names += [a.name for a in node.names if a.name.startswith("_") and a.name != "__future__"]
                names += [part for part in node.module.split(".") if part.startswith("_") and part != "__future__"]
            for name in names:
                found.setdefault(name, []).append(f"{where}:{node.lineno}")
    return found


def test_every_private_name_the_package_touches_is_in_the_table():
    listed = {row.name for row in PRIVATE_NAMES} | {p for row in PRIVATE_NAMES for p in row.owner.split(".")}
    unlisted = {
        name: places for name, places in _touched_private_names().items() if name not in listed and name not in OWN
    }
    assert not unlisted, f"private names of other libraries not in marl_ppo/upstream.py: {unlisted}"


def test_getattr_reads_of_private_names_are_listed():
    """``getattr(x, "_name", default)`` reads a private name too (one that may vanish silently)."""
    listed = {row.name for row in PRIVATE_NAMES} | OWN
    unlisted = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "hasattr")
                and len(node.args) > 1
                and isinstance(node.args[1], ast.Constant)
                and str(node.args[1].value).startswith("_")
                and not str(node.args[1].value).startswith("__")
                and node.args[1].value not in listed
            ):
                unlisted.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {node.args[1].value}")
    assert not unlisted, unlisted
