"""The flow's snapshot step: dvc.lock md5s as tags, the default DVC remote, optional git commit."""

import subprocess
import sys
from pathlib import Path

from flows.snapshot import default_remote, snapshot
from tasks.config.snapshot import SnapshotParams
from tasks.tracking import DataInput


class RecordingLog:
    def __init__(self):
        self.tagged = {}
        self.datasets = []

    def tags(self, values):
        self.tagged.update(values)

    def inputs(self, datasets):
        self.datasets += datasets

    def info(self, message):
        pass


def _dvc(repo, *args):
    subprocess.run([sys.executable, "-m", "dvc", *args], cwd=repo, check=True, capture_output=True)


def test_snapshot_tags_and_finds_the_default_remote(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    _dvc(repo, "init", "--no-scm", "-q")
    log = RecordingLog()
    snapshot(repo, SnapshotParams(push=False, git_commit=False), log)
    assert log.tagged == {"dvc.remote": "none"}
    _dvc(repo, "remote", "add", "-d", "local", str(tmp_path / "store"))
    assert default_remote(repo) == "local"
    (repo / "dvc.lock").write_text(
        "schema: '2.0'\nstages:\n  a:\n    outs:\n    - path: data/a\n      md5: aa.dir\n"
        "  b:\n    outs:\n    - path: models/b\n      md5: bb.dir\n"
    )
    snapshot(repo, SnapshotParams(push=False, git_commit=False), log, Path("data"))
    assert log.tagged == {"dvc.remote": "local", "dvc.out.a:data/a": "aa.dir", "dvc.out.b:models/b": "bb.dir"}
    # the data outputs, not the models, are the run's dataset inputs (the MLflow UI's Dataset column)
    assert log.datasets == [DataInput("data/a", "aa.dir", "snapshot", "unknown")]
