"""A file source outside the repo is a DVC dependency of ingest: a change to it reruns the stage, and a source
that dvc.yaml does not list stops the stage naming the source."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tasks import ingest
from tasks.config import Paths
from tasks.config.corpus.ingest import IngestParams
from tasks.ingest.deps import check_declared_deps
from tasks.tracking import NullLog

WORKTREE = Path(__file__).resolve().parents[2]
DVC = Path(sys.executable).parent / "dvc"
#: The stage command: ingest the sources of sources.yaml into data/ingest, as ``python -m tasks ingest`` would.
STAGE_SCRIPT = f"""\
import sys
from pathlib import Path
sys.path.insert(0, {str(WORKTREE)!r})
import yaml
from tasks import ingest
from tasks.config import Paths
from tasks.config.corpus.ingest import IngestParams
from tasks.tracking import NullLog
cfg = IngestParams.model_validate(yaml.safe_load(Path("sources.yaml").read_text()))
ingest.run(cfg, Paths(data="data", models="models", metrics="metrics", reports="reports"), NullLog())
"""


def text_source(name: str, path: Path) -> dict:
    return {"name": name, "kind": "text", "role": "pretrain", "path": str(path)}


def dvc(repo: Path, *args: str) -> str:
    done = subprocess.run([str(DVC), *args], cwd=repo, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def make_repo(tmp: Path, deps: list[str], sources: list[dict]) -> Path:
    repo = tmp / "repo"
    repo.mkdir()
    (repo / "stage.py").write_text(STAGE_SCRIPT)
    (repo / "sources.yaml").write_text(yaml.safe_dump({"sources": sources}))
    stage = {"cmd": f"{sys.executable} stage.py", "deps": ["stage.py", "sources.yaml", *deps], "outs": ["data/ingest"]}
    (repo / "dvc.yaml").write_text(yaml.safe_dump({"stages": {"ingest": stage}}))
    return repo


@pytest.mark.slow
def test_a_changed_file_outside_the_repo_makes_dvc_rerun_ingest(tmp_path):
    outside = tmp_path / "elsewhere" / "corpus"
    outside.mkdir(parents=True)
    (outside / "a.txt").write_text("first version")
    repo = make_repo(tmp_path, [str(outside)], [text_source("ext", outside)])
    dvc(repo, "init", "--no-scm", "-q")
    dvc(repo, "repro", "-q")
    assert "up to date" in dvc(repo, "status")
    (outside / "a.txt").write_text("second version")
    assert dvc(repo, "status").split() == ["ingest:", "changed", "deps:", "modified:", str(outside)]


def test_a_source_dvc_yaml_does_not_list_stops_ingest_naming_it(tmp_path, monkeypatch):
    listed, unlisted = tmp_path / "listed", tmp_path / "unlisted" / "b.txt"
    for path, content in ((listed / "a.txt", "alpha"), (unlisted, "beta")):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
    sources = [text_source("ok", listed / "*.txt"), text_source("missing", unlisted)]
    repo = make_repo(tmp_path, [str(listed)], sources)
    monkeypatch.chdir(repo)
    paths = Paths(data=Path("data"), models=Path("models"), metrics=Path("metrics"), reports=Path("reports"))
    with pytest.raises(ValueError) as err:
        ingest.run(IngestParams(sources=sources), paths, NullLog())
    assert str(err.value) == (
        f"ingest source 'missing': {unlisted} is not under any dep of the ingest stage in "
        f"{repo / 'dvc.yaml'}; add it (or a folder above it) to stages.ingest.deps so a "
        "change reruns ingest"
    )
    assert not (repo / "data").exists()
    ingest.run(IngestParams(sources=sources[:1]), paths, NullLog())  # a glob below a listed folder is covered
    assert (repo / "data" / "ingest" / "ok" / "part-00000.parquet").is_file()
    # the same run writing elsewhere is not the DVC stage: no check
    elsewhere = Paths(data=tmp_path / "scratch", models=Path("m"), metrics=Path("x"), reports=Path("r"))
    ingest.run(IngestParams(sources=sources), elsewhere, NullLog())
    assert (tmp_path / "scratch" / "ingest" / "missing" / "part-00000.parquet").is_file()


def test_the_project_dvc_yaml_covers_files_dropped_into_data_raw(tmp_path):
    raw = WORKTREE / "data" / "raw"
    paths = Paths(data=Path("data"), models=Path("models"), metrics=Path("metrics"), reports=Path("reports"))
    check_declared_deps(
        IngestParams(sources=[text_source("raw", raw / "*.txt")]).sources, paths.stage_data("ingest"), WORKTREE
    )
    with pytest.raises(ValueError, match=rf"^ingest source 'out': {tmp_path} is not under any dep"):
        check_declared_deps(
            IngestParams(sources=[text_source("out", tmp_path)]).sources, paths.stage_data("ingest"), WORKTREE
        )
