"""tasks/common/files/stamped.py: Parquet files written side by side are the files a serial write gives; a persisted
table's damaged page is caught by its checksum."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tasks.common.files.stamped import read_stamped, stamp, write_cache, write_tables


def test_files_written_on_threads_have_the_bytes_of_serial_writes(tmp_path):
    tables = [
        pa.table({"doc_id": [f"s{k}:{i}" for i in range(n)], "text": ["x" * (i % 97) for i in range(n)]})
        for k, n in enumerate((0, 5, 20_000, 3_000))
    ]
    (tmp_path / "serial").mkdir()
    (tmp_path / "threads").mkdir()
    for k, table in enumerate(tables):
        pq.write_table(table, tmp_path / "serial" / f"{k}.parquet", compression="zstd")
    write_tables(((t, tmp_path / "threads" / f"{k}.parquet") for k, t in enumerate(tables)), compression="zstd")
    for k in range(len(tables)):
        assert (tmp_path / "threads" / f"{k}.parquet").read_bytes() == (
            tmp_path / "serial" / f"{k}.parquet"
        ).read_bytes()


def test_a_failed_write_raises(tmp_path):
    with pytest.raises(OSError):
        write_tables([(pa.table({"a": [1]}), tmp_path / "missing" / "a.parquet")])


def flip_a_bit_mid_file(path):
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x10  # inside the float column's one data page: the footer is a few hundred bytes
    path.write_bytes(bytes(data))


def test_a_flipped_bit_in_a_cache_page_makes_it_no_cache_where_an_unchecked_file_reads_other_values(tmp_path):
    table = stamp(pa.table({"v": np.random.default_rng(3).random(50_000)}), {"k": 1})
    write_cache(table, tmp_path / "checked.parquet")
    pq.write_table(table, tmp_path / "plain.parquet", compression="zstd")
    assert read_stamped(tmp_path / "checked.parquet", {"k": 1}).table.equals(table)
    for name in ("checked.parquet", "plain.parquet"):
        flip_a_bit_mid_file(tmp_path / name)
    plain = pq.read_table(tmp_path / "plain.parquet")  # without page CRCs the damage decodes as other numbers
    assert plain.num_rows == table.num_rows and not plain.equals(table)
    got = read_stamped(tmp_path / "checked.parquet", {"k": 1})
    assert got.table is None and "CRC checksum verification failed" in got.reason


def test_a_fingerprint_that_is_not_a_json_object_is_no_cache(tmp_path):
    table = pa.table({"v": [1]}).replace_schema_metadata({b"clozeline.fingerprint": b"[]"})
    write_cache(table, tmp_path / "foreign.parquet")
    got = read_stamped(tmp_path / "foreign.parquet", {"k": 1})
    assert got.table is None and "not a JSON object" in got.reason
