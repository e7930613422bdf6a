"""One table type for every variant: algorithms, model kinds, env kinds, opponent sources, logger kinds.

A variant is a frozen dataclass row with a ``name`` (and its typed options on the row, beside its
code); a :class:`Table` holds the rows of one kind: :meth:`~Table.lookup` by name (an unknown name
raises one ``ValueError`` naming the kind, the closest names and every registered one),
:meth:`~Table.register` from user code (a name taken by another row is refused), iteration in
registration order. Nothing else in the package keeps a registry of its own.

Written by hand: the standard library has no registry with "did you mean" (``difflib`` gives the
closest names).

>>> from dataclasses import dataclass
>>> @dataclass(frozen=True)
... class Colour:
...     name: str
...     rgb: tuple = (0, 0, 0)
>>> colours = Table("colour", [Colour("red", (255, 0, 0)), Colour("green", (0, 255, 0))])
>>> colours.lookup("red").rgb
(255, 0, 0)
>>> colours.lookup("rde")
Traceback (most recent call last):
...
ValueError: unknown colour 'rde' (did you mean 'red'?); registered: ['green', 'red']
>>> with colours.scoped():
...     colours.register(Colour("blue", (0, 0, 255))).name, "blue" in colours
('blue', True)
>>> "blue" in colours
False
>>> colours.register(Colour("red"))  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
ValueError: colour 'red' is registered already (Colour(name='red', rgb=(255, 0, 0)))
"""

from __future__ import annotations

import contextlib
import difflib
import importlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Generic, TypeVar

__all__ = ["Table", "resolve"]

Row = TypeVar("Row")


def resolve(target: str | Callable | type) -> Any:
    """``"module:name"`` imported on first use (so a table's module loads no torch); anything else as it is."""
    if not isinstance(target, str):
        return target
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


class Table(Generic[Row]):
    """The rows of one kind of variant, by name (see the module docstring). ``kind`` names it in errors."""

    def __init__(self, kind: str, rows: Iterable[Row] = ()) -> None:
        self.kind = kind
        self._rows: dict[str, Row] = {}
        for row in rows:
            self.register(row)

    def lookup(self, name: str) -> Row:
        """The row ``name``; a ``ValueError`` naming the closest names and every registered one for any other."""
        try:
            return self._rows[name]
        except (KeyError, TypeError):
            close = difflib.get_close_matches(str(name), list(self._rows), n=3)
            hint = f" (did you mean {' or '.join(repr(c) for c in close)}?)" if close else ""
            raise ValueError(f"unknown {self.kind} {name!r}{hint}; registered: {sorted(self._rows)}") from None

    def register(self, row: Row) -> Row:
        """Adds ``row`` (from user code too); returns it. The same row twice is a no-op; another row under
        a taken name is refused."""
        name = row.name  # type: ignore[attr-defined]
        if name in self._rows and self._rows[name] != row:
            raise ValueError(f"{self.kind} {name!r} is registered already ({self._rows[name]})")
        self._rows[name] = row
        return row

    def unregister(self, name: str) -> Row:
        """Removes the row ``name`` and returns it (an unknown name raises as :meth:`lookup` does)."""
        row = self.lookup(name)
        del self._rows[name]
        return row

    @contextlib.contextmanager
    def scoped(self) -> Iterator[Table[Row]]:
        """A block whose registrations are gone after it (a test, a notebook trying a variant out)."""
        kept = dict(self._rows)
        try:
            yield self
        finally:
            self._rows = kept

    def names(self) -> list[str]:
        return list(self._rows)

    def __contains__(self, name: object) -> bool:
        return name in self._rows

    def __iter__(self) -> Iterator[Row]:
        return iter(list(self._rows.values()))

    def __len__(self) -> int:
        return len(self._rows)

    def __getitem__(self, name: str) -> Row:
        return self.lookup(name)

    def __repr__(self) -> str:
        return f"Table({self.kind!r}, {self.names()})"
