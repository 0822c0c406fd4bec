"""The split stage's reads and writes of the corpus: the facts it assigns from (``read_facts``: the
``REQUIRED_COLUMNS`` of every ``<data>/dedup/<source>.parquet``, never the texts) and the output shards
(``write_shards``: each input shard streamed through, ``BLOCK_ROWS`` rows at a time, the kept rows with ``split``
and ``split_group`` appended, from a ``Placement``: codes a row), so the driver never holds a source's texts or token
lists, and while it writes, no string a row.

A source of at most ``BLOCK_ROWS`` rows and ``BLOCK_BYTES`` is written as one table (one row group: the bytes of a
whole-table ``pq.write_table``); a larger one in a row group per block of rows that keeps any.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tasks.common.files.ioerrors import reading, writing
from tasks.common.files.shards import check_manifest
from tasks.split.assign import SPLITS_OF_ROLE

REQUIRED_COLUMNS = ("doc_id", "source", "role", "label", "group", "meta", "cluster_id", "is_duplicate")
#: Rows read, given their split and written at once (one row group): about 35 MB of text at 2 KB a doc. The reader
#: decodes the input a row group at a time (``pre_buffer`` off: not its every column chunk at once), so the peak is
#: bounded by the input's row groups (dedup's) and this block, never by the corpus.
BLOCK_ROWS = 16_384
#: ... or at most about this many bytes of Arrow data (a block ends at the first ``READ_ROWS`` batch past it)
BLOCK_BYTES = 64 * 2**20
READ_ROWS = 1_024


def source_files(folder: Path) -> dict[str, Path]:
    """``{source: <folder>/<source>.parquet}``, sorted by file name. Raises ``FileNotFoundError`` when there is
    none, ``ValueError`` naming a file dedup wrote (``<folder>/manifest.json``) that is missing."""
    check_manifest(folder, "dedup")  # a deleted <source>.parquet would be a source left out, without an error
    files = sorted(Path(folder).glob("*.parquet"))
    if not files:
        raise FileNotFoundError(f"{folder}: no <source>.parquet files (run the dedup stage first)")
    return {file.stem: file for file in files}


def read_facts(files: dict[str, Path]) -> Iterator[pa.Table]:
    """The ``REQUIRED_COLUMNS`` of each file, one table a row group, in file and row order (Arrow; texts and token
    lists are left on disk and only streamed by ``write_shards``): a consumer that converts each table before the
    next is read never holds the whole corpus in Arrow too (~210 B a row). Raises ``ValueError`` naming the file
    for a missing column or role, or one that cannot be read (``ioerrors.DamagedFile``)."""
    for file in files.values():
        with reading(file), pq.ParquetFile(file) as parquet:  # read_table builds a dataset: slower for one file
            missing = [c for c in REQUIRED_COLUMNS if c not in parquet.schema_arrow.names]
            if missing:
                raise ValueError(f"{file}: missing column(s) {missing}")
            for row_group in range(max(parquet.metadata.num_row_groups, 1)):
                yield checked_roles(file, read_group(parquet, row_group))


def read_group(parquet: pq.ParquetFile, row_group: int) -> pa.Table:
    """Row group ``row_group``'s ``REQUIRED_COLUMNS`` (an empty table for a file without row groups); one thread:
    pages freed by another thread's heap are not returned by ``release_unused`` (``heap.give_back_freed_memory``)."""
    if parquet.metadata.num_row_groups == 0:
        return parquet.schema_arrow.empty_table().select(list(REQUIRED_COLUMNS))
    return parquet.read_row_group(row_group, columns=list(REQUIRED_COLUMNS), use_threads=False)


def checked_roles(file: Path, table: pa.Table) -> pa.Table:
    """``table``; raises ``ValueError`` naming ``file`` when a role is not one of ``SPLITS_OF_ROLE``."""
    bad_role = sorted(set(pc.unique(table.column("role")).to_pylist()) - set(SPLITS_OF_ROLE))
    if bad_role:
        raise ValueError(f"{file}: unknown role(s) {bad_role}; expected one of {sorted(SPLITS_OF_ROLE)}")
    return table


