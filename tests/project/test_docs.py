"""The documentation: a README a newcomer reads in one sitting, and a docs/ site that builds offline with every
link resolving (``mkdocs build --strict``, the default theme, its highlight.js from a CDN turned off)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
README_MAX_LINES = 300
# [text](target) outside code; images too. Targets with a scheme (http:, mailto:) are not files.
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
CODE_SPAN = re.compile(r"`[^`\n]*`")


def markdown_links(text: str) -> list[str]:
    """Relative link targets of a Markdown text, code blocks and code spans left out."""
    prose = CODE_SPAN.sub("", FENCE.sub("", text))
    return [t for t in LINK.findall(prose) if not re.match(r"^[a-z][a-z0-9+.-]*:", t)]


def github_slug(heading: str) -> str:
    """The anchor GitHub (and mkdocs' toc extension, for these headings) gives a Markdown heading."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    return {github_slug(m) for m in re.findall(r"^#{1,6}\s+(.+)$", text, re.M)}


def broken_links(page: Path) -> list[str]:
    """``page``'s relative links whose file (or heading anchor) does not exist, as ``'<target>: <why>'``."""
    broken = []
    for target in markdown_links(page.read_text(encoding="utf-8")):
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading #{anchor} in {dest.relative_to(REPO)}")
    return broken


def test_markdown_links_skip_code_and_urls():
    text = "see [a](docs/a.md) and `[b](b.md)` and [c](https://x.example/c)\n```\n[d](d.md)\n```\n![e](img/e.png#x)"
    assert markdown_links(text) == ["docs/a.md", "img/e.png#x"]
    assert github_slug("Tracking: MLflow") == "tracking-mlflow"
    assert github_slug("Continued pretraining (domain-adaptive MLM)") == "continued-pretraining-domain-adaptive-mlm"


def test_broken_links_names_a_missing_file_and_a_missing_heading(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    (tmp_path / "b.md").write_text("# Real heading\n")
    page = tmp_path / "a.md"
    page.write_text("[ok](b.md#real-heading) [gone](c.md) [typo](b.md#real-headin)\n")
    assert broken_links(page) == ["c.md: no such file", "b.md#real-headin: no heading #real-headin in b.md"]


def test_readme_is_short():
    lines = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; move detail to a docs/ page"


@pytest.mark.parametrize("page", ["README.md", "CHANGELOG.md", *sorted(p.name for p in DOCS.glob("*.md"))])
def test_every_relative_link_resolves(page):
    path = REPO / page if (REPO / page).exists() else DOCS / page
    assert broken_links(path) == []


def test_readme_links_every_docs_page():
    linked = {
        Path(t.partition("#")[0]).name
        for t in markdown_links((REPO / "README.md").read_text())
        if t.startswith("docs/")
    }
    pages = {p.name for p in DOCS.glob("*.md")} - {"index.md"}
    assert pages - linked == set(), "a docs page the README's table does not list"


def test_mkdocs_builds_strict_and_offline(tmp_path):
    env = {**os.environ, "NO_COLOR": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    pages = sorted((tmp_path / "site").glob("*.html"))
    assert {p.stem for p in pages} >= {p.stem for p in DOCS.glob("*.md")}
    remote = re.compile(r"<(?:script|link)\b[^>]*(?:src|href)=\"(?:https?:)?//", re.I)
    for page in pages:
        found = remote.findall(page.read_text(encoding="utf-8"))
        assert not found, f"{page.name} loads {found} from the network"
