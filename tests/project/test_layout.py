"""The layout cannot drift: dvc.yaml deps and params are derived from the code and the config models.

DVC reruns a stage only when a listed dep or param changed, so a module a stage imports but does not list,
or a params key it reads but does not list, makes ``dvc repro`` keep stale outputs; a listed module or key
it does not use makes needless reruns. These tests compute both sets independently (imports from the AST,
keys from the pydantic models) and compare in both directions. Data deps (``${paths.data}/...``) are the
graph's edges, checked by DVC itself; here only that each one resolves.
"""

from __future__ import annotations

import re
from functools import cache

import pytest

from layout import ROOT, closure, keys_read
from tasks.common.provenance import declared_deps, declared_params, foreach_items, read_dvc_yaml, read_params

DVC = read_dvc_yaml(ROOT)
STAGES = [
    (f"{name}@{item}" if item else name, re.search(r"-m tasks (\w+)", body.get("do", body)["cmd"]).group(1), item)
    for name, body in DVC.items()
    for item in (foreach_items(body, read_params(ROOT)) if "foreach" in body else [None])
]
CODE = ("tasks/", "flows/", "clozeline")


@cache
def imported_files(module: str) -> frozenset[str]:
    """Repo-relative files of every project module ``python -m tasks <module>`` imports."""
    return frozenset(p.relative_to(ROOT).as_posix() for p in closure(["tasks.__main__", f"tasks.{module}"]))


@cache
def code_deps(stage: str) -> tuple[str, ...]:
    """The stage's deps that are project code: ``.py`` files and folders under tasks/ or flows/."""
    return tuple(
        d for d in declared_deps(ROOT, stage) if d.startswith(CODE) and (d.endswith(".py") or (ROOT / d).is_dir())
    )


def covered(path: str, deps: tuple[str, ...]) -> bool:
    return any(path == d or path.startswith(d.rstrip("/") + "/") for d in deps)


@pytest.mark.parametrize(("stage", "module"), [s[:2] for s in STAGES])
def test_every_imported_module_is_a_dep_of_its_stage(stage, module):
    missing = sorted(f for f in imported_files(module) if not covered(f, code_deps(stage)))
    assert not missing, f"dvc.yaml stage {stage!r} imports modules not in its deps: {missing}"


@pytest.mark.parametrize(("stage", "module"), [s[:2] for s in STAGES])
def test_code_deps_are_exactly_what_the_stage_imports(stage, module):
    files = imported_files(module)
    stale = []
    for dep in code_deps(stage):
        path = ROOT / dep
        inside = {p.relative_to(ROOT).as_posix() for p in path.rglob("*.py")} if path.is_dir() else {dep}
        stale += sorted(inside - files)
    assert not stale, f"dvc.yaml stage {stage!r} lists code it does not import (needless reruns): {stale}"


@pytest.mark.parametrize(("stage", "module", "item"), STAGES)
def test_params_list_covers_every_key_the_stage_reads(stage, module, item):
    listed = declared_params(ROOT, stage)
    reads = keys_read(module, item)
    unlisted = sorted(k for k in reads if not covered_key(k, listed))
    unread = sorted(
        p for p in listed if not any(k == p or k.startswith(p + ".") or p.startswith(k + ".") for k in reads)
    )
    assert not unlisted, f"dvc.yaml stage {stage!r} reads params it does not list: {unlisted}"
    assert not unread, f"dvc.yaml stage {stage!r} lists params outside its config model or item: {unread}"


def covered_key(key: str, listed: list[str]) -> bool:
    return any(key == p or key.startswith(p + ".") for p in listed)


@pytest.mark.parametrize("stage", [s[0] for s in STAGES])
def test_every_dep_resolves(stage):
    body = DVC[stage.partition("@")[0]]
    assert len(declared_deps(ROOT, stage)) == len(body.get("do", body).get("deps", [])), "a ${...} did not resolve"


def test_only_stages_and_the_runner_sit_at_the_top_of_tasks():
    stages = {module for _, module, _ in STAGES}
    runner = {"__init__", "__main__", "tracking", "config", "common", "CONTRACTS"}
    top = {
        p.stem if p.is_file() else p.name
        for p in (ROOT / "tasks").iterdir()
        if p.name != "__pycache__" and not p.name.startswith(".")
    }
    assert top - runner == stages


def test_a_module_two_stages_import_is_shared_code():
    users: dict[str, set[str]] = {}
    for _, module, _ in STAGES:
        for path in imported_files(module):
            users.setdefault(path, set()).add(module)
    shared = {p for p, who in users.items() if len(who) > 1}
    runner = {"tasks/__init__.py", "tasks/__main__.py"}
    # clozeline/: the shipped package, whose input code (alignment, truncation) the stages train with
    owned_by_none = ("tasks/common/", "tasks/config/", "tasks/tracking/", "clozeline/")
    misplaced = sorted(p for p in shared - runner if not p.startswith(owned_by_none))
    assert not misplaced, f"imported by several stages but owned by one: {misplaced}"


def test_no_source_file_is_over_400_lines():
    long = {
        p.relative_to(ROOT).as_posix(): n
        for folder in ("tasks", "flows", "benchmarks", "clozeline")
        for p in (ROOT / folder).rglob("*.py")
        if not any(part.startswith(".") for part in p.relative_to(ROOT).parts)  # benchmarks/.peers: venvs
        and (n := p.read_text(encoding="utf-8").count("\n")) > 400
    }
    assert not long, f"split these by responsibility: {long}"
