"""Incremental ingest and dedup (issue 35 items 1-2): a run over a grown, edited or shrunk jsonl folder source
reads and signs only what is new, and writes the bytes of a from-scratch run over the same data.

Each test keeps one raw folder and two data folders: ``inc`` is run before and after the change (the second
run is the incremental one), ``full`` only after it (from scratch, nothing persisted). ``where`` fields name
the raw files, so both read the same paths.
"""

from __future__ import annotations

import hashlib
import json
import random
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ingest_dedup_fixtures import (
    assert_equals_from_scratch,
    every_file,
    last_word_changed,
    outputs,
    paths_of,
    run_both,
    words,
    write_file,
)
from stage_helpers import RecordingLog
from tasks import ingest
from tasks.common.files.shards import read_named
from tasks.config.corpus.ingest import IngestParams
from tasks.dedup.signatures import DocSignatures
from tasks.ingest.records import SourceError


@pytest.fixture()
def corpus(tmp_path: Path) -> tuple[Path, random.Random, list[list[str]]]:
    """A raw folder of three jsonl files of 10 distinct 60-word docs each (file 0: a copy of its first doc too;
    file 2: its last doc a near duplicate of the one before), already run once into ``inc``."""
    rng = random.Random(35)
    raw = tmp_path / "raw"
    raw.mkdir()
    files = [[words(rng) for _ in range(10)] for _ in range(3)]
    files[0].append(files[0][0])
    files[2][9] = last_word_changed(files[2][8])
    for k, texts in enumerate(files):
        write_file(raw, f"part{k}.jsonl", texts)
    _, logged = run_both(tmp_path / "inc", raw)
    assert logged["dedup"]["dedup.mode"] == "full" and logged["dedup"]["incremental"]["docs_signed"] == 30
    return raw, rng, files


def ingest_texts_md5(root: Path) -> list[str]:
    """md5 of each ingest row's text, in dedup's row order (one source)."""
    texts = read_named(root / "data" / "ingest", "docs").column("text").to_pylist()
    return [hashlib.md5(text.encode()).hexdigest() for text in texts]


def test_a_batch_of_new_files_is_read_and_signed_alone_and_gives_the_from_scratch_bytes(tmp_path, corpus, monkeypatch):
    raw, rng, files = corpus
    old_texts = {text for texts in files for text in texts}
    new_a = [words(rng) for _ in range(5)] + [last_word_changed(files[1][4])]
    new_b = [words(rng) for _ in range(3)] + [files[2][7]]  # an exact copy of an indexed text: nothing to sign
    write_file(raw, "part3.jsonl", new_a)
    write_file(raw, "part4.jsonl", new_b)
    computed = []
    real = DocSignatures._compute

    def counted(docs, left, right, num_proc):
        computed.extend(zip(left.tolist(), right.tolist()))
        return real(docs, left, right, num_proc)

    monkeypatch.setattr(DocSignatures, "_compute", counted)
    after, logged = run_both(tmp_path / "inc", raw)
    old_md5 = {hashlib.md5(text.encode()).hexdigest() for text in old_texts}
    docs_md5 = ingest_texts_md5(tmp_path / "inc")
    # every exact Jaccard computed involves a new text: those between indexed texts come from the index
    assert computed and all(docs_md5[i] not in old_md5 or docs_md5[j] not in old_md5 for i, j in computed)
    assert logged["ingest"]["incremental"] == {"units_read": 2, "units_cached": 3, "shards_written": 2}
    assert logged["dedup"]["dedup.mode"] == "incremental"
    assert logged["dedup"]["incremental"]["docs_signed"] == 9  # 5 + 1 + 3 new texts; the copy is not signed
    assert logged["dedup"]["dedup.reason"] == "32 of 41 docs found in the index"
    assert after["dedup"]["all"]["near_duplicates"] == 2 and after["dedup"]["all"]["exact_duplicates"] == 2
    assert_equals_from_scratch(tmp_path, raw, after)


