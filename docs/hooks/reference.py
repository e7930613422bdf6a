"""The configuration and command-line references, generated from the code and committed.

``python docs/hooks/reference.py`` rewrites the generated blocks of ``docs/reference/config.md``
and ``docs/reference/cli.md`` (between ``<!-- generated: NAME -->`` and ``<!-- end generated:
NAME -->``), so that the pages read on the repository are complete. As an mkdocs hook, this file
fails the build when a committed block differs from what the code generates now, and
``tests/test_docs.py`` fails the same way: a reference page cannot go stale.

* ``config-reference``: one table per config section
  (key, type, default, description), read from the dataclasses in ``marl_ppo/config.py``.
  Descriptions come from each dataclass's ``Attributes:`` docstring section; a nested section
  (``env``, ``model``, ...) is described by its class's first docstring line; the few fields
  documented nowhere else take theirs from ``EXTRA_DESCRIPTIONS`` below. A field with no
  description anywhere stops the build (``MissingDescription``), so the reference cannot go stale.
* ``cli-reference``: the ``--help`` text of ``marl-ppo`` and of each
  of its subcommands, produced by running ``marl_ppo.cli.main([... "--help"])``.

``tests/test_docs.py`` imports this file to check the generated tables.
"""

from __future__ import annotations

import contextlib
import dataclasses
import html
import inspect
import io
import os
import re
from typing import Any, NamedTuple

CONFIG_MARKER = "<!-- generated: config-reference -->"
CLI_MARKER = "<!-- generated: cli-reference -->"

# Descriptions for fields that config.py documents outside an ``Attributes:`` section.
# Keyed by "ClassName.field". A key that names no field is an error too (see ``config_sections``).
EXTRA_DESCRIPTIONS: dict[str, str] = {
    "Config.reward_table": (
        "the reward table in its YAML/dict form (see [Reward table](../reward_table.md)); "
        "`null`: each group trains on its own reward."
    ),
}


class MissingDescription(ValueError):
    """A config dataclass field that the generated reference cannot describe."""


class FieldDoc(NamedTuple):
    key: str  # dotted config key, e.g. "train.lr"
    type: str
    default: str
    description: str
    section: str | None = None  # for a nested dataclass field: the section it opens


class SectionDoc(NamedTuple):
    name: str  # "" for the top level
    cls: type
    summary: str
    fields: tuple[FieldDoc, ...]


# -- docstrings ---------------------------------------------------------------------------


def attribute_docs(cls: type) -> dict[str, str]:
    """``{name: description}`` from a Google-style ``Attributes:`` section of ``cls``'s docstring."""
    doc = inspect.getdoc(cls) or ""
    out: dict[str, str] = {}
    in_section, indent, current = False, None, None
    for line in doc.splitlines():
        if not in_section:
            in_section = line.strip() == "Attributes:"
            continue
        if not line.strip():
            continue
        width = len(line) - len(line.lstrip())
        if width == 0:  # the section ended
            break
        if indent is None:
            indent = width
        match = re.match(r"(\w+)(?:\s*\(.*?\))?:\s*(.*)", line.strip())
        if width == indent and match:
            current = match.group(1)
            out[current] = match.group(2).strip()
        elif current is not None:  # continuation line
            out[current] = f"{out[current]} {line.strip()}".strip()
    return {name: plain_roles(text) for name, text in out.items()}


def plain_roles(text: str) -> str:
    """reST roles as Markdown code: ``:class:`~pkg.mod.Name``` -> ```Name```."""
    return re.sub(
        r":\w+:`(~?)([\w.]+)`",
        lambda m: f"`{m.group(2).split('.')[-1] if m.group(1) else m.group(2)}`",
        text,
    )


def summary_line(cls: type) -> str:
    """The first paragraph of ``cls``'s docstring, on one line."""
    doc = inspect.getdoc(cls) or ""
    return plain_roles(" ".join(doc.split("\n\n")[0].split()))


