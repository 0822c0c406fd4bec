"""Rewrite each dvc.yaml stage's code deps to exactly the project modules it imports (after a move or rename).

DVC reruns a stage only when a listed dep changed; ``tests/project/test_layout.py`` fails when a stage's code
deps and its imports differ. This script makes them equal: it keeps a listed folder whose every ``.py`` file
the stage imports, drops listed code it no longer imports, and adds each imported file no listed dep covers,
after the stage's last code dep. Data deps (``${paths...}``), comments and order are kept (ruamel round trip).

Usage: ``python scripts/sync_deps.py [--check]``; ``--check`` exits 1 when a change would be made.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from ruamel.yaml import YAML

from tasks.common.imports import import_closure

ROOT = Path(__file__).resolve().parents[1]
CODE = ("tasks/", "flows/", "clozeline")


def imported(module: str) -> set[str]:
    """Repo-relative files of every project module ``python -m tasks <module>`` imports."""
    return {p.relative_to(ROOT).as_posix() for p in import_closure(["tasks.__main__", f"tasks.{module}"], ROOT)}


def is_code(dep: str) -> bool:
    return dep.startswith(CODE) and (dep.endswith(".py") or (ROOT / dep).is_dir())


def inside(dep: str) -> set[str]:
    path = ROOT / dep
    return {p.relative_to(ROOT).as_posix() for p in path.rglob("*.py")} if path.is_dir() else {dep}


def sync(deps, files: set[str]) -> bool:
    """Make the code entries of ``deps`` (a ruamel sequence, edited in place so comments stay on their items)
    equal to ``files``: whole folders kept, the rest as files. Returns whether anything changed."""
    before = list(deps)
    for i in reversed(range(len(deps))):
        if isinstance(deps[i], str) and is_code(deps[i]) and not inside(deps[i]) <= files:
            del deps[i]
    covered = set().union(*(inside(d) for d in deps if isinstance(d, str) and is_code(d)))
    at = 1 + max((i for i, d in enumerate(deps) if isinstance(d, str) and is_code(d)), default=-1)
    for offset, file in enumerate(sorted(files - covered)):
        deps.insert(at + offset, file)
    return list(deps) != before


def main(argv: list[str]) -> int:
    yaml = YAML()
    yaml.preserve_quotes = True
    yaml.width = 4096
    yaml.indent(mapping=2, sequence=4, offset=2)
    path = ROOT / "dvc.yaml"
    doc = yaml.load(path)
    changed = []
    for name, body in doc["stages"].items():
        stage = body.get("do", body)
        module = re.search(r"-m tasks (\w+)", stage["cmd"]).group(1)
        if sync(stage["deps"], imported(module)):
            changed.append(name)
    if changed and "--check" not in argv:
        yaml.dump(doc, path)
    print(f"dvc.yaml code deps {'to change' if '--check' in argv else 'changed'}: {', '.join(changed) or 'none'}")
    return 1 if changed and "--check" in argv else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
