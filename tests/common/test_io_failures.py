"""I/O failures in one line, naming the path (issue 62 item 2): a damaged or truncated Parquet / JSONL file read
anywhere names the file and the stage to rerun (``tasks/common/files/ioerrors.py``); a write past the disk's room or
the file size limit (``RLIMIT_FSIZE``, set in a subprocess with ``SIGXFSZ`` ignored so the write gets ``EFBIG``)
names the path being written; neither leaves a partial file. For ingest's cache, dedup and tokenize.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import tasks.__main__ as stage_main
from ingest_dedup_fixtures import DEDUP, outputs, paths_of, run_both, words, write_file
from split_fixtures import params as split_params
from tasks import dedup, ingest
from tasks.common.files.ioerrors import DamagedFile, NoRoom, producing_stage, reading, writing
from tasks.config.corpus.dedup import DedupParams
from tasks.config.corpus.ingest import IngestParams
from tasks.tracking import NullLog
from tokenize_fixtures import pretrain, tokenize_params, train_tokenizer, write_inputs

ROOT = Path(__file__).resolve().parents[2]
TESTS = Path(__file__).resolve().parents[1]


def corrupt(path: Path) -> None:
    """Overwrite the middle third of ``path`` in place (a hard link to it changes too): pages and their headers.
    (Damage a format cannot see, a changed byte of an uncompressed page without a checksum, reads as other text.)"""
    size = path.stat().st_size
    with open(path, "r+b") as handle:
        handle.seek(size // 3)
        handle.write(bytes(range(256)) * (size // 3 // 256) + bytes(range(size // 3 % 256)))


def truncate(path: Path) -> None:
    """``path`` cut to half its size, in place."""
    os.truncate(path, path.stat().st_size // 2)


def assert_one_line_naming(err: BaseException, path: Path, *says: str) -> None:
    text = str(err)
    assert "\n" not in text and str(path) in text, text
    for words_ in says:
        assert words_ in text, text


def no_partial_files(root: Path) -> list[str]:
    """Hidden temporary files or folders left under ``root`` (``.<name>.tmp``)."""
    return sorted(str(p) for p in root.rglob(".*.tmp"))


@pytest.fixture()
def ingested(tmp_path: Path) -> tuple[Path, Path]:
    """A root with one jsonl source (two files of 12 distinct 60-word docs) ingested and deduplicated once."""
    rng = random.Random(62)
    raw = tmp_path / "raw"
    raw.mkdir()
    for k in range(2):
        write_file(raw, f"part{k}.jsonl", [words(rng) for _ in range(12)])
    run_both(tmp_path / "root", raw)
    return tmp_path / "root", raw


def dedup_cfg() -> DedupParams:
    return DedupParams.model_validate({**DEDUP, "num_proc": 1})


def shard(root: Path) -> Path:
    return sorted((root / "data" / "ingest" / "docs").glob("part-*.parquet"))[0]


# --------------------------------------------------------------------------------------------------- reading


@pytest.mark.parametrize("damage", [corrupt, truncate])
def test_dedup_names_a_damaged_ingest_shard_and_rerunning_ingest_recovers(ingested, damage):
    root, raw = ingested
    before = outputs(root)
    damage(shard(root))  # the output is a hard link to ingest's cached shard: that one is damaged too
    with pytest.raises(DamagedFile) as caught:
        dedup.run(dedup_cfg(), paths_of(root), NullLog())
    assert_one_line_naming(caught.value, shard(root), "cannot be read", "rerun `dvc repro --single-item ingest`")
    run_both(root, raw)  # what the message says: ingest sees its shard is not the one it wrote and writes it again
    assert outputs(root) == before


@pytest.mark.parametrize("damage", [corrupt, truncate])
def test_a_damaged_ingest_cache_entry_is_read_again_and_named_in_the_log(ingested, damage):
    root, raw = ingested
    before = outputs(root)
    entries = sorted((root / "data" / "ingest_cache" / "docs").glob("*.arrow"))
    assert len(entries) == 2
    damage(entries[0])
    said = []

    class Log(NullLog):
        def info(self, message) -> None:
            said.append(message)

    spec = {
        "name": "docs",
        "kind": "jsonl",
        "role": "task",
        "path": str(raw),
        "text_field": "text",
        "label_field": "label",
    }
    ingest.run(IngestParams(sources=[spec]), paths_of(root), Log())
    assert any(str(entries[0]) in line and "damaged" in line for line in said), said
    dedup.run(dedup_cfg(), paths_of(root), NullLog())
    assert outputs(root) == before


def test_the_runner_prints_a_damaged_shard_in_one_line_and_leaves_no_outputs(ingested, monkeypatch, capsys):
    root, _ = ingested
    for name in ("params.yaml", "dvc.yaml"):
        shutil.copyfile(ROOT / name, root / name)
    monkeypatch.chdir(root)
    corrupt(shard(root))
    assert stage_main.main(["dedup"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(f"clozeline: dedup: {Path('data/ingest/docs') / shard(root).name}: cannot be read")
    assert "rerun `dvc repro --single-item ingest`" in err[-1]
    assert not any("Traceback" in line for line in err)
    assert not (root / "data" / "dedup").exists()


def tokenize_workspace(tmp_path: Path):
    """``Paths`` of a small tokenize workspace: its inputs written and its tokenizer trained."""
    paths = write_inputs(tmp_path, pretrain(8))
    train_tokenizer(paths)
    return paths


def tokenize_fails_on(paths, path: Path, damage) -> DamagedFile:
    """The error ``tokenize.run`` raises once ``damage`` has been done to ``path`` (it must raise ``DamagedFile``)."""
    from tasks import tokenize

    damage(path)
    with pytest.raises(DamagedFile) as caught:
        tokenize.run(tokenize_params(), paths, NullLog())
    return caught.value


@pytest.mark.parametrize("damage", [corrupt, truncate])
def test_tokenize_names_a_damaged_leakage_output(tmp_path, damage):
    paths = tokenize_workspace(tmp_path)
    path = paths.data / "leakage" / "news.parquet"
    err = tokenize_fails_on(paths, path, damage)
    assert_one_line_naming(err, path, "cannot be read", "rerun `dvc repro --single-item leakage`")


def test_a_damaged_jsonl_line_names_the_file(tmp_path):
    path = tmp_path / "data" / "leakage" / "removed.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text('{"doc_id": "a"}\n{"doc_id": ', encoding="utf-8")  # truncated mid-line
    with pytest.raises(DamagedFile) as caught, reading(path):
        [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert_one_line_naming(caught.value, path, "rerun `dvc repro --single-item leakage`")


def test_the_producing_stage_is_the_folder_under_data_and_a_missing_file_stays_not_found(tmp_path):
    assert producing_stage("data/ingest/docs/part-00000.parquet") == "ingest"
    assert producing_stage("data/ingest/split/part-00000.parquet") == "ingest"  # a source named like a stage
    assert producing_stage("/x/report/data/dedup_index/entries.parquet") == "dedup"
    assert producing_stage("data/tokenize/cls/train/data-00000-of-00001.arrow") == "tokenize"
    assert producing_stage("data/raw/news.jsonl") is None
    assert producing_stage("models/pretrained/model.safetensors") == "pretrain"

    with pytest.raises(FileNotFoundError), reading(tmp_path / "none.parquet"):
        (tmp_path / "none.parquet").read_bytes()


@pytest.mark.parametrize("source", ["/srv/pretrain/raw/news.parquet", "/home/me/report/corpora/x.jsonl"])
def test_a_folder_named_like_a_stage_outside_data_is_a_users_source(source):
    assert producing_stage(source) is None  # only the path below the project's data / models folder says a stage
    assert str(DamagedFile(source, OSError("bad"))).endswith("replace it with a readable copy and rerun")


# ------------------------------------------------------------------------------------------ models, checkpoints


def test_tokenize_names_a_truncated_tokenizer_json(tmp_path):
    paths = tokenize_workspace(tmp_path)
    path = paths.models / "tokenizer" / "tokenizer.json"
    err = tokenize_fails_on(paths, path, truncate)
    assert_one_line_naming(err, path, "cannot be read", "rerun `dvc repro --single-item tokenizer`")


def tiny_masked_lm():
    from transformers import BertConfig, BertForMaskedLM

    return BertForMaskedLM(
        BertConfig(vocab_size=64, hidden_size=8, num_hidden_layers=1, num_attention_heads=2, intermediate_size=16)
    )


def test_a_truncated_model_names_its_weights_and_the_stage_that_writes_them(tmp_path):
    from tasks.common.models import encoders

    folder = tmp_path / "models" / "pretrained"
    tiny_masked_lm().save_pretrained(folder)
    path = folder / "model.safetensors"
    truncate(path)
    for load in (encoders.load_masked_lm, encoders.load_encoder):  # probe's and finetune's loads
        with pytest.raises(DamagedFile) as caught:
            load("clozeline", folder, 0)
        assert_one_line_naming(caught.value, path, "cannot be read", "rerun `dvc repro --single-item pretrain`")


@pytest.mark.parametrize("name", ["model.safetensors", "optimizer.pt", "trainer_state.pt"])
def test_a_truncated_checkpoint_says_to_delete_it(tmp_path, name):
    import torch

    from tasks.pretrain import checkpoint

    model = tiny_masked_lm()
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.zeros(1, 4, dtype=torch.long)).logits.sum().backward()
    optimizer.step()
    saved = checkpoint.save(tmp_path / "models" / "checkpoints" / "pretrain", 3, model, optimizer, {"step": 3})
    truncate(saved / name)
    with pytest.raises(DamagedFile) as caught:
        checkpoint.load(checkpoint.latest(saved.parent), model, optimizer, torch.device("cpu"))
    assert_one_line_naming(caught.value, saved / name, "cannot be read", f"delete {saved} and rerun")


# ---------------------------------------------------------------------------------------------- missing files


@pytest.mark.parametrize("deleted", [1, 2])  # one of the source's two shards, or both (its folder left empty)
def test_dedup_names_a_deleted_ingest_shard_instead_of_reading_fewer_docs(ingested, deleted):
    root, raw = ingested
    before = outputs(root)
    shards = sorted((root / "data" / "ingest" / "docs").glob("part-*.parquet"))
    assert len(shards) == 2
    for path in shards[-deleted:]:
        path.unlink()
    with pytest.raises(ValueError) as caught:
        dedup.run(dedup_cfg(), paths_of(root), NullLog())
    assert_one_line_naming(caught.value, shards[-1], "missing", "rerun `dvc repro --single-item ingest`")
    assert "missing column" not in str(caught.value)
    run_both(root, raw)  # what the message says
    assert outputs(root) == before


def test_split_names_a_deleted_dedup_output(ingested):
    from tasks import split

    root, _ = ingested
    path = root / "data" / "dedup" / "docs.parquet"
    path.unlink()
    with pytest.raises(ValueError) as caught:
        split.run(split_params(stratify_by_label=False), paths_of(root), NullLog())
    assert_one_line_naming(caught.value, path, "missing", "rerun `dvc repro --single-item dedup`")


# --------------------------------------------------------------------------------------------------- writing

LIMITED = """
import sys
sys.path.insert(0, {tests!r})
from pathlib import Path
from tasks.common.files.ioerrors import NoRoom
try:
{body}
except NoRoom as err:
    print(json.dumps({{"type": type(err).__name__, "errno": err.errno, "message": str(err), "path": err.filename}}))
    sys.exit(3)
