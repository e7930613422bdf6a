"""Build checks: a page fails the strict build when it speaks of how it was produced instead of the
software, or shows a chart that ``docs/charts/make_charts.py`` cannot redraw from a data file.

mkdocs counts every warning of a logger under ``mkdocs`` and ``--strict`` fails on them, so each
problem is one warning naming the page and what to change. Links to files that do not exist fail
the strict build already (mkdocs' own ``validation`` settings in mkdocs.yml).
"""

from __future__ import annotations

import importlib.util
import logging
import re
from pathlib import Path

log = logging.getLogger("mkdocs.hooks.checks")

# Wording about the work that produced a page rather than the software it describes. Each entry:
# a pattern (case-insensitive, on the page's Markdown) and what to say instead.
PROCESS_WORDING: dict[str, str] = {
    r"\bthe issue'?s?\b|\bissues? #?\d+\b": "an issue tracker's item: say what the software does",
    r"\bthis work\b|\bthis branch\b|\bthis round\b": "the work that produced the page: name the version or commit",
    r"\blent\b": "how a machine was obtained: say which machine the figure ran on",
    r"\b(working|second|first) sessions?\b": "the sessions that produced the page: give the date",
    r"\bDESIGN\.md\b|\bSTYLE\.md\b|\.\./shared\b": "a document outside the repository",
    r"\ban earlier (note|version of this page)\b": "the page's own history: state what holds now",
    r"\bthe targets? set for\b|\bthe brief\b|\bclosing note\b": "the project's planning: state the figure",
}
CHART = re.compile(r"\]\((?:\.\./)*charts/([\w-]+)\.svg\)")


def process_wording(markdown: str) -> list[str]:
    """Each line that uses process wording: ``line N: "<match>" (<why>)``."""
    problems = []
    lines = markdown.splitlines()
    for number, line in enumerate(lines, 1):
        with_next = " ".join([line, *lines[number : number + 1]])  # a phrase may run onto the next line
        for pattern, why in PROCESS_WORDING.items():
            match = re.search(pattern, with_next, re.IGNORECASE)
            if match and match.start() < len(line):
                problems.append(f'line {number}: "{match.group(0)}" ({why})')
    return problems


def _charts(charts_dir: Path) -> dict | None:
    script = charts_dir / "make_charts.py"
    if not script.exists():
        return None
    spec = importlib.util.spec_from_file_location("marl_ppo_docs_charts", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.CHARTS


def chart_problems(markdown: str, charts_dir: Path) -> list[str]:
    """What is missing for each chart the page shows: the script, its entry there, its data file."""
    names = CHART.findall(markdown)
    if not names:
        return []
    charts = _charts(charts_dir)
    if charts is None:
        return [f"shows {', '.join(names)} but {charts_dir / 'make_charts.py'} does not exist"]
    problems = []
    for name in names:
        if name not in charts:
            problems.append(f"chart {name}.svg: no entry in make_charts.py's CHARTS draws it")
        elif charts[name][0] is not None and not (charts_dir / "data" / charts[name][0]).exists():
            problems.append(f"chart {name}.svg: its data file charts/data/{charts[name][0]} does not exist")
    return problems


def on_page_markdown(markdown: str, page, config, files, **kwargs) -> str:
    charts_dir = Path(config["docs_dir"]) / "charts"
    for problem in process_wording(markdown) + chart_problems(markdown, charts_dir):
        log.warning(f"{page.file.src_path}: {problem}")
    return markdown
