"""Griffe extension: the reST bits of marl_ppo's docstrings, as Markdown, for mkdocstrings.

The docstrings are written for ``help()`` and doctest: reST roles (``:class:`~pkg.Name```),
``>>>`` examples that doctest runs, and ``::`` literal blocks. Before mkdocstrings renders
them, this extension rewrites, on a copy of the text only (the source files are not touched):

* ``:class:`~marl_ppo.groups.GroupSpec``` and the other roles into an optional cross-reference
  (a link when the target is rendered somewhere in the site, plain code otherwise; never a
  warning), with relative names (``:meth:`bind```) resolved against the enclosing class/module;
* each run of ``>>>`` / ``...`` lines and their output into a fenced ``pycon`` block;
* a paragraph ending in ``::`` into one ending in ``:``, and the block after it into a fence;
* a grouped ``Args:`` entry (``gamma, lmbda: ...``, ``actors / critics: ...``) into one entry per
  parameter, each with the shared description, so griffe can match them to the signature.
"""

from __future__ import annotations

import html
import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:class|func|meth|attr|mod|data|exc|obj):`(~?)([\w.]+)`")


def _resolve(obj: griffe.Object, name: str) -> str:
    """The full path of ``name`` as written in ``obj``'s docstring (best effort)."""
    if name.startswith("marl_ppo."):
        return name
    first = name.split(".")[0]
    scope: Any = obj if (obj.is_class or obj.is_module) else obj.parent
    while scope is not None:
        if first in scope.members:
            return f"{scope.path}.{name}"
        scope = scope.parent
    return name


def _roles(obj: griffe.Object, text: str) -> str:
    def replace(match: re.Match) -> str:
        tilde, name = match.groups()
        path = _resolve(obj, name)
        title = name.split(".")[-1] if tilde else name
        return f'<autoref identifier="{html.escape(path)}" optional><code>{html.escape(title)}</code></autoref>'

    return _ROLE.sub(replace, text)


def _doctest_blocks(text: str) -> str:
    """Wraps every ``>>>`` example (prompt lines and their output, up to a blank line) in a fence."""
    out: list[str] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.lstrip().startswith(">>>"):
            indent = line[: len(line) - len(line.lstrip())]
            if out and out[-1].strip():
                out.append("")
            out.append(f"{indent}```pycon")
            while i < len(lines) and lines[i].strip():
                out.append(lines[i])
                i += 1
            out.append(f"{indent}```")
            continue
        out.append(line)
        i += 1
    return "\n".join(out)


def _literal_blocks(text: str) -> str:
    """``form::`` + blank line + a paragraph -> ``form:`` + that paragraph in a fence.

    Griffe dedents docstrings like ``inspect.cleandoc``, so a literal block at the end of a
    docstring may have lost its indentation: the block is the paragraph after the ``::``.
    """
    lines = text.splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if not (line.rstrip().endswith("::") and i + 1 < len(lines) and not lines[i + 1].strip()):
            out.append(line)
            i += 1
            continue
        head = line.rstrip()[:-2]
        if head.strip():
            out.append(head + ":")
        i += 1
        while i < len(lines) and not lines[i].strip():
            i += 1
        block = []
        while i < len(lines) and lines[i].strip():
            block.append(lines[i])
            i += 1
        # the fence sits at the paragraph's indentation, the block is dedented to it
        pad = len(line) - len(line.lstrip())
        extra = min((len(b) - len(b.lstrip()) for b in block), default=pad) - pad
        block = [b[max(extra, 0) :] for b in block]
        out += ["", " " * pad + "```text", *block, " " * pad + "```", ""]
    return "\n".join(out)


_GROUPED = re.compile(r"^(\s+)(\w+(?:\s*[,/]\s*\w+)+):(.*)$")


def _grouped_params(text: str) -> str:
    """Splits ``a, b: description`` (or ``a / b:``) in an ``Args:`` section into one entry per name."""
    out: list[str] = []
    lines = text.splitlines()
    in_args, i = False, 0
    while i < len(lines):
        line = lines[i]
        if not line.startswith(" "):
            in_args = line.strip() in ("Args:", "Arguments:", "Parameters:")
        match = _GROUPED.match(line) if in_args else None
        if match is None:
            out.append(line)
            i += 1
            continue
        indent, names, first = match.groups()
        body = [first]
        i += 1
        while i < len(lines) and (not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip()) > len(indent)):
            if not lines[i].strip():
                break
            body.append(lines[i])
            i += 1
        for name in re.split(r"\s*[,/]\s*", names):
            out.append(f"{indent}{name}:{body[0]}")
            out.extend(body[1:])
    return "\n".join(out)


def to_markdown(obj: griffe.Object, text: str) -> str:
    inside_fence = "```" in text
    if not inside_fence:
        text = _doctest_blocks(_literal_blocks(_grouped_params(text)))
    return _roles(obj, text)


class ReSTRolesToMarkdown(griffe.Extension):
    """Rewrites each loaded object's docstring text for Markdown rendering."""

    def on_object(self, *, obj: griffe.Object, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        if obj.is_alias or obj.docstring is None:
            return
        obj.docstring.value = to_markdown(obj, obj.docstring.value)
