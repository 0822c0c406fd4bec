"""tasks.common.files.shards: how readers list and read a stage's per-source output, one file or a folder of shards."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tasks.common.files.shards import file_crc32, linked_or_copied, read_named, read_source, source_files


def write(path, ids):
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"doc_id": pa.array(ids, pa.string())}), path)


def test_sources_are_files_or_folders_of_shards_in_name_order(tmp_path):
    write(tmp_path / "b" / "part-00001.parquet", ["b3"])
    write(tmp_path / "b" / "part-00000.parquet", ["b1", "b2"])
    write(tmp_path / "a.parquet", ["a1"])
    (tmp_path / "c").mkdir()  # a folder with no shard: a source of no file
    (tmp_path / "dropped.jsonl").write_text("")
    write(tmp_path / ".b.tmp" / "part-00000.parquet", ["half-written"])  # a stage's temporary folder
    (tmp_path / "b" / "notes.txt").write_text("not a shard")
    files = source_files(tmp_path)
    assert list(files) == ["a", "b", "c"]
    assert [p.name for p in files["b"]] == ["part-00000.parquet", "part-00001.parquet"] and files["c"] == []
    assert read_named(tmp_path, "b").column("doc_id").to_pylist() == ["b1", "b2", "b3"]
    assert read_named(tmp_path, "a").column("doc_id").to_pylist() == ["a1"]
    schema = pa.schema([("doc_id", pa.string())])
    assert read_source(files["c"], schema).schema == schema and read_source(files["c"], schema).num_rows == 0


def test_a_source_written_twice_or_shards_of_other_columns_are_named(tmp_path):
    write(tmp_path / "a.parquet", ["a1"])
    write(tmp_path / "a" / "part-00000.parquet", ["a2"])
    with pytest.raises(ValueError, match=r"a\.parquet: source 'a' is also written as .*/a$"):
        source_files(tmp_path)
    (tmp_path / "a.parquet").unlink()
    pq.write_table(pa.table({"other": [1]}), tmp_path / "a" / "part-00001.parquet")
    with pytest.raises(ValueError, match=r"part-00001\.parquet: columns \['other'\] differ from .*part-00000"):
        read_named(tmp_path, "a")


def test_linked_or_copied_links_and_copies_where_links_fail(tmp_path, monkeypatch):
    write(tmp_path / "src.parquet", ["x"])
    linked_or_copied(tmp_path / "src.parquet", tmp_path / "link.parquet")
    assert os.path.samefile(tmp_path / "src.parquet", tmp_path / "link.parquet")

    def no_links(*_):
        raise PermissionError("no hard links here")

    monkeypatch.setattr(os, "link", no_links)
    linked_or_copied(tmp_path / "src.parquet", tmp_path / "copy.parquet")
    assert not os.path.samefile(tmp_path / "src.parquet", tmp_path / "copy.parquet")
    assert (tmp_path / "copy.parquet").read_bytes() == (tmp_path / "src.parquet").read_bytes()


def test_file_crc32_is_zlibs_crc_of_the_whole_file_whatever_the_block(tmp_path):
    import zlib

    data = bytes(range(256)) * 41 + b"tail"
    (tmp_path / "f").write_bytes(data)
    assert {file_crc32(tmp_path / "f", block) for block in (1, 7, 4096, 1 << 22)} == {zlib.crc32(data)}
    (tmp_path / "empty").write_bytes(b"")
    assert file_crc32(tmp_path / "empty") == 0
