"""The package's structure, read from its imports: layers as folders, arrows pointing down only.

Every ``import`` of a ``marl_ppo`` module in the package (at module level or inside a function) is
read from the source. The test fails on an import from a layer to one it may not use (a higher one
or a sibling), on ``marl_ppo.config`` imported below ``run/``, on a circle of modules, on a private
name imported from another module, on more than 7 floors, on a module over 450 lines, and on a
trainer class that no longer reads in well under 300 lines. ``docs/concepts.md`` draws the same
layers.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "marl_ppo"

# layer -> the layers it may import (besides itself); the package's __init__ names modules as strings only
ALLOWED = {
    "table": set(),
    "upstream": set(),
    "stats": set(),
    "lazy": set(),
    "algorithms": {"table", "options"},
    "options": set(),
    "config_files": {"options"},
    "log_options": {"table", "options"},
    "loss_options": {"table", "algorithms", "options"},
    "recipes": {"table"},
    "groups": {"options", "upstream", "lazy"},
    "models": {"table", "groups", "options", "upstream", "lazy"},
    "envs": {"table", "groups", "options", "upstream", "lazy"},
    "collect": {"groups", "options", "upstream", "lazy"},
    "core": {"table", "algorithms", "models", "groups", "options", "upstream", "lazy"},
    "opponents": {"table", "groups", "options", "upstream", "lazy"},
    "config": {
        "table",
        "algorithms",
        "config_files",
        "log_options",
        "loss_options",
        "recipes",
        "envs",
        "models",
        "collect",
        "groups",
        "opponents",
        "options",
        "upstream",
        "lazy",
    },
    "run": {
        "table",
        "algorithms",
        "config",
        "log_options",
        "loss_options",
        "recipes",
        "config_files",
        "core",
        "collect",
        "envs",
        "models",
        "groups",
        "opponents",
        "options",
        "upstream",
        "lazy",
        "stats",
    },
    "suite": {
        "table",
        "algorithms",
        "opponents",
        "log_options",
        "loss_options",
        "recipes",
        "run",
        "config",
        "config_files",
        "core",
        "collect",
        "envs",
        "models",
        "groups",
        "options",
        "upstream",
        "lazy",
        "stats",
    },
    "export": {"table", "run", "envs", "models", "groups", "options", "upstream", "lazy"},
    "cli": {
        "table",
        "export",
        "algorithms",
        "opponents",
        "log_options",
        "loss_options",
        "recipes",
        "suite",
        "run",
        "config",
        "config_files",
        "core",
        "collect",
        "envs",
        "models",
        "groups",
        "options",
        "upstream",
        "lazy",
        "stats",
    },
}
CONFIG_READERS = {"run", "suite", "cli"}
MAX_FLOORS, MAX_LINES, MAX_TRAINER_LINES = 7, 450, 240


def _module(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _layer(module: str) -> str | None:
    parts = module.split(".")
    if parts[1:] == ["__main__"]:  # python -m marl_ppo: the command line's own floor
        return "cli"
    return parts[1] if len(parts) > 1 else None


_NAMED = re.compile(r"marl_ppo(\.\w+)+(:\w+)?")  # "marl_ppo.envs.vmas:make_vmas": a table row's import on first use


def _imports(path: Path) -> list[tuple[str, list[str], int]]:
    """``(imported module, names taken from it, line)`` for every marl_ppo import in the file, and every string
    naming a marl_ppo module (``"module"`` or ``"module:name"``, a variant table's import on first use): an
    arrow the layers must allow as much as an import statement."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and _NAMED.fullmatch(node.value):
            module, _, name = node.value.partition(":")
            out.append((module, [name] if name else [], -node.lineno))  # negative line: resolved on first use
        elif isinstance(node, ast.Import):
            out += [(a.name, [], node.lineno) for a in node.names if a.name.startswith("marl_ppo")]
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("marl_ppo"):
            out.append((node.module, [a.name for a in node.names], node.lineno))
    return out


FILES = sorted(PACKAGE.rglob("*.py"))
MODULES = {_module(p): p for p in FILES}
GRAPH = {m: [(target, names, line) for target, names, line in _imports(p)] for m, p in MODULES.items()}


def test_every_file_is_in_a_layer():
    unplaced = [m for m in MODULES if m != "marl_ppo" and _layer(m) not in ALLOWED]
    assert not unplaced, f"modules outside every layer of ALLOWED: {unplaced}"


def test_imports_point_down_and_the_config_is_read_at_the_top():
    wrong = []
    for module, imports in GRAPH.items():
        layer = _layer(module)
        if layer is None:
            continue
        for target, _, line in imports:
            other = _layer(target)
            if other is not None and other != layer and other not in ALLOWED[layer]:
                wrong.append(
                    f"{MODULES[module].relative_to(PACKAGE.parent)}:{abs(line)} ({layer}) imports {target} ({other})"
                )
            if _layer(target) == "config" and layer not in CONFIG_READERS:
                wrong.append(f"{MODULES[module].relative_to(PACKAGE.parent)}:{line} reads the run's config")
    assert not wrong, "imports against the layers:\n" + "\n".join(wrong)


def test_no_circle_of_modules():
    """Import statements only: a table row's ``"module:name"`` is imported when the row is used, after both
    modules have loaded (a row's builder may import its table's module), so it makes no circle at import time."""
    edges = {
        m: {t if t in MODULES else t.rpartition(".")[0] for t, _, line in imps if line > 0} & set(MODULES) - {m}
        for m, imps in GRAPH.items()
    }
    # a package's __init__ re-exporting its modules is not a circle with them: only module -> module edges
    edges = {m: {t for t in ts if not MODULES[t].name == "__init__.py"} for m, ts in edges.items()}
    index, low, stack, on, circles, counter = {}, {}, [], set(), [], [0]

    def visit(v):  # Tarjan's strongly connected components
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                circles.append(sorted(comp))

    for v in edges:
        if v not in index:
            visit(v)
    assert not circles, f"modules importing each other in a circle: {circles}"


def test_no_private_name_is_imported_from_another_module():
    private = [
        f"{MODULES[m].relative_to(PACKAGE.parent)}:{abs(line)} takes {names} from {target}"
        for m, imps in GRAPH.items()
        for target, names, line in imps
        if any(
            n.startswith("_") and not (n.startswith("__") and n.endswith("__")) for n in names
        )  # __version__ is public
    ]
    assert not private, "private names used across modules:\n" + "\n".join(private)


def test_at_most_seven_floors():
    floor: dict[str, int] = {}

    def height(layer: str) -> int:
        if layer not in floor:
            floor[layer] = 1 + max((height(d) for d in ALLOWED[layer]), default=0)
        return floor[layer]

    used = {
        layer: {_layer(t) for m, imps in GRAPH.items() if _layer(m) == layer for t, _, _ in imps} - {layer, None}
        for layer in ALLOWED
    }
    assert all(used[layer] <= ALLOWED[layer] for layer in ALLOWED)
    assert max(height(layer) for layer in ALLOWED) <= MAX_FLOORS, floor


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_module_is_over_450_lines(path):
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_LINES, f"{path.relative_to(PACKAGE.parent)} has {lines} lines: cut it by concern"


def test_the_trainer_reads_top_to_bottom_in_well_under_300_lines():
    tree = ast.parse((PACKAGE / "run" / "trainer.py").read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Trainer")
    assert cls.end_lineno - cls.lineno + 1 <= MAX_TRAINER_LINES
