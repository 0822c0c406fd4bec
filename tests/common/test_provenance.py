"""The one reader of dvc.yaml, dvc.lock and the git commit (tasks/common/provenance.py)."""

import subprocess

import pytest

from tasks.common.provenance import Lock, declared_deps, git_commit, stage_modules, stage_names

LOCK = """schema: '2.0'
stages:
  b:
    cmd: python -m tasks b
    deps:
    - path: data/a
      md5: old.dir
    - path: tasks/b.py
      md5: code
    params:
      params.yaml:
        b:
          seed: 3
        paths.data: data
    outs:
    - path: data/b
      md5: bb.dir
  a:
    outs:
    - path: data/a
      md5: aa.dir
    - path: metrics/a.json
      md5: a1
"""

DVC_YAML = """stages:
  a:
    cmd: python -m tasks a
    deps: [tasks/a.py]
  b:
    cmd: python -m tasks b
    deps: [tasks/b.py, "${paths.data}/a", "${other.file}"]
  finetune:
    foreach: [cls, ner]
    do:
      cmd: python -m tasks finetune ${item}
      deps: ["${paths.data}/tokenize/${item}", models/pretrained]
"""


@pytest.fixture()
def lock(tmp_path):
    (tmp_path / "dvc.lock").write_text(LOCK)
    return Lock.read(tmp_path / "dvc.lock")


def test_out_md5s_list_every_output_sorted_by_stage(lock, tmp_path):
    assert lock.out_md5s() == {("a", "data/a"): "aa.dir", ("a", "metrics/a.json"): "a1", ("b", "data/b"): "bb.dir"}
    assert Lock.read(tmp_path / "missing.lock").out_md5s() == {}


def test_recorded_params_merge_files_and_keep_dotted_keys(lock):
    assert lock.params("b") == {"b": {"seed": 3}, "paths.data": "data"}
    assert lock.params("a") == {} and lock.params("nope") == {}


def test_inputs_take_the_upstream_output_md5_and_the_own_run_for_code(lock):
    # data/a was rebuilt since b last ran: the upstream out md5 wins over b's recorded dep md5
    assert lock.input_md5s("b", ["data/a", "tasks/b.py", "data/unknown"]) == {"data/a": "aa.dir", "tasks/b.py": "code"}


def test_stage_names_expand_foreach_and_deps_fill_in_item_and_params(tmp_path):
    (tmp_path / "dvc.yaml").write_text(DVC_YAML)
    (tmp_path / "params.yaml").write_text("paths:\n  data: store\n")
    assert stage_names(tmp_path) == ["a", "b", "finetune@cls", "finetune@ner"]
    assert stage_modules(stage_names(tmp_path)) == ["a", "b", "finetune"]
    assert declared_deps(tmp_path, "b") == ["tasks/b.py", "store/a"]  # other.file is in no params: left out
    assert declared_deps(tmp_path, "finetune@ner") == ["store/tokenize/ner", "models/pretrained"]
    with pytest.raises(FileNotFoundError, match="dvc.yaml: no such file"):
        stage_names(tmp_path / "elsewhere")


def test_git_commit_is_head_and_says_dirty(tmp_path):
    assert git_commit(tmp_path) == "unknown"
    run = lambda *args: subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)  # noqa: E731
    run("init", "-q")
    (tmp_path / "f").write_text("1")
    run("add", "f")
    run("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x")
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=tmp_path, capture_output=True, text=True).stdout.strip()
    assert git_commit(tmp_path) == head
    (tmp_path / "f").write_text("2")
    assert git_commit(tmp_path) == head + "-dirty"


def test_files_dvc_hashed_give_their_md5_until_they_change(tmp_path):
    import hashlib
    import os

    from tasks.common.provenance import dvc_md5, hashed_md5

    folder = tmp_path / "raw" / "src"
    (folder / "deep").mkdir(parents=True)
    files = {folder / "a.jsonl": b'{"id": 1}\n', folder / "deep" / "b.txt": b"x" * 5000, tmp_path / "one.txt": b"y"}
    for file, data in files.items():
        file.write_bytes(data)
    assert all(hashed_md5(file) is None for file in files)
    dvc_md5(tmp_path, "raw/src")
    dvc_md5(tmp_path, "one.txt")
    for file, data in files.items():
        assert hashed_md5(file) == (len(data), hashlib.md5(data).hexdigest())
    edited = folder / "a.jsonl"
    stat = edited.stat()
    edited.write_bytes(b'{"id": 2}\n')  # same size; an mtime a second later
    os.utime(edited, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    assert hashed_md5(edited) is None


def test_an_edit_that_sets_the_mtime_back_or_a_path_through_a_link_is_seen(tmp_path):
    import os

    from tasks.common.provenance import dvc_md5, hashed_md5

    (tmp_path / "raw").mkdir()
    file = tmp_path / "raw" / "a.txt"
    file.write_bytes(b"first")
    dvc_md5(tmp_path, "raw")
    (tmp_path / "link").symlink_to(tmp_path / "raw")
    assert hashed_md5(tmp_path / "link" / "a.txt") == hashed_md5(file) is not None
    stat = file.stat()
    file.write_bytes(b"other")  # same size, the mtime set back as `cp -p` or `touch -d` would
    os.utime(file, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert hashed_md5(file) is None