def read_tags(file: Path) -> pa.ChunkedArray | None:
    """The ``tags`` column of ``file`` when it has a list-typed one, else None (read alone)."""
    with reading(file), pq.ParquetFile(file) as parquet:
        if "tags" not in parquet.schema_arrow.names or not pa.types.is_list(parquet.schema_arrow.field("tags").type):
            return None
        return parquet.read(columns=["tags"]).column("tags")


@dataclass(frozen=True)
class Placement:
    """Where every input row goes (every file's rows one after another): ``split``, the code of its split in
    ``splits`` (``(rows,)`` int8; -1: not written), and ``group``, the code of its ``split_group`` in ``names``
    (``(rows,)`` int64). Codes, not a string object a row: ~16 B a row for both, the names once."""

    split: np.ndarray
    splits: pa.Array
    group: np.ndarray
    names: pa.Array

    def part(self, start: int, stop: int) -> Placement:
        """Rows ``start`` to ``stop`` (views)."""
        return Placement(self.split[start:stop], self.splits, self.group[start:stop], self.names)

    def columns(self, kept: np.ndarray) -> tuple[pa.Array, pa.Array]:
        """The ``split`` and ``split_group`` strings (``pa.string()``) of the rows where ``kept`` (a mask)."""
        split = self.splits.take(pa.array(self.split[kept]))
        return split, self.names.take(pa.array(self.group[kept])).cast(pa.string())


def write_shards(files: dict[str, Path], placement: Placement, out_dir: Path) -> None:
    """``<out_dir>/<source>.parquet`` for each input file: its rows in order, those ``placement`` writes kept, with
    ``split`` and ``split_group`` appended; one file after another (two side by side held both files' row groups
    and blocks at once: ~700 against ~500 MiB at 110k docs)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    start = 0
    for source, file in files.items():
        with reading(file):
            rows = pq.ParquetFile(file).metadata.num_rows
        write_shard(file, placement.part(start, start + rows), out_dir / f"{source}.parquet")
        start += rows


def write_shard(file: Path, placement: Placement, out: Path) -> None:
    """One source's output (``write_shards``), read and written ``BLOCK_ROWS`` rows at a time (``blocks``). Out of
    room: ``ioerrors.NoRoom`` naming ``out``; a damaged input: ``ioerrors.DamagedFile`` naming ``file``."""
    with reading(file), pq.ParquetFile(file, pre_buffer=False) as parquet, writing(out):
        schema = parquet.schema_arrow.append(pa.field("split", pa.string()))
        schema = schema.append(pa.field("split_group", pa.string()))
        with pq.ParquetWriter(out, schema) as writer:
            start, written = 0, False
            for block in blocks(parquet):
                own = placement.part(start, start + block.num_rows)
                start += block.num_rows
                kept = own.split >= 0
                if not kept.any():
                    continue
                split, group = own.columns(kept)
                part = block if kept.all() else block.filter(pa.array(kept))
                writer.write_table(part.append_column("split", split).append_column("split_group", group))
                written = True
            if not written:  # as a whole-table write of no rows: one empty row group
                writer.write_table(schema.empty_table())


def blocks(parquet: pq.ParquetFile) -> Iterator[pa.Table]:
    """The file's rows in order as tables of ``BLOCK_ROWS`` rows, or fewer where ``BLOCK_BYTES`` of Arrow data
    come first (long documents) and at the end; read a row group at a time, ``READ_ROWS`` rows at once. One
    ``iter_batches`` over every row group held more of the file as it went (1.4 GiB for a file of 950k rows in 427
    row groups, against 0.16 GiB a row group at a time), and 16,384 Wikipedia articles are ~0.5 GB of text."""
    held: list[pa.RecordBatch] = []
    rows = size = 0
    for row_group in range(parquet.metadata.num_row_groups):
        for batch in parquet.iter_batches(batch_size=READ_ROWS, row_groups=[row_group]):
            held.append(batch)
            rows, size = rows + batch.num_rows, size + batch.nbytes
            if rows >= BLOCK_ROWS or size >= BLOCK_BYTES:
                table = pa.Table.from_batches(held)
                cut = min(rows, BLOCK_ROWS)
                yield table.slice(0, cut).combine_chunks()  # one chunk: the pages a whole-table write makes
                held, rows = table.slice(cut).to_batches(), rows - cut
                size = sum(batch.nbytes for batch in held)
    if rows:
        yield pa.Table.from_batches(held).combine_chunks()