def test_an_edited_and_a_removed_file_leave_every_output(tmp_path, corpus):
    raw, rng, files = corpus
    edited = files[1][:3] + [words(rng)] + files[1][4:]  # line 4 of part1 gets a new text
    write_file(raw, "part1.jsonl", edited)
    (raw / "part2.jsonl").unlink()
    after, logged = run_both(tmp_path / "inc", raw)
    assert logged["ingest"]["incremental"] == {"units_read": 1, "units_cached": 1, "shards_written": 1}
    assert logged["dedup"]["dedup.mode"] == "incremental" and logged["dedup"]["incremental"]["docs_signed"] == 1
    assert_equals_from_scratch(tmp_path, raw, after)
    data = b"".join(outputs(tmp_path / "inc").values()) + b"".join(every_file(tmp_path / "inc").values())
    gone = [files[1][3]] + files[2]  # the old text of the edited line and the removed file's texts
    assert not any(text.encode() in data for text in gone)
    assert b"part2.jsonl" not in data and after["ingest"]["totals"]["docs_in"] == 21
    cached = sorted(p.suffix for p in (tmp_path / "inc" / "data" / "ingest_cache" / "docs").iterdir())
    assert cached == [".arrow", ".arrow", ".crc", ".crc", ".parquet", ".parquet"]  # per file: records, shard, check


def test_a_longer_copy_arriving_becomes_the_kept_row_as_from_scratch(tmp_path, corpus):
    raw, _, files = corpus
    first = tmp_path / "inc" / "data" / "dedup" / "clusters.jsonl"
    before = [json.loads(line) for line in first.read_text().splitlines()]
    # line 10 of part2 is kept: "changed" is longer than the word it replaced (at most 4 characters)
    assert [r["kept"] for r in before] == [{"task": "docs:part0.jsonl:1"}, {"task": "docs:part2.jsonl:10"}]
    write_file(raw, "part3.jsonl", [files[1][2] + " three more words"])  # 56 of 59 shingles: Jaccard 0.95
    after, _ = run_both(tmp_path / "inc", raw)
    records = [json.loads(line) for line in first.read_text().splitlines()]
    longer = next(r for r in records if r["size"] == 2 and r["cluster_id"] == "docs:part3.jsonl:1")
    assert longer["kept"] == {"task": "docs:part3.jsonl:1"}  # the longer new row, not the indexed one
    assert {m["doc_id"]: m["kind"] for m in longer["members"]} == {
        "docs:part3.jsonl:1": "kept",
        "docs:part1.jsonl:3": "near",
    }
    assert_equals_from_scratch(tmp_path, raw, after)


def segment_inodes(root: Path) -> dict[str, int]:
    """{segment tag: inode of its signatures file} of the dedup index under ``root``."""
    index = root / "data" / "dedup_index"
    return {p.name.split("-", 1)[1]: p.stat().st_ino for p in index.glob("signatures-*.npy")}


def test_each_night_appends_one_segment_and_a_shrunk_segment_is_rewritten(tmp_path, corpus):
    raw, rng, _ = corpus
    first = segment_inodes(tmp_path / "inc")
    assert len(first) == 1
    for night in (3, 4):
        write_file(raw, f"part{night}.jsonl", [words(rng) for _ in range(4)])
        after, logged = run_both(tmp_path / "inc", raw)
        assert logged["dedup"]["incremental"]["docs_signed"] == 4
        assert_equals_from_scratch(tmp_path, raw, after)
    segments = segment_inodes(tmp_path / "inc")
    assert len(segments) == 3 and all(segments[tag] == inode for tag, inode in first.items())  # linked, not written
    entries = pq.read_table(tmp_path / "inc" / "data" / "dedup_index" / "entries.parquet")
    assert sorted(entries.column("segment").value_counts().to_pylist(), key=lambda c: c["counts"])[0]["counts"] == 4
    for name in ("part0.jsonl", "part1.jsonl"):  # 20 of the first segment's 30 texts leave the corpus
        (raw / name).unlink()
    after, logged = run_both(tmp_path / "inc", raw)
    assert logged["dedup"]["incremental"]["docs_signed"] == 0
    assert_equals_from_scratch(tmp_path, raw, after)
    rewritten = segment_inodes(tmp_path / "inc")
    assert len(rewritten) == 3 and not set(first) & set(rewritten)  # its 10 live texts moved to a new segment
    _, logged = run_both(tmp_path / "inc", raw)  # and read back from there
    assert logged["dedup"]["dedup.mode"] == "incremental" and logged["dedup"]["incremental"]["docs_signed"] == 0


def test_nothing_new_reads_and_signs_nothing_and_rewrites_the_same_bytes(tmp_path, corpus):
    raw, _, _ = corpus
    before = every_file(tmp_path / "inc")
    _, logged = run_both(tmp_path / "inc", raw)
    assert logged["ingest"]["incremental"] == {"units_read": 0, "units_cached": 3, "shards_written": 0}
    assert logged["dedup"]["incremental"]["docs_signed"] == 0
    assert every_file(tmp_path / "inc") == before  # with the cache and the index: a forced DVC rerun is a no-op


