"""The flow's last step: record which data a pipeline run used, and optionally push and commit it.

``dvc.lock`` pins every stage output by md5; copying those md5s onto the pipeline's MLflow run as tags links
each tracked run to the exact data snapshot, and ``dvc checkout`` of that ``dvc.lock`` restores it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tasks.common.provenance import DVC_LOCK, Lock, git_commit
from tasks.config.snapshot import SnapshotParams
from tasks.tracking import DataInput


def default_remote(root: Path) -> str | None:
    """The default DVC remote's name, or ``None`` when none is configured."""
    out = _dvc(root, "remote", "default", check=False)
    name = out.stdout.strip()
    return name if out.returncode == 0 and name and "No default remote" not in name else None


def snapshot(root: Path, cfg: SnapshotParams, log, data: Path | None = None) -> dict[str, str]:
    """Tag the run with ``dvc.lock`` md5s, log each output under ``data`` (the params' data folder) as an MLflow
    dataset input (context ``snapshot``: the run page's Dataset column), ``dvc push`` if a remote exists,
    git-commit if asked.

    Returns the tags set. Raises ``subprocess.CalledProcessError`` if a push or commit fails.
    """
    outs = Lock.read(root / DVC_LOCK).out_md5s()
    tags = {f"dvc.out.{stage}:{path}": md5 for (stage, path), md5 in outs.items()}
    remote = default_remote(root)
    tags["dvc.remote"] = remote or "none"
    log.tags(tags)
    if data is not None:
        commit = git_commit(root)
        under = (root / data).resolve()
        log.inputs(
            [
                DataInput(path, md5, "snapshot", commit)
                for (_, path), md5 in outs.items()
                if (root / path).resolve().is_relative_to(under)
            ]
        )
    if remote and cfg.push:
        log.info(f"snapshot: dvc push to remote {remote!r}")
        _dvc(root, "push")
    if cfg.git_commit:
        _git_commit(root)
    return tags


def _dvc(root: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dvc", *args], cwd=root, capture_output=True, text=True, check=check)


def _git_commit(root: Path) -> None:
    paths = [p for p in (DVC_LOCK, "params.yaml", "metrics", "reports/plots") if (root / p).exists()]
    subprocess.run(["git", "add", "--", *paths], cwd=root, check=True)
    staged = subprocess.run(["git", "diff", "--cached", "--quiet"], cwd=root)
    if staged.returncode != 0:
        subprocess.run(["git", "commit", "-m", "clozeline: data snapshot after pipeline run"], cwd=root, check=True)
