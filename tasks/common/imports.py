"""The project modules a module imports, read from its import statements (``ast``), transitively.

Used by pretrain to fingerprint the code behind a checkpoint, and by the layout tests to check that every
stage's ``dvc.yaml`` deps are exactly its import closure.
"""

from __future__ import annotations

import ast
import hashlib
from functools import lru_cache
from pathlib import Path

#: The repository root (the folder holding ``tasks/``).
ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("tasks", "flows", "clozeline")


def module_file(name: str, root: Path = ROOT) -> Path | None:
    """The file of project module ``name`` (``a.b`` -> ``a/b.py`` or ``a/b/__init__.py``), or ``None``."""
    base = root.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


@lru_cache(maxsize=None)
def imported_modules(path: Path, root: Path = ROOT) -> frozenset[str]:
    """Project modules that ``path`` imports (absolute and relative), with their parent packages."""
    package = path.relative_to(root).with_suffix("").parts[:-1]  # a/b.py and a/b/__init__.py: a and a.b
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # `from . import x` is level 1: the package itself
                anchor = list(package[: len(package) - node.level + 1])
                base = ".".join([*anchor, base] if base else anchor)
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)  # `from pkg import module`
    out = set()
    for name in names:
        parts = name.split(".")
        if parts[0] in PACKAGES:
            out.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
    return frozenset(out)


def import_closure(start: list[str], root: Path = ROOT) -> set[Path]:
    """Files of every project module reachable by imports from the modules ``start``."""
    seen: set[str] = set()
    files: set[Path] = set()
    todo = list(start)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        path = module_file(name, root)
        if path is not None:
            files.add(path)
            todo.extend(imported_modules(path, root) - seen)
    return files


def code_sha256(files: set[Path], root: Path = ROOT) -> str:
    """sha256 over the relative paths and bytes of ``files`` (sorted): one edit anywhere changes it."""
    digest = hashlib.sha256()
    for path in sorted(files):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()
