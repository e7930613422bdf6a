"""Tests for :mod:`marl_ppo.core.group_loss`: the lines ``docs/concepts.md`` quotes as the PPO objective
are those of the files it names (torchrl's loss and our overrides), so the page cannot drift from the code."""

from __future__ import annotations

import re
from pathlib import Path

import torchrl

ROOT = Path(__file__).resolve().parents[2]
HEADER = re.compile(r"^# ((?:marl_ppo|torchrl)/[\w/]+\.py), ")


def _section(page: str, title: str) -> str:
    text = (ROOT / "docs" / page).read_text()
    start = text.index(f"\n### {title}\n")
    end = re.compile(r"^##", re.MULTILINE).search(text, start + 2).start()
    return text[start:end]


def _quotes(section: str) -> list[tuple[Path, list[str]]]:
    """``(file, lines)`` for each run of quoted lines between ``...`` marks, blank lines left out."""
    out = []
    for fence in re.findall(r"^```text\n(.*?)^```$", section, re.MULTILINE | re.DOTALL):
        path = None
        for line in fence.splitlines():
            header = HEADER.match(line)
            if header:
                name = header.group(1)
                path = (ROOT if name.startswith("marl_ppo") else Path(torchrl.__file__).parents[1]) / name
                out.append((path, []))
            elif line.strip() == "...":
                out.append((path, []))
            elif line.strip():
                assert path is not None, f"a quoted line before any file is named: {line!r}"
                out[-1][1].append(line.strip())
    return [(path, lines) for path, lines in out if lines]


def test_the_objective_quoted_in_the_concepts_page_is_the_code():
    quotes = _quotes(_section("concepts.md", "The PPO objective"))
    assert {p.name for p, _ in quotes} == {"group_loss.py", "ppo.py", "losses.py"}
    for path, lines in quotes:
        code = [line.strip() for line in path.read_text().splitlines() if line.strip()]
        starts = [i for i, line in enumerate(code) if line == lines[0]]
        assert any(code[i : i + len(lines)] == lines for i in starts), f"{path}: not as quoted:\n" + "\n".join(lines)
