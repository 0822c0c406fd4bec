"""What the layout tests measure: the project modules a stage imports (from the code's own import
statements, transitively) and the params keys its config model lets it read."""

from __future__ import annotations

import ast
from functools import lru_cache
from pathlib import Path

from pydantic import BaseModel

from tasks.config import Params

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("tasks", "flows")


def module_file(name: str) -> Path | None:
    """The file of project module ``name`` (``a.b`` -> ``a/b.py`` or ``a/b/__init__.py``), or ``None``."""
    base = ROOT.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


@lru_cache(maxsize=None)
def imported_modules(path: Path) -> frozenset[str]:
    """Project modules that ``path`` imports (absolute and relative), with their parent packages."""
    package = path.relative_to(ROOT).with_suffix("").parts[:-1]  # a/b.py and a/b/__init__.py: a and a.b
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


def closure(start: list[str]) -> set[Path]:
    """Files of every project module reachable by imports from ``start``."""
    seen: set[str] = set()
    files: set[Path] = set()
    todo = list(start)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        path = module_file(name)
        if path is not None:
            files.add(path)
            todo.extend(imported_modules(path) - seen)
    return files


def keys_read(section: str, other_items: set[str]) -> set[str]:
    """Dotted params keys a stage reads: every field of its section's model (the model is what the stage is
    handed) except the sub-sections of other ``foreach`` items, plus ``paths`` (every stage gets it)."""
    model: type[BaseModel] = Params.model_fields[section].annotation
    return {f"{section}.{name}" for name in model.model_fields if name not in other_items} | {"paths"}
