"""tasks/common/stamped.py: Parquet files written side by side are the files a serial write gives."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tasks.common.stamped import write_tables


def test_files_written_on_threads_have_the_bytes_of_serial_writes(tmp_path):
    tables = [pa.table({"doc_id": [f"s{k}:{i}" for i in range(n)], "text": ["x" * (i % 97) for i in range(n)]})
              for k, n in enumerate((0, 5, 20_000, 3_000))]  # fmt: skip
    (tmp_path / "serial").mkdir()
    (tmp_path / "threads").mkdir()
    for k, table in enumerate(tables):
        pq.write_table(table, tmp_path / "serial" / f"{k}.parquet", compression="zstd")
    write_tables(((t, tmp_path / "threads" / f"{k}.parquet") for k, t in enumerate(tables)), compression="zstd")
    for k in range(len(tables)):
        assert (tmp_path / "threads" / f"{k}.parquet").read_bytes() == (tmp_path / "serial" / f"{k}.parquet").read_bytes()


def test_a_failed_write_raises(tmp_path):
    with pytest.raises(OSError):
        write_tables([(pa.table({"a": [1]}), tmp_path / "missing" / "a.parquet")])