print("{{}}")
"""


def run_limited(body: str, limit_bytes: int) -> dict:
    """Run ``body`` (indented code) in a subprocess whose files may not grow past ``limit_bytes``, ``SIGXFSZ``
    ignored (a write past the limit fails with ``EFBIG``); returns what it printed about the ``NoRoom`` raised."""
    import resource
    import signal

    def limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))

    code = "import json\n" + LIMITED.format(tests=str(TESTS), body=body)
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, preexec_fn=limit, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 3, done.stdout + done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def assert_no_room(found: dict, root: Path) -> None:
    assert found["type"] == "NoRoom" and found["errno"] == 27, found
    message, path = found["message"], Path(found["path"])
    assert "\n" not in message and message.startswith(f"{path}: cannot be written: File too large"), message
    assert path.is_relative_to(root) and not path.exists(), path  # what was written of it is gone
    assert no_partial_files(root) == []


def test_ingest_cache_past_the_file_size_limit_names_the_entry(tmp_path):
    raw, root = tmp_path / "raw", tmp_path / "root"
    raw.mkdir()
    write_file(raw, "part0.jsonl", [words(random.Random(1), 60) for _ in range(40)])
    body = f"""    from ingest_dedup_fixtures import paths_of
    from tasks import ingest
    from tasks.config.corpus.ingest import IngestParams
    from tasks.tracking import NullLog
    spec = {{"name": "docs", "kind": "jsonl", "role": "task", "path": {str(raw)!r}, "text_field": "text"}}
    ingest.run(IngestParams(sources=[spec]), paths_of(Path({str(root)!r})), NullLog())"""
    found = run_limited(body, 8_000)
    assert_no_room(found, root)
    assert Path(found["path"]).parent == root / "data" / "ingest_cache" / "docs"
    assert not (root / "data" / "ingest").exists()


def test_dedup_past_the_file_size_limit_names_the_file(ingested):
    root, _ = ingested
    shutil.rmtree(root / "data" / "dedup")
    shutil.rmtree(root / "data" / "dedup_index")
    body = f"""    from ingest_dedup_fixtures import DEDUP, paths_of
    from tasks import dedup
    from tasks.config.corpus.dedup import DedupParams
    from tasks.tracking import NullLog
    dedup.run(DedupParams.model_validate({{**DEDUP, "num_proc": 1}}), paths_of(Path({str(root)!r})), NullLog())"""
    found = run_limited(body, 4_000)
    assert_no_room(found, root)
    assert Path(found["path"]).parent.name in ("dedup", "dedup_index"), found
    assert not (root / "data" / "dedup_index").exists()  # the index is swapped in whole, or not at all


def test_tokenize_past_the_file_size_limit_names_the_file(tmp_path):
    tokenize_workspace(tmp_path)
    body = f"""    from tokenize_fixtures import tokenize_params
    from tokenizer_fixtures import make_paths
    from tasks import tokenize
    from tasks.tracking import NullLog
    tokenize.run(tokenize_params(), make_paths(Path({str(tmp_path)!r})), NullLog())"""
    found = run_limited(body, 1_500)
    assert_no_room(found, tmp_path)
    assert Path(found["path"]).is_relative_to(tmp_path / "data"), found


def test_writing_removes_the_partial_file_and_leaves_other_errors_alone(tmp_path):
    path = tmp_path / "data" / "dedup" / "x.parquet"
    path.parent.mkdir(parents=True)
    with pytest.raises(NoRoom) as caught, writing(path):
        path.write_bytes(b"half")
        raise OSError(28, "No space left on device")
    assert not path.exists() and isinstance(caught.value, ValueError) and caught.value.errno == 28
    assert str(caught.value).startswith(f"{path}: cannot be written: No space left on device")
    with pytest.raises(PermissionError), writing(path):
        raise PermissionError(13, "Permission denied")


def test_the_runner_names_the_outputs_of_a_write_out_of_room_that_names_no_file(tmp_path, monkeypatch, capsys):
    for name in ("params.yaml", "dvc.yaml"):
        shutil.copyfile(ROOT / name, tmp_path / name)
    monkeypatch.chdir(tmp_path)

    def full_disk(stage, params, log, item=None):
        (tmp_path / "data" / "dedup").mkdir(parents=True)
        raise OSError(28, "No space left on device")  # a writer outside the shared ones: no path

    monkeypatch.setattr(stage_main, "run_stage", full_disk)
    assert stage_main.main(["dedup"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(
        "clozeline: dedup: data/dedup, data/dedup_index, metrics/dedup.json: cannot be written: No space left on device"
    ), err
    assert not any("Traceback" in line for line in err)
    assert not (tmp_path / "data" / "dedup").exists()


def test_a_temporary_file_is_named_as_the_file_it_becomes(tmp_path):
    tmp = tmp_path / "data" / ".dedup_index.tmp" / ".entries.parquet.tmp"
    tmp.parent.mkdir(parents=True)
    with pytest.raises(NoRoom) as caught, writing(tmp):
        tmp.write_bytes(b"half")
        raise OSError(27, "File too large")
    assert caught.value.filename == str(tmp_path / "data" / "dedup_index" / "entries.parquet") and not tmp.exists()


def test_ingest_names_a_truncated_parquet_source_and_says_to_replace_it(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    source = tmp_path / "raw" / "news.parquet"
    source.parent.mkdir()
    pq.write_table(pa.table({"text": [words(random.Random(k)) for k in range(50)]}), source)
    truncate(source)
    spec = {"name": "news", "kind": "parquet", "role": "pretrain", "path": str(source), "text_field": "text"}
    with pytest.raises(DamagedFile) as caught:
        ingest.run(IngestParams(sources=[spec]), paths_of(tmp_path / "root"), NullLog())
    assert_one_line_naming(caught.value, source, "Parquet magic bytes", "replace it with a readable copy")


def test_the_runner_names_a_write_out_of_room_that_the_tokenizers_writer_raises(tmp_path):
    """tokenizers' Rust ``save_pretrained`` past the file size limit raises a bare ``Exception`` ("File too large
    (os error 27)"), no errno: the runner knows it by its words and names the stage's declared outputs."""
    write_inputs(tmp_path, pretrain(8))  # the inputs, outside the limit; the tokenizer.json written is ~5 kB
    body = f"""
    import tasks.__main__ as runner
    from tokenize_fixtures import train_tokenizer
    from tokenizer_fixtures import make_paths
    try:
        train_tokenizer(make_paths(Path({str(tmp_path)!r})))
    except Exception as err:
        found = {{"type": type(err).__name__, "errno": runner.room_errno(err), "path": None,
                  "message": runner.no_room(err, Path.cwd(), "tokenizer")}}
        print(json.dumps(found))
        sys.exit(3)"""
    found = run_limited(body, 4000)
    assert found["type"] == "Exception" and found["errno"] == 27, found
    assert found["message"] == (
        "models/tokenizer, data/tokenizer_vocab, metrics/tokenizer.json: cannot be written: "
        "File too large (free space on its file system or raise the file size limit, then "
        "rerun)"
    ), found


@pytest.mark.parametrize(
    "raised, says",
    [
        (
            Exception("Error while serializing: I/O error: No space left on device (os error 28)"),
            "No space left on device",
        ),
        (RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598"), "a write failed"),
    ],
)
def test_the_runner_prints_a_writer_out_of_room_without_errno_in_one_line(tmp_path, monkeypatch, capsys, raised, says):
    for name in ("params.yaml", "dvc.yaml"):
        shutil.copyfile(ROOT / name, tmp_path / name)
    monkeypatch.chdir(tmp_path)

    def full_disk(stage, params, log, item=None):
        (tmp_path / "models" / "pretrained").mkdir(parents=True)
        raise raised  # safetensors' save_file / torch.save: no errno

    monkeypatch.setattr(stage_main, "run_stage", full_disk)
    assert stage_main.main(["pretrain"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("clozeline: pretrain: models/pretrained, models/checkpoints/pretrain, "), err
    assert f"cannot be written: {says}" in err[-1] and not any("Traceback" in line for line in err)
    assert not (tmp_path / "models" / "pretrained").exists()
