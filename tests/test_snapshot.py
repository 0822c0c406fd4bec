"""The flow's snapshot step: dvc.lock md5s as tags, the default DVC remote, optional git commit."""

import subprocess
import sys

from flows.snapshot import default_remote, snapshot
from tasks.config.snapshot import SnapshotParams


class RecordingLog:
    def __init__(self):
        self.tagged = {}

    def tags(self, values):
        self.tagged.update(values)

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
    (repo / "dvc.lock").write_text("schema: '2.0'\nstages:\n  a:\n    outs:\n    - path: data/a\n      md5: aa.dir\n")
    snapshot(repo, SnapshotParams(push=False, git_commit=False), log)
    assert log.tagged == {"dvc.remote": "local", "dvc.out.a:data/a": "aa.dir"}
