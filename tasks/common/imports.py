"""The project modules a module imports, read from its import statements (``ast``), transitively.

Used by pretrain to fingerprint the code behind a checkpoint, by every cache to key its stored results by the
code that computed them (``closure_fingerprint``: ingest, the dedup index, the leakage caches, the tokenize
caches), and by the layout tests to check that every stage's ``dvc.yaml`` deps are exactly its import closure.
"""

from __future__ import annotations

import ast
import hashlib
from collections.abc import Iterable
from functools import cache
from pathlib import Path

#: The repository root (the folder holding ``tasks/``).
ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("tasks", "flows", "clozeline")
#: Left out of a cache's code key: the params' models. Every cache keys its params by value (a changed default
#: or validator changes the value it is keyed by), as the pretrain checkpoint fingerprint does.
PARAMS_MODELS = ("tasks/config",)


def module_file(name: str, root: Path = ROOT) -> Path | None:
    """The file of project module ``name`` (``a.b`` -> ``a/b.py`` or ``a/b/__init__.py``), or ``None``."""
    base = root.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


@cache
def imported_modules(path: Path, root: Path = ROOT) -> frozenset[str]:
    """Project modules that ``path`` imports (absolute and relative), with their parent packages."""
    package = path.relative_to(root).with_suffix("").parts[:-1]  # a/b.py and a/b/__init__.py: a and a.b
    names: set[str] = set()
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
    out: set[str] = set()
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


def closure_files(modules: Iterable[str], root: Path = ROOT, exclude: Iterable[str] = PARAMS_MODELS) -> set[Path]:
    """Files of every project module that importing ``modules`` runs: each module, its parent packages (importing
    ``a.b.c`` runs ``a/__init__.py`` and ``a/b/__init__.py`` first) and, transitively, what they import
    (``import_closure``: every import statement, those inside functions too); less the files under ``exclude``
    (folders relative to ``root``)."""
    start = {".".join(parts[:i]) for parts in (m.split(".") for m in modules) for i in range(1, len(parts) + 1)}
    skipped = [root / folder for folder in exclude]
    return {f for f in import_closure(sorted(start), root) if not any(s in f.parents for s in skipped)}


def closure_fingerprint(modules: Iterable[str], root: Path = ROOT) -> str:
    """The code key of a cache: ``code_sha256`` of ``closure_files(modules)``, where ``modules`` hold the functions
    whose results the cache stores (a cache module names itself, ``__name__``, when it calls them: they are then
    in its closure). Computed from the import statements, never listed by hand: an edit to any file those
    functions can run changes the key; tasks/config is left out, params being keyed by value. Read afresh on
    every call (a few dozen files, about a millisecond), so a key always describes the code on disk."""
    return code_sha256(closure_files(modules, root), root)
