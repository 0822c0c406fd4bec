"""The check that every file source is a DVC dependency of the ingest stage, so changed data reruns it.

DVC 3 takes a stage's deps only from ``dvc.yaml``: a ``${...}`` there must be a string, so a list of paths
in params cannot become deps (``Cannot interpolate data of type 'list'``; treeverse/dvc#8171, #7151). The
ingest stage lists ``${paths.data}/raw``; a source elsewhere (any absolute path works: DVC hashes files
and folders outside the repo as deps) needs its own entry there, and this check enforces it.
"""

from __future__ import annotations

import os
from pathlib import Path

from tasks.common.provenance import declared_deps, declared_outs
from tasks.config.ingest import BuiltinSource
from tasks.ingest.records import fixed_root

STAGE = "ingest"


def check_declared_deps(sources: list, out_dir: Path, root: Path) -> None:
    """Raise ``ValueError`` naming the first file source whose path is not a dep of the ingest stage in
    ``<root>/dvc.yaml`` (the path itself, or a folder above it; for a glob, its glob-free folder).

    Checked only when this run writes the output folder ``dvc.yaml`` declares for the stage, i.e. when it
    is the DVC stage (``dvc repro`` or ``python -m tasks ingest``); a run writing elsewhere (a test, a
    notebook) is not tracked by DVC. Paths compare after making them absolute against ``root``, without
    resolving symlinks (DVC hashes a dep through the links inside it).
    """
    if not any(_absolute(root, out) == _absolute(root, out_dir) for out in declared_outs(root, STAGE)):
        return
    deps = [_absolute(root, dep) for dep in declared_deps(root, STAGE)]
    for spec in sources:
        if isinstance(spec, BuiltinSource):
            continue
        target = _absolute(root, fixed_root(spec.path))
        if not any(target == dep or target.is_relative_to(dep) for dep in deps):
            raise ValueError(
                f"ingest source {spec.name!r}: {spec.path} is not under any dep of the ingest stage in "
                f"{root / 'dvc.yaml'}; add it (or a folder above it) to stages.ingest.deps so a change reruns ingest"
            )


def _absolute(root: Path, path: str | Path) -> Path:
    return Path(os.path.abspath(Path(root) / path))  # normalizes '..' but keeps symlinks, as DVC sees paths
