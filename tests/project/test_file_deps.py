"""Every file a stage reads from params is a DVC dependency of that stage, or the stage stops naming the key:
the tokenizer's ``vocab_file``, pretraining's ``init_from`` folder and the probe's two probe sets (the ingest
sources have their own test, tests/ingest/test_ingest_dvc.py)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tasks import probe, tokenizer
from tasks.common.deps import require_declared
from tasks.common.provenance import declared_outs
from tasks.config import Paths, load_params
from tasks.pretrain.init import resolve_start
from tasks.tracking import NullLog

ROOT = Path(__file__).resolve().parents[2]
DVC = Path(sys.executable).parent / "dvc"
PATHS = Paths(data=Path("data"), models=Path("models"), metrics=Path("metrics"), reports=Path("reports"))


def project_copy(dest: Path, extra_tokenizer_deps: tuple[str, ...] = (), **params: object) -> Path:
    """The project's dvc.yaml and params.yaml in ``dest`` (dotted ``params`` overrides, ``__`` for ``.``), the
    tokenizer stage given ``extra_tokenizer_deps``."""
    dest.mkdir(parents=True, exist_ok=True)
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())
    stages["stages"]["tokenizer"]["deps"] += list(extra_tokenizer_deps)
    (dest / "dvc.yaml").write_text(yaml.safe_dump(stages, sort_keys=False))
    values = yaml.safe_load((ROOT / "params.yaml").read_text())
    for dotted, value in params.items():
        *parents, leaf = dotted.split("__")
        node = values
        for key in parents:
            node = node[key]
        node[leaf] = value
    (dest / "params.yaml").write_text(yaml.safe_dump(values, sort_keys=False))
    return dest


def expected(key: str, path: Path, stage: str, repo: Path) -> str:
    return (
        f"{key}: {path} is not under any dep of the {stage} stage in {repo / 'dvc.yaml'}; add it (or a folder "
        f"above it) to stages.{stage}.deps so a change reruns {stage}"
    )


def test_the_default_probe_sets_are_deps_of_the_probe_stage():
    cfg = load_params(ROOT / "params.yaml").probe
    reads = {"probe.senses_file": cfg.senses_file, "probe.pairs_file": cfg.pairs_file}
    require_declared("probe", PATHS.stage_data("probe"), reads, ROOT)  # tasks/probe is a dep: no error
    outside = Path("/tmp/elsewhere/senses.jsonl")
    with pytest.raises(ValueError) as err:
        require_declared("probe", PATHS.stage_data("probe"), {"probe.senses_file": outside}, ROOT)
    assert str(err.value) == expected("probe.senses_file", outside, "probe", ROOT)


def test_a_run_that_is_not_the_dvc_stage_is_not_checked(tmp_path):
    assert Path("data/probe") in map(Path, declared_outs(ROOT, "probe"))
    require_declared("probe", tmp_path / "probe", {"probe.senses_file": tmp_path / "mine.jsonl"}, ROOT)


def test_a_vocab_file_outside_the_deps_stops_the_tokenizer_before_any_work(tmp_path, monkeypatch):
    vocab = tmp_path / "mine" / "vocab.txt"
    vocab.parent.mkdir()
    vocab.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\n")
    repo = project_copy(tmp_path / "repo")
    monkeypatch.chdir(repo)
    cfg = load_params(repo / "params.yaml", {"tokenizer.vocab_from": "file", "tokenizer.vocab_file": str(vocab)})
    with pytest.raises(ValueError) as err:
        tokenizer.run(cfg.tokenizer, PATHS, NullLog())  # no data/ at all: the check comes first
    assert str(err.value) == expected("tokenizer.vocab_file", vocab, "tokenizer", repo)


def test_an_init_from_folder_outside_the_deps_stops_pretraining(tmp_path, monkeypatch):
    folder = tmp_path / "my-model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    repo = project_copy(tmp_path / "repo")
    monkeypatch.chdir(repo)
    cfg = load_params(repo / "params.yaml", {"pretrain.init_from": str(folder)})
    with pytest.raises(ValueError) as err:
        resolve_start(cfg.pretrain, PATHS)
    assert str(err.value) == expected("pretrain.init_from", folder, "pretrain", repo)


@pytest.mark.parametrize("key", ["senses_file", "pairs_file"])
def test_a_probe_set_outside_the_deps_stops_the_probe(tmp_path, monkeypatch, key):
    mine = tmp_path / "mine.jsonl"
    shutil.copy(ROOT / "tasks" / "probe" / ("senses.jsonl" if key == "senses_file" else "minimal_pairs.jsonl"), mine)
    repo = project_copy(tmp_path / "repo")
    monkeypatch.chdir(repo)
    cfg = load_params(repo / "params.yaml", {f"probe.{key}": str(mine)})
    with pytest.raises(ValueError) as err:
        probe.run(cfg.probe, PATHS, NullLog())
    assert str(err.value) == expected(f"probe.{key}", mine, "probe", repo)


def dvc(repo: Path, *args: str) -> str:
    done = subprocess.run([str(DVC), *args], cwd=repo, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_an_edited_vocab_file_listed_in_the_deps_makes_dvc_rerun_the_tokenizer(tmp_path):
    """With the file among the stage's deps (what the error asks for), cutting the vocabulary makes ``dvc
    status`` report the tokenizer stage: the failure the check exists for (a 30,522-line file cut to 3,000 and
    nothing to do) cannot happen."""
    repo = project_copy(
        tmp_path / "repo", ("vocab",), tokenizer__vocab_from="file", tokenizer__vocab_file="vocab/vocab.txt"
    )
    shutil.copytree(ROOT / "tasks", repo / "tasks", ignore=shutil.ignore_patterns("__pycache__"))
    (repo / "vocab").mkdir()
    (repo / "vocab" / "vocab.txt").write_text("".join(f"w{i}\n" for i in range(300)))
    for out in (
        "data/leakage/x",
        "models/tokenizer/tokenizer.json",
        "metrics/tokenizer.json",
        "data/tokenizer_vocab/vocab.txt",
    ):
        (repo / out).parent.mkdir(parents=True, exist_ok=True)
        (repo / out).write_text("{}")
    dvc(repo, "init", "--no-scm", "-q")
    dvc(repo, "commit", "-f", "-q", "tokenizer")  # as if the stage had just run
    assert "up to date" in dvc(repo, "status", "tokenizer")
    (repo / "vocab" / "vocab.txt").write_text("".join(f"w{i}\n" for i in range(30)))
    assert dvc(repo, "status", "tokenizer").split() == ["tokenizer:", "changed", "deps:", "modified:", "vocab"]
