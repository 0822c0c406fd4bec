"""docs/layout.md is generated from the package docstrings (``scripts/layout_doc.py``), so it cannot drift."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("layout_doc", ROOT / "scripts" / "layout_doc.py")
layout_doc = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(layout_doc)


def test_docs_layout_is_what_the_script_writes_from_the_docstrings():
    page = (ROOT / "docs" / "layout.md").read_text(encoding="utf-8")
    assert page == layout_doc.render(), "docs/layout.md differs from the package docstrings: run scripts/layout_doc.py"


def test_a_module_is_described_by_its_packages_contents_line_else_by_its_first_sentence(tmp_path):
    files = {
        "pkg/__init__.py": '"""A package. Its contents:\n\n- ``a``: reads the input;\n- ``sub/``: the parts\n'
        + '  of it.\n"""',
        "pkg/a.py": '"""Not this line."""\n',
        "pkg/b.py": '"""B writes (in ``out/``. really) the output. Then more."""\n',
        "pkg/sub/__init__.py": '"""Not this either."""\n',
        "pkg/sub/c.py": "",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text, encoding="utf-8")
    body = layout_doc.render(tmp_path, ("pkg",)).split("## The code")[1].split("\n\n")[2]
    assert body.splitlines() == [
        "- `pkg/`: A package",
        "    - `a.py`: reads the input",
        "    - `b.py`: B writes (in ``out/``. really) the output",
        "    - `sub/`: the parts of it",
        "        - `c.py`: (no docstring)",
    ]


def test_every_contents_line_names_one_module():
    assert layout_doc.shared_entries() == []


def test_a_planted_contents_line_that_names_two_modules_is_found(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text('"""A.\n\n- ``a``, ``b``: two at once;\n- ``c``: one.\n"""\n')
    assert layout_doc.shared_entries(tmp_path, ("pkg",)) == ["pkg/__init__.py: ``a``, ``b``: two at once;"]
