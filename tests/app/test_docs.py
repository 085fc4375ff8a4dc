"""The documentation builds: `mkdocs build --strict` over docs/ (mkdocs.yml) fails on a broken link or anchor, a
link to a file outside docs/, or a page missing from the nav, and the README's links lead to files that exist.

README claims covered here:
- "docs/ is a site (pip install -e '.[dev]' && mkdocs serve)": test_the_docs_build_strict, with mkdocs-material
  from the dev extra (pyproject.toml)
- "Where the docs are": every page of the site's nav is in the README's list and every README link resolves:
  test_the_readme_lists_every_page_and_its_links_resolve
Without mkdocs the build tests skip, except in CI (CI=true), where they fail: CI installs the dev extra.
"""

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


def nav_pages(nav: list) -> list[str]:
    """Every page file the mkdocs nav names, in order."""
    pages = []
    for entry in nav:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        pages += nav_pages(value) if isinstance(value, list) else [value]
    return pages


def require_mkdocs() -> None:
    """Skip when mkdocs-material is not installed, unless in CI, where its absence is a failure."""
    if importlib.util.find_spec("mkdocs") and importlib.util.find_spec("material"):
        return
    message = "mkdocs-material is not installed (pip install -e '.[dev]')"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


def mkdocs_build(config: Path, site: Path) -> subprocess.CompletedProcess:
    """`mkdocs build --strict` of `config` into `site` (outside the checkout)."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    command = [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(config)]
    command += ["--site-dir", str(site)]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)


def copy_docs(tmp_path: Path) -> Path:
    """mkdocs.yml and docs/ copied under tmp_path; returns the copied mkdocs.yml."""
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    return tmp_path / "mkdocs.yml"


@pytest.mark.slow  # starts mkdocs
def test_the_docs_build_strict(tmp_path):
    require_mkdocs()
    built = mkdocs_build(ROOT / "mkdocs.yml", tmp_path / "site")
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    assert (tmp_path / "site" / "encodings" / "index.html").is_file()


BREAKAGES = {
    "a broken link": ("encodings.md", "\nSee [the tasks](taks.md).\n"),
    "a broken anchor": ("encodings.md", "\nSee [adding a task](tasks.md#adding-a-tusk).\n"),
    "a link to a source file outside docs/": (
        "encodings.md",
        "\nSee [base](../lightning_modules/encodings/base.py).\n",
    ),
    "a page missing from the nav": ("orphan.md", "# An orphan page\n"),
}


@pytest.mark.slow  # starts mkdocs
@pytest.mark.parametrize("breakage", BREAKAGES)
def test_a_broken_docs_tree_fails_the_strict_build(breakage, tmp_path):
    require_mkdocs()
    config = copy_docs(tmp_path)
    page, text = BREAKAGES[breakage]
    path = tmp_path / "docs" / page
    path.write_text((path.read_text() if path.exists() else "") + text)
    built = mkdocs_build(config, tmp_path / "site")
    assert built.returncode != 0, f"{breakage} built without an error"


def test_the_readme_lists_every_page_and_its_links_resolve():
    readme = (ROOT / "README.md").read_text()
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    docs_list = readme.split("## Where the docs are", 1)[1].split("\n## ", 1)[0]
    listed = re.findall(r"^- \[(docs/[^\]]+)\]", docs_list, flags=re.M)
    pages = [f"docs/{page}" for page in nav_pages(config["nav"])]
    assert sorted(listed) == sorted(pages), "the README's list of docs pages is not the site's nav"
    assert sorted(pages) == sorted(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md"))
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", readme):
        if not target.startswith(("http://", "https://")):
            assert (ROOT / target).exists(), f"README.md links to {target}, which does not exist"
