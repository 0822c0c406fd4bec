"""The flow's snapshot step: dvc.lock md5s as tags, the default DVC remote, optional git commit."""

import subprocess
import sys

from tasks.config.snapshot import SnapshotParams
from tasks.snapshot import default_remote, lock_md5s, snapshot


class RecordingLog:
    def __init__(self):
        self.tagged = {}

    def tags(self, values):
        self.tagged.update(values)

    def info(self, message):
        pass


def _dvc(repo, *args):
    subprocess.run([sys.executable, "-m", "dvc", *args], cwd=repo, check=True, capture_output=True)


def test_lock_md5s_lists_every_output(tmp_path):
    (tmp_path / "dvc.lock").write_text(
        "schema: '2.0'\nstages:\n  b:\n    outs:\n    - path: data/b\n      md5: bb.dir\n"
        "  a:\n    outs:\n    - path: data/a\n      md5: aa.dir\n    - path: metrics/a.json\n      md5: a1\n")
    assert lock_md5s(tmp_path / "dvc.lock") == {"a:data/a": "aa.dir", "a:metrics/a.json": "a1", "b:data/b": "bb.dir"}
    assert lock_md5s(tmp_path / "missing.lock") == {}


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
