"""The check that every file source is a DVC dependency of the ingest stage, so changed data reruns it.

The ingest stage lists ``${paths.data}/raw``; a source elsewhere (any absolute path works: DVC hashes files
and folders outside the repo as deps) needs its own entry there, and ``tasks.common.deps`` enforces it.
"""

from __future__ import annotations

from pathlib import Path

from tasks.common.deps import require_declared
from tasks.config.corpus.ingest import BuiltinSource
from tasks.ingest.records import fixed_root


def check_declared_deps(sources: list, out_dir: Path, root: Path) -> None:
    """Raise ``ValueError`` naming the first file source whose path is not a dep of the ingest stage in
    ``<root>/dvc.yaml`` (the path itself, or a folder above it; for a glob, its glob-free folder); checked
    only when this run writes ``out_dir``, the stage's declared output (``require_declared``)."""
    reads = {
        f"ingest source {spec.name!r}": fixed_root(spec.path) for spec in sources if not isinstance(spec, BuiltinSource)
    }
    require_declared("ingest", out_dir, reads, root)