def test_signing_params_force_a_full_recompute_and_other_params_do_not(tmp_path, corpus):
    raw, rng, _ = corpus
    write_file(raw, "part3.jsonl", [words(rng)])
    after, logged = run_both(tmp_path / "inc", raw, seed=7)
    assert logged["dedup"]["dedup.mode"] == "full" and logged["dedup"]["incremental"]["docs_signed"] == 31
    assert logged["dedup"]["dedup.reason"] == "the cache fingerprint changed (seed)"
    assert_equals_from_scratch(tmp_path, raw, after, seed=7)
    again, logged = run_both(tmp_path / "inc", raw, seed=7, threshold=0.5)
    assert logged["dedup"]["dedup.mode"] == "incremental" and logged["dedup"]["incremental"]["docs_signed"] == 0
    assert_equals_from_scratch(tmp_path, raw, again, seed=7, threshold=0.5)
    _, logged = run_both(tmp_path / "inc", raw, ingest_incremental=False, seed=7, incremental=False)
    assert logged["ingest"]["incremental"] == {"units_read": 4, "units_cached": 0, "shards_written": 4}
    assert logged["dedup"]["dedup.reason"] == "dedup.incremental: false"
    assert logged["dedup"]["incremental"]["docs_signed"] == 31


def damage(index: Path, how: str, other: Path) -> None:
    """Break the dedup index at ``index`` one way (``other``: an index of a different corpus)."""
    arrays = {p.name.split("-")[0]: p for p in index.glob("*.npy")}
    if how.startswith("truncate "):
        path = index / how.split()[1] if how.split()[1].endswith(".parquet") else arrays[how.split()[1]]
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    elif how == "empty signatures":  # e.g. a full disk
        arrays["signatures"].write_bytes(b"")
    elif how == "entries of another index":
        shutil.copy(other / "entries.parquet", index / "entries.parquet")
    elif how == "arrays of another index":  # copied over under the names this index's entries give
        for old in arrays.values():
            shutil.copy(next(other.glob(f"{old.name.split('-')[0]}-*.npy")), old)
    elif how == "signatures changed in place":  # same shape, other values (a bit flip, another corpus' rows)
        values = np.load(arrays["signatures"])
        np.save(arrays["signatures"], values ^ np.uint32(1))
    elif how == "an entry outside its segment":
        entries = pq.read_table(index / "entries.parquet")
        at = entries.schema.get_field_index("signature_row")
        rows = entries.column(at).to_numpy().copy()
        rows[0] = 10**6
        pq.write_table(entries.set_column(at, "signature_row", pa.array(rows)), index / "entries.parquet")
    elif how == "no fingerprint":
        stripped = pq.read_table(index / "entries.parquet").replace_schema_metadata(None)
        pq.write_table(stripped, index / "entries.parquet")


@pytest.mark.parametrize(
    "how",
    [
        "truncate signatures",
        "empty signatures",
        "truncate shingles",
        "truncate entries.parquet",
        "entries of another index",
        "arrays of another index",
        "signatures changed in place",
        "an entry outside its segment",
        "no fingerprint",
    ],
)
def test_a_damaged_or_mixed_index_is_recomputed_in_full_and_says_which_file(tmp_path, corpus, how):
    raw, rng, _ = corpus
    other = tmp_path / "other"
    (other / "raw").mkdir(parents=True)
    write_file(other / "raw", "part0.jsonl", [words(rng) for _ in range(12)])
    run_both(other, other / "raw")
    damage(tmp_path / "inc" / "data" / "dedup_index", how, other / "data" / "dedup_index")
    write_file(raw, "part3.jsonl", [words(rng)])
    after, logged = run_both(tmp_path / "inc", raw)
    if how == "arrays of another index":  # same names, so only the shapes can tell (a shorter corpus here)
        assert "the arrays do not fit entries.parquet" in logged["dedup"]["dedup.reason"]
    else:
        assert logged["dedup"]["dedup.mode"] == "full", logged["dedup"]["dedup.reason"]
    assert "dedup_index" in logged["dedup"]["dedup.reason"]
    assert logged["dedup"]["dedup.mode"] == "full"
    assert_equals_from_scratch(tmp_path, raw, after)
    _, logged = run_both(tmp_path / "inc", raw)  # the index written by the full run is whole again
    assert logged["dedup"]["dedup.mode"] == "incremental" and logged["dedup"]["incremental"]["docs_signed"] == 0