# -- values -------------------------------------------------------------------------------


def yaml_value(value: Any) -> str:
    """A default written as it would be in a YAML config file (flow style)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value if value and re.fullmatch(r"[\w.\-/]+", value) else f'"{value}"'
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(yaml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {yaml_value(v)}" for k, v in value.items()) + "}"
    return repr(value)


def _default(field: dataclasses.Field) -> Any:
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        return field.default_factory()  # type: ignore[misc]
    return dataclasses.MISSING


def _type_name(field: dataclasses.Field) -> str:
    t = field.type
    return t if isinstance(t, str) else getattr(t, "__name__", str(t))


# -- the config reference -----------------------------------------------------------------


def config_sections(root: type | None = None, extra: dict[str, str] | None = None) -> list[SectionDoc]:
    """Every section of the config dataclass ``root`` (default: ``marl_ppo.config.Config``) with
    its fields described, top level first; raises ``MissingDescription`` for a field with no
    description and for an ``extra`` entry that names no field."""
    if root is None:
        from marl_ppo.config import Config as root
    extra = EXTRA_DESCRIPTIONS if extra is None else extra
    sections: list[SectionDoc] = []
    missing: list[str] = []
    used_extra: set[str] = set()

    def describe(prefix: str, cls: type) -> None:
        docs = attribute_docs(cls)
        rows, nested = [], []
        for f in dataclasses.fields(cls):
            key = f"{prefix}.{f.name}" if prefix else f.name
            extra_key = f"{cls.__name__}.{f.name}"
            default = _default(f)
            if dataclasses.is_dataclass(default):
                description = docs.get(f.name) or summary_line(type(default))
                if not description.strip():
                    missing.append(f"{key} ({cls.__name__}.{f.name})")
                rows.append(FieldDoc(key, type(default).__name__, "", description, section=key))
                nested.append((key, type(default)))
                continue
            description = docs.get(f.name) or extra.get(extra_key, "")
            if extra_key in extra:
                used_extra.add(extra_key)
            if not description.strip():
                missing.append(f"{key} ({cls.__name__}.{f.name})")
            rows.append(FieldDoc(key, _type_name(f), yaml_value(default), description))
        sections.append(SectionDoc(prefix, cls, summary_line(cls), tuple(rows)))
        for key, sub in nested:
            describe(key, sub)

    describe("", root)
    stale = sorted(set(extra) - used_extra)
    if missing or stale:
        problems = []
        if missing:
            problems.append(
                "config field(s) without a description: "
                + ", ".join(missing)
                + ". Document them in the dataclass's `Attributes:` docstring section in "
                "marl_ppo/config.py (or in EXTRA_DESCRIPTIONS in docs/hooks/reference.py)."
            )
        if stale:
            problems.append(f"EXTRA_DESCRIPTIONS names field(s) that no longer exist: {stale}")
        raise MissingDescription(" ".join(problems))
    return sections


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def config_reference() -> str:
    """The Markdown of the generated configuration reference."""
    from marl_ppo.config import Config, to_yaml

    lines: list[str] = []
    for section in config_sections():
        if section.name:
            lines += [f"## `{section.name}`", "", f"`{section.cls.__name__}`: {section.summary}", ""]
        else:
            lines += ["## Top level", "", f"`{section.cls.__name__}`: {section.summary}", ""]
        lines += ["| key | type | default | description |", "|---|---|---|---|"]
        for f in section.fields:
            type_cell = f"<code>{html.escape(f.type)}</code>"
            if f.section is not None:
                default = f"see [`{f.section}`](#{f.section.replace('.', '')})"
            else:
                default = f"`{_cell(f.default)}`"
            lines.append(f"| `{f.key}` | {type_cell} | {default} | {_cell(f.description)} |")
        lines.append("")
    lines += [
        "## All defaults as YAML",
        "",
        "What `marl-ppo train` runs with no config file and no overrides "
        "(the resolved config a run writes to its `config.yaml` has this shape):",
        "",
        "```yaml",
        to_yaml(Config()).rstrip(),
        "```",
        "",
    ]
    return "\n".join(lines)


# -- the CLI reference --------------------------------------------------------------------


def cli_help(argv: list[str]) -> str:
    """The text ``marl-ppo <argv>`` prints (argv ends with ``--help``), at a fixed width."""
    from marl_ppo.cli import main

    out = io.StringIO()
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"
    try:
        with contextlib.redirect_stdout(out):
            try:
                main(argv)
            except SystemExit:
                pass
    finally:
        if old is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = old
    text = out.getvalue().rstrip()
    if not text:
        raise RuntimeError(f"marl-ppo {' '.join(argv)} printed nothing")
    return text


def cli_commands() -> list[str]:
    """The subcommands, read from the top-level usage line (``{train,eval,plot}``)."""
    usage = cli_help(["--help"])
    match = re.search(r"\{([\w,-]+)\}", usage)
    if not match:
        raise RuntimeError(f"cannot find the subcommands in:\n{usage}")
    return match.group(1).split(",")


def cli_reference() -> str:
    """The Markdown of the generated command-line reference."""
    lines = ["## `marl-ppo`", "", "```text", cli_help(["--help"]), "```", ""]
    for command in cli_commands():
        lines += [f"## `marl-ppo {command}`", "", "```text", cli_help([command, "--help"]), "```", ""]
    return "\n".join(lines)


# -- mkdocs events ------------------------------------------------------------------------


# -- committed blocks ---------------------------------------------------------------------

# page (relative to docs/) -> (block name, generator)
GENERATED = {
    "reference/config.md": ("config-reference", lambda: config_reference()),
    "reference/cli.md": ("cli-reference", lambda: cli_reference()),
}
REGENERATE = "python docs/hooks/reference.py"


def render(text: str, name: str, body: str) -> str:
    """``text`` with its ``name`` block (or the bare start marker) replaced by ``body``."""
    start, end = f"<!-- generated: {name} -->", f"<!-- end generated: {name} -->"
    if start not in text:
        raise ValueError(f"no {start} marker in the page")
    i = text.index(start)
    j = text.index(end, i) + len(end) if end in text[i:] else i + len(start)
    block = (
        f"{start}\n<!-- written by `{REGENERATE}` from the code: edit the code, then run it -->\n\n"
        f"{body.rstrip()}\n\n{end}"
    )
    return text[:i] + block + text[j:]


def stale_pages(docs_dir: str | os.PathLike) -> list[str]:
    """The generated pages whose committed block differs from what the code generates now."""
    from pathlib import Path

    stale = []
    for page, (name, generate) in GENERATED.items():
        text = (Path(docs_dir) / page).read_text()
        if render(text, name, generate()) != text:
            stale.append(page)
    return stale


def write_pages(docs_dir: str | os.PathLike) -> list[str]:
    """Rewrites the generated blocks; returns the pages that changed."""
    from pathlib import Path

    changed = []
    for page, (name, generate) in GENERATED.items():
        path = Path(docs_dir) / page
        text = path.read_text()
        new = render(text, name, generate())
        if new != text:
            path.write_text(new)
            changed.append(page)
    return changed


# -- mkdocs events ------------------------------------------------------------------------


def on_page_markdown(markdown: str, page, config, files) -> str:  # noqa: ARG001 (mkdocs signature)
    entry = GENERATED.get(page.file.src_uri)
    if entry is not None and render(markdown, entry[0], entry[1]()) != markdown:
        raise ValueError(f"docs/{page.file.src_uri} is out of date with the code: run `{REGENERATE}`")
    return markdown


if __name__ == "__main__":
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository's marl_ppo
    for page in write_pages(Path(__file__).resolve().parents[1]) or ["(nothing changed)"]:
        print(page)
