"""What the documentation pages say and show: a strict build fails on a link to a missing file, on
process wording and on a chart the script cannot redraw from its data; the home page links every
guide; every chart is drawn from a data file kept in the repository."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


checks = _load(DOCS / "hooks" / "checks.py", "marl_ppo_docs_checks")
make_charts = _load(DOCS / "charts" / "make_charts.py", "marl_ppo_docs_charts")


def _pages() -> list[Path]:
    return sorted(DOCS.rglob("*.md"))


def test_no_page_speaks_of_how_it_was_produced():
    found = {str(p.relative_to(ROOT)): checks.process_wording(p.read_text()) for p in [*_pages(), ROOT / "README.md"]}
    assert {page: lines for page, lines in found.items() if lines} == {}


def test_the_wording_check_knows_its_words():
    page = "Measured over two working sessions.\nNo GPU was lent to this work; see DESIGN.md.\n"
    page += "The value target, outside this\nwork."  # a phrase across two lines counts on its first
    problems = checks.process_wording(page)
    assert [p.split(":")[0] for p in problems] == ["line 1", "line 2", "line 2", "line 2", "line 3"]
    assert '"working sessions"' in problems[0] and "outside the repository" in problems[3]


def test_the_home_page_links_every_guide():
    home = (DOCS / "index.md").read_text()
    linked = set(re.findall(r"\]\(([\w/]+\.md)(?:#[\w-]+)?\)", home))
    guides = {str(p.relative_to(DOCS)) for p in _pages()} - {"index.md"}
    assert guides - linked == set(), "link these from docs/index.md's 'Where to go next'"


def test_every_chart_shown_is_drawn_from_a_data_file(tmp_path):
    shown = {name for page in _pages() for name in checks.CHART.findall(page.read_text())}
    assert {"data_flow", "seeds", "iteration_floor", "collection", "tictactoe", "tuned", "happo_halfcheetah"} <= shown
    assert shown <= set(make_charts.CHARTS), "a page shows a chart that make_charts.py does not draw"
    for name in shown:
        data = make_charts.CHARTS[name][0]
        assert data is None or (DOCS / "charts" / "data" / data).exists(), data
        assert (DOCS / "charts" / f"{name}.svg").exists(), f"run python docs/charts/make_charts.py {name}"
    written = make_charts.draw(tmp_path, sorted(shown))  # each redraws from its data as committed
    for path in written:  # the same words and numbers (titles, ticks, labels); the drawing may vary by version
        assert _texts(path) and _texts(path) == _texts(DOCS / "charts" / path.name), f"rerun make_charts.py {path.stem}"


def _texts(svg: Path) -> list[str]:
    """The SVG's text, kept as text (``svg.fonttype: none``), so it stays searchable and comparable."""
    return re.findall(r"<text[^>]*>([^<]*)</text>", svg.read_text())


def test_chart_problems_name_what_is_missing(tmp_path):
    page = "![a](charts/seeds.svg)\n![b](charts/nowhere.svg)"
    charts = tmp_path / "charts"
    assert checks.chart_problems(page, charts) == [
        f"shows seeds, nowhere but {charts / 'make_charts.py'} does not exist"
    ]
    shutil.copytree(DOCS / "charts", charts)
    (charts / "data" / "seeds.csv").unlink()
    assert checks.chart_problems(page, charts) == [
        "chart seeds.svg: its data file charts/data/seeds.csv does not exist",
        "chart nowhere.svg: no entry in make_charts.py's CHARTS draws it",
    ]


def _strict_build(tmp_path: Path, index: str) -> subprocess.CompletedProcess:
    """A one-page site built strictly with the project's checks hook and link validation."""
    docs = tmp_path / "docs"
    shutil.copytree(DOCS / "charts", docs / "charts")
    (docs / "index.md").write_text(index)
    (tmp_path / "mkdocs.yml").write_text(
        "site_name: t\nstrict: true\nexclude_docs: |\n  charts/*.py\n"
        "validation:\n  omitted_files: warn\n  unrecognized_links: warn\n  anchors: warn\n"
        f"hooks:\n  - {DOCS / 'hooks' / 'checks.py'}\n"
    )
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )


@pytest.mark.parametrize(
    "index, says",
    [
        ("# Home\n\nSee [the guide](guide.md).\n", "guide.md"),
        ("# Home\n\nMeasured in this round.\n", '"this round"'),
        ("# Home\n\n![chart](charts/nowhere.svg)\n", "nowhere.svg"),
    ],
    ids=["missing-file", "process-wording", "chart-without-script-entry"],
)
def test_a_strict_build_fails_on_each_problem(tmp_path, index, says):
    assert _strict_build(tmp_path / "good", "# Home\n\n![chart](charts/seeds.svg)\n").returncode == 0
    proc = _strict_build(tmp_path / "bad", index)
    assert proc.returncode != 0 and says in proc.stderr, proc.stderr


def test_shell_commands_keep_hyphenated_words_whole():
    shell = _load(DOCS / "hooks" / "shell_lines.py", "marl_ppo_docs_shell_lines")
    html = (
        '<p>a-b</p><div class="language-bash highlight"><pre><span></span><code>marl-ppo<span class="w"> </span>'
        'train<span class="w"> </span>--compile<span class="w"> </span>train.seeds<span class="o">=</span>[0,1]'
        "</code></pre></div>"
    )
    assert shell.on_page_content(html) == (
        '<p>a-b</p><div class="language-bash highlight"><pre><span></span><code><span class="nowrap">marl-ppo</span>'
        '<span class="w"> </span>train<span class="w"> </span><span class="nowrap">--compile</span>'
        '<span class="w"> </span>'
        'train.seeds<span class="o">=</span>[0,1]</code></pre></div>'
    )
