"""The documentation site: it builds with warnings as errors, the Python examples on its pages
run as written, and the generated configuration reference describes every config field."""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import marl_ppo
from marl_ppo.config import Config

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
# Pages whose ```python blocks are executed, in order, in one namespace per page.
EXECUTED_PAGES = ["quickstart.md", "concepts.md"]
# Fences that are shown but not run.
SHOWN_ONLY = {"bash", "text", "yaml"}


def _hook():
    spec = importlib.util.spec_from_file_location("marl_ppo_docs_reference", DOCS / "hooks" / "reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{proc.stdout}\n{proc.stderr}"
    return out


@pytest.mark.slow
def test_site_builds_with_warnings_as_errors(site):
    for page in [
        "index",
        "quickstart/index",
        "concepts/index",
        "reward_table/index",
        "custom_envs/index",
        "metrics/index",
        "runs/index",
        "reference/config/index",
        "reference/cli/index",
        "reference/api/index",
        "vs_benchmarl/index",
        "scaling_out/index",
    ]:
        assert (site / f"{page}.html").exists(), page
    api = (site / "reference" / "api" / "index.html").read_text()
    for name in marl_ppo.__all__:  # every public name has its own entry on the API page
        path = f"{getattr(marl_ppo, name).__module__}.{name}"
        assert f'id="{path}"' in api, f"{path} is missing from docs/reference/api.md"
    assert ":class:`" not in api and ":func:`" not in api, "a reST role reached the API page"
    cli = (site / "reference" / "cli" / "index.html").read_text()
    for command in ("train", "eval", "plot", "list"):
        assert f"usage: marl-ppo {command}" in cli


def _fences(page: str) -> list[tuple[str, int, str]]:
    text = (DOCS / page).read_text()
    return [(m.group(1).strip(), text.count("\n", 0, m.start()) + 1, m.group(2)) for m in FENCE.finditer(text)]


@pytest.mark.slow
@pytest.mark.parametrize("page", EXECUTED_PAGES)
def test_python_blocks_run(page, tmp_path, monkeypatch):
    fences = _fences(page)
    unknown = [(lang, line) for lang, line, _ in fences if lang != "python" and lang not in SHOWN_ONLY]
    assert not unknown, f"{page}: code fences that are neither run (python) nor shown-only {SHOWN_ONLY}: {unknown}"
    blocks = [(line, body) for lang, line, body in fences if lang == "python"]
    assert blocks, f"{page} has no python block"
    # Run where a relative runs/ lands in a temp dir, with the repo's configs/ at hand; one torch
    # thread, since a shared machine's busy cores make torch's default threads far slower.
    (tmp_path / "configs").symlink_to(ROOT / "configs")
    monkeypatch.chdir(tmp_path)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    namespace: dict = {"__name__": f"docs_{Path(page).stem}"}
    try:
        for line, body in blocks:
            # padding keeps traceback line numbers equal to the page's line numbers
            code = compile("\n" * line + body, str(DOCS / page), "exec")
            exec(code, namespace)
    finally:
        torch.set_num_threads(threads)


def _all_fields(cls: type, prefix: str = "") -> dict[str, dataclasses.Field]:
    out = {}
    for f in dataclasses.fields(cls):
        key = f"{prefix}.{f.name}" if prefix else f.name
        out[key] = f
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        if dataclasses.is_dataclass(default):
            out.update(_all_fields(type(default), key))
    return out


def test_config_reference_describes_every_field(site):
    hook = _hook()
    documented = {f.key: f for section in hook.config_sections() for f in section.fields}
    expected = _all_fields(Config)
    assert set(documented) == set(expected)
    assert not [k for k, f in documented.items() if not f.description.strip()]
    page = (site / "reference" / "config" / "index.html").read_text()
    missing = [key for key in expected if f"<code>{key}</code>" not in page]
    assert not missing, f"keys missing from the built configuration reference: {missing}"


def test_config_reference_refuses_an_undocumented_field():
    hook = _hook()

    @dataclasses.dataclass
    class Section:
        """A section.

        Attributes:
            documented: has a description.
        """

        documented: int = 1
        undocumented: int = 2

    @dataclasses.dataclass
    class Root:
        """A root."""

        section: Section = dataclasses.field(default_factory=Section)

    with pytest.raises(hook.MissingDescription, match=r"section\.undocumented"):
        hook.config_sections(Root, extra={})
    assert hook.config_sections(Root, extra={"Section.undocumented": "now described"})
    with pytest.raises(hook.MissingDescription, match="no longer exist"):
        hook.config_sections(Root, extra={"Section.undocumented": "x", "Section.gone": "y"})


def test_committed_reference_pages_match_the_code(tmp_path):
    """docs/reference/config.md and cli.md hold the generated blocks, so the repository shows them;
    they must be what the code generates now (``python docs/hooks/reference.py`` rewrites them)."""
    hook = _hook()
    assert hook.stale_pages(DOCS) == [], "run `python docs/hooks/reference.py` and commit the pages"
    copy = tmp_path / "reference"
    shutil.copytree(DOCS / "reference", copy)
    page = copy / "config.md"
    page.write_text(page.read_text().replace("| `train.lr` |", "| `train.learning_rate` |"))
    assert hook.stale_pages(tmp_path) == ["reference/config.md"]
    hook.write_pages(tmp_path)
    assert hook.stale_pages(tmp_path) == [] and page.read_text() == (DOCS / "reference" / "config.md").read_text()