def test_stored_jaccards_stamped_with_another_fingerprint_are_not_used(tmp_path, corpus):
    from tasks.common.files.stamped import stamp

    raw, rng, _ = corpus
    path = tmp_path / "inc" / "data" / "dedup_index" / "jaccards.parquet"
    table = pq.read_table(path)
    wrong = table.set_column(2, "jaccard", pa.array([1.0] * table.num_rows))  # would merge every checked pair
    pq.write_table(stamp(wrong, {"seed": -1}), path)
    write_file(raw, "part3.jsonl", [words(rng)])
    after, logged = run_both(tmp_path / "inc", raw)
    assert logged["dedup"]["dedup.mode"] == "incremental" and table.num_rows > 0
    assert_equals_from_scratch(tmp_path, raw, after)


@pytest.mark.parametrize("how", ["truncated", "empty", "two entries swapped"])
def test_a_damaged_or_swapped_ingest_entry_is_read_again_and_named(tmp_path, corpus, how):
    raw, _, _ = corpus
    entries = sorted((tmp_path / "inc" / "data" / "ingest_cache" / "docs").glob("*.arrow"))
    if how == "truncated":
        entries[0].write_bytes(entries[0].read_bytes()[:1000])
    elif how == "empty":
        entries[0].write_bytes(b"")
    else:  # each file then holds the other's documents under its key
        first, second = entries[0].read_bytes(), entries[1].read_bytes()
        entries[0].write_bytes(second)
        entries[1].write_bytes(first)
    after, logged = run_both(tmp_path / "inc", raw)
    damaged = 2 if how == "two entries swapped" else 1
    assert logged["ingest"]["incremental"] == {
        "units_read": damaged,
        "units_cached": 3 - damaged,
        "shards_written": 0,
    }  # the shards are whole
    assert_equals_from_scratch(tmp_path, raw, after)


@pytest.mark.parametrize(
    "how",
    ["truncated", "removed", "fewer rows", "another unit's shard of as many rows", "edited through the output's link"],
)
def test_a_damaged_or_missing_cached_shard_is_written_again(tmp_path, corpus, how):
    raw, _, _ = corpus
    outputs_dir = tmp_path / "inc" / "data" / "ingest" / "docs"
    cached = {p.stat().st_ino: p for p in (tmp_path / "inc" / "data" / "ingest_cache" / "docs").glob("*.parquet")}
    shards = [cached[p.stat().st_ino] for p in sorted(outputs_dir.glob("*.parquet"))]  # the output links them
    assert len(shards) == 3 and all(p.stat().st_nlink == 2 for p in shards)
    if how == "truncated":
        shards[1].write_bytes(shards[1].read_bytes()[:100])
    elif how == "removed":
        shards[1].unlink()
    elif how == "fewer rows":  # a whole Parquet file, but not this unit's rows
        shutil.copy(read_named_first_rows(tmp_path), shards[1])
    elif how == "another unit's shard of as many rows":  # part1 and part2 hold 10 documents each
        shutil.copy(shards[2], shards[1])
    else:  # same rows, another label, written into the same inode
        table = pq.read_table(outputs_dir / "part-00001.parquet")
        relabelled = table.set_column(table.schema.get_field_index("label"), "label", pa.array(["b"] * table.num_rows))
        with open(outputs_dir / "part-00001.parquet", "r+b") as handle:
            handle.truncate(0)
            pq.write_table(relabelled, handle)
    after, logged = run_both(tmp_path / "inc", raw)
    assert logged["ingest"]["incremental"] == {"units_read": 0, "units_cached": 3, "shards_written": 1}
    assert_equals_from_scratch(tmp_path, raw, after)


def read_named_first_rows(tmp_path: Path) -> Path:
    """A Parquet file of the first row of the docs source (fewer rows than any unit of the corpus fixture)."""
    path = tmp_path / "one_row.parquet"
    pq.write_table(read_named(tmp_path / "inc" / "data" / "ingest", "docs").slice(0, 1), path)
    return path


def test_a_type_clash_with_a_cached_file_raises_the_from_scratch_error(tmp_path, corpus):
    raw, rng, _ = corpus
    write_file(raw, "part3.jsonl", [words(rng)], labels=[3])  # label: a number here, a string in part0-2
    with pytest.raises(SourceError) as incremental:
        run_both(tmp_path / "inc", raw)
    with pytest.raises(SourceError) as scratch:
        run_both(tmp_path / "full", raw)
    assert str(incremental.value) == str(scratch.value)
    assert "part3.jsonl:1: column 'label' is number here but string at" in str(scratch.value)


