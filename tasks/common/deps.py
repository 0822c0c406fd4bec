"""Every file a stage reads is a DVC dependency of that stage, or the stage stops before it reads it.

DVC decides what to rerun from the ``deps`` in ``dvc.yaml`` alone: a file named only in params (a vocabulary
file, an ``init_from`` folder, a probe set) can change without ``dvc status`` noticing, and the stale output
stays. DVC 3 cannot turn a param into a dep for us: a ``${...}`` in ``deps`` must resolve to a string, and
an optional file param is often null (treeverse/dvc#8171, #7151). So a stage lists what it reads from params
here, and the run stops with a one-line error when one of them is outside every dep of its stage.
"""

from __future__ import annotations

import os
from pathlib import Path

from tasks.common.provenance import declared_deps, declared_outs


def require_declared(stage: str, writes: Path, reads: dict[str, Path | str], root: Path | None = None) -> None:
    """Raise ``ValueError`` naming the params key of the first path in ``reads`` (``{params key: file or
    folder}``) that is not a dep of ``stage`` in ``<root>/dvc.yaml`` (the path itself or a folder above it).

    Checked only when this run writes ``writes``, an output ``dvc.yaml`` declares for the stage, i.e. when the
    run is the DVC stage (``dvc repro`` or ``python -m tasks <stage>``); a run writing elsewhere (a test, a
    notebook) is not tracked by DVC. ``root`` defaults to the working directory, where DVC runs a stage's
    command. Paths compare after making them absolute against ``root``, without resolving symlinks (DVC hashes
    a dep through the links inside it).
    """
    root = Path.cwd() if root is None else root
    if not any(_absolute(root, out) == _absolute(root, writes) for out in declared_outs(root, stage)):
        return
    deps = [_absolute(root, dep) for dep in declared_deps(root, stage)]
    for key, path in reads.items():
        target = _absolute(root, path)
        if not any(target == dep or target.is_relative_to(dep) for dep in deps):
            raise ValueError(
                f"{key}: {path} is not under any dep of the {stage} stage in {root / 'dvc.yaml'}; add it (or a "
                f"folder above it) to stages.{stage}.deps so a change reruns {stage}"
            )


def _absolute(root: Path, path: str | Path) -> Path:
    return Path(os.path.abspath(Path(root) / path))  # normalizes '..' but keeps symlinks, as DVC sees paths