def test_a_builtin_source_is_cached_whole_and_read_again_only_when_asked(tmp_path):
    spec = {"name": "ner", "kind": "builtin", "corpus": "wnut16", "role": "task"}
    runs = []
    for incremental in (True, True, False):
        log = RecordingLog()
        metrics = ingest.run(IngestParams(sources=[spec], incremental=incremental), paths_of(tmp_path), log)
        runs.append((log.logged["incremental"], metrics, every_file(tmp_path)))
    assert [counts for counts, _, _ in runs] == [
        {"units_read": 1, "units_cached": 0, "shards_written": 1},
        {"units_read": 0, "units_cached": 1, "shards_written": 0},
        {"units_read": 1, "units_cached": 0, "shards_written": 1},
    ]
    assert runs[0][1]["totals"]["docs_out"] == 2394  # WNUT-16's sentences (tests/ingest/test_ingest.py counts them too)
    assert runs[0][1:] == runs[1][1:] == runs[2][1:]


def test_cached_units_keep_their_drops_and_max_docs_samples_over_all_of_them(tmp_path):
    """Rows of cached units stay Arrow (ingest.collect): a dropped record and the max_docs sample across a cached
    and a new file come out as a whole read's; an entry in the old Parquet format is pruned."""
    raw = tmp_path / "raw"
    raw.mkdir()
    rng = random.Random(7)
    write_file(raw, "a.jsonl", [words(rng), "   ", words(rng)])  # line 2 is blank once normalized: "empty"
    spec = {
        "name": "docs",
        "kind": "jsonl",
        "role": "task",
        "path": str(raw),
        "text_field": "text",
        "label_field": "label",
        "max_docs": 3,
    }

    def run(root, incremental):
        return ingest.run(IngestParams(sources=[spec], incremental=incremental), paths_of(root), RecordingLog())

    run(tmp_path / "inc", True)
    stale = tmp_path / "inc" / "data" / "ingest_cache" / "docs" / "0123.parquet"
    stale.write_bytes(b"old format")
    write_file(raw, "b.jsonl", [words(rng), words(rng)])
    after = run(tmp_path / "inc", True)
    assert after == run(tmp_path / "full", False)
    # 5 records: 1 empty, 4 kept, of which max_docs keeps the 3 of smallest md5 of the own id
    ids = ["a.jsonl:1", "a.jsonl:3", "b.jsonl:1", "b.jsonl:2"]
    out = sorted(sorted(ids, key=lambda own: hashlib.md5(own.encode()).hexdigest())[:3], key=ids.index)
    assert after["sources"]["docs"]["dropped"] == {"empty": 1, "max_docs": 1}
    for root in ("inc", "full"):
        rows = read_named(tmp_path / root / "data" / "ingest", "docs").column("doc_id").to_pylist()
        assert rows == [f"docs:{own}" for own in out]
    inc, full = (outputs(tmp_path / root) for root in ("inc", "full"))
    assert inc == full and [name for name in inc if name.startswith("ingest/")] == [
        "ingest/docs/part-00000.parquet",
        "ingest/docs/part-00001.parquet",
        "ingest/dropped.jsonl",
        "ingest/manifest.json",
    ]
    assert not stale.exists() and all(p.suffix in (".arrow", ".parquet", ".crc") for p in stale.parent.iterdir())


def test_raw_md5s_reads_string_and_large_string_buffers_and_slices():

    from tasks.dedup.incremental import raw_md5s

    texts = ["a", "bé", "", "ccc"]
    by_hand = [hashlib.md5(text.encode("utf-8")).hexdigest() for text in texts]
    for kind in (pa.string(), pa.large_string()):
        array = pa.array(texts, kind)
        assert raw_md5s(array) == by_hand
        assert raw_md5s(array.slice(1, 2)) == by_hand[1:3]  # a slice starts inside the offsets buffer


def test_stored_md5s_are_found_among_the_texts_or_minus_one_on_sliced_chunks():

    from tasks.dedup.incremental import _indices_in

    rng = random.Random(3)
    texts = sorted({hashlib.md5(str(i).encode()).hexdigest() for i in range(50)})
    absent = [hashlib.md5(f"gone {i}".encode()).hexdigest() for i in range(20)]
    stored = [rng.choice(texts + absent) for _ in range(300)]
    column = pa.chunked_array([pa.array(stored[:7]), pa.array(stored).slice(7, 200), pa.array(stored[207:])])
    want = [texts.index(v) if v in texts else -1 for v in stored]
    assert _indices_in(column, pa.array(texts)).tolist() == want
    assert _indices_in(pa.chunked_array([pa.array(texts[3:9])]), pa.array(texts)).tolist() == list(range(3, 9))
