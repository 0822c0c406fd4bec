"""dedup's input: every row of every ingest source, checked (``read_corpus``; the stage is
``tasks/dedup/__init__.py``)."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tasks.common.files.ioerrors import reading
from tasks.common.files.shards import check_manifest, read_source, source_files

ROLE_RANK = {"task": 0, "pretrain": 1}  # the roles a row may have, in keep order (task rows are kept first)
REQUIRED_COLUMNS = ("doc_id", "source", "role", "text", "label")
FACT_COLUMNS = ("doc_id", "role", "label", "tags", "group")  # what the driver reads of a row without its text


class Strings(Sequence):
    """A read-only sequence over an Arrow string array (``array``): item ``i`` is its Python ``str``, made when
    read (a list of them costs ~70 bytes a row; the dedup driver reads only the ids of rows in clusters)."""

    def __init__(self, array: pa.Array) -> None:
        self.array = array

    def __len__(self) -> int:
        return len(self.array)

    def __getitem__(self, i):  # an int only (Sequence allows slices; nothing here asks for one)
        return self.array[int(i)].as_py()

    def __iter__(self):
        for start in range(0, len(self.array), 65_536):
            yield from self.array.slice(start, 65_536).to_pylist()


@dataclass
class Corpus:
    """All rows of all sources, in file order (sources sorted by file name). ``read_corpus`` keeps the texts as
    Arrow arrays (``text_chunks``, ``texts_at``); they are not read at all when the corpus was read
    without texts (``engine: ray`` signs and writes the texts on the workers; the driver never holds them).
    ``source``, ``role`` and ``label`` hold one Python object per distinct value (a list costs 8 bytes a row);
    ``tags`` and ``group``, read only for a few rows, stay Arrow arrays (``tags_at``, ``group_at``)."""

    files: dict[str, list[Path]]  # source -> its ingest files in row order (``tasks.common.files.shards``)
    doc_id: Strings
    source: list[str]
    role: list[str]
    label: list[str | None]
    tags: pa.Array = field(default_factory=lambda: pa.nulls(0, TAGS))  # (rows,) IOB2 tags of token rows, else null
    group: pa.Array = field(default_factory=lambda: pa.nulls(0, pa.large_string()))  # (rows,) or null
    text_chunks: list[pa.Array] = field(default_factory=list)  # read_corpus: the texts as Arrow
    tables: dict[str, pa.Table] = field(default_factory=dict)  # source -> its ingest table, when read with text
    rows: dict[str, int] = field(default_factory=dict)  # source -> its number of rows

    def texts_at(self, rows: np.ndarray) -> pa.Array:
        """The texts of ``rows`` (``(n,)`` int64, ascending) as one Arrow ``large_string`` array, gathered chunk by
        chunk: a ``take`` on the chunked array joins every chunk first (~0.4 s for 180 MB of text)."""
        bounds = np.cumsum([0] + [len(chunk) for chunk in self.text_chunks])
        cuts = np.searchsorted(rows, bounds)
        parts = [
            chunk.take(int64s(rows[lo:hi] - start)).cast(pa.large_string())
            for chunk, start, lo, hi in zip(self.text_chunks, bounds, cuts, cuts[1:])
        ]
        return pa.concat_arrays([pa.nulls(0, pa.large_string())] + parts)

    def tags_at(self, rows) -> list[list[str] | None]:
        """The ``tags`` of ``rows`` (row indices) as Python lists (None: no tags)."""
        return self.tags.take(int64s(np.asarray(rows, np.int64))).to_pylist()

    def group_at(self, rows) -> list[str | None]:
        """The ``group`` of ``rows`` (row indices)."""
        return self.group.take(int64s(np.asarray(rows, np.int64))).to_pylist()


TAGS = pa.large_list(pa.large_string())


def int64s(values: np.ndarray) -> pa.Array:
    """``values`` as an Arrow int64 array over the same bytes (``pa.array`` of numpy imports pandas)."""
    values = np.ascontiguousarray(values, np.int64)
    return pa.Array.from_buffers(pa.int64(), len(values), [None, pa.py_buffer(values)])


def read_corpus(in_dir: Path, with_text: bool = True) -> Corpus:
    """Read every source in ``in_dir`` (``<source>.parquet`` or a folder of shards, ``shards.source_files``; sorted);
    an empty folder gives an empty corpus. ``with_text``: keep each table (its texts are signed, and it is
    written back with the labels); else only the row facts, ``FACT_COLUMNS`` (a null text is found from the
    Parquet statistics), one file in memory at a time.

    Raises ``FileNotFoundError`` for a missing folder, ``ValueError`` naming the file for bad rows, and naming the
    shards ingest wrote (``<in_dir>/manifest.json``, ``shards.check_manifest``) that are missing.
    """
    if not in_dir.is_dir():
        raise FileNotFoundError(f"{in_dir}: ingest output folder not found (run the ingest stage first)")
    check_manifest(in_dir, "ingest")  # a deleted shard would be read as fewer documents, without an error
    corpus = Corpus({}, Strings(pa.nulls(0, pa.large_string())), [], [], [])
    ids, tags, groups, named = [], [], [], []
    for name, files in source_files(in_dir).items():
        path = files[0] if len(files) == 1 else in_dir / name  # what an error names
        table = read_source(files) if with_text else _facts(files)
        columns = _checked_columns(path, table, None if with_text else functools.partial(_first_null_text, files))
        corpus.files[name], corpus.rows[name] = files, table.num_rows
        ids.append(columns["doc_id"])
        named.append(path)
        corpus.source += [name] * table.num_rows
        corpus.role += columns["role"]
        if with_text:  # the texts are held anyway: the whole table costs little more, and is not read twice
            corpus.text_chunks += table.column("text").chunks
            corpus.tables[name] = table
        corpus.label += columns["label"]
        # tags and group are read when present: the row contract has them, older test files may not
        tags.append(_optional(table, "tags", TAGS))
        groups.append(_optional(table, "group", pa.large_string()))
    corpus.doc_id = Strings(_check_unique(ids, named))
    corpus.tags = pa.concat_arrays([pa.nulls(0, TAGS)] + tags)
    corpus.group = pa.concat_arrays([pa.nulls(0, pa.large_string())] + groups)
    # else Arrow's pool (mimalloc) keeps the pages the reads freed to the end of the stage
    pa.default_memory_pool().release_unused()
    return corpus


def _facts(files: list[Path]) -> pa.Table:
    """A source's ``FACT_COLUMNS``, shard after shard (``read_source`` without the texts, tokens and meta; the
    other required columns stand in as nulls). Raises
    ``ValueError`` naming the first shard whose columns differ from the first one's."""
    schemas = [pq.read_schema(path) for path in files]
    for path, schema in zip(files[1:], schemas[1:]):
        if not schema.equals(schemas[0], check_metadata=False):
            raise ValueError(f"{path}: columns {schema.names} differ from {files[0]}'s {schemas[0].names}")
    names = [name for name in schemas[0].names if name in FACT_COLUMNS] if schemas else []
    tables = []
    for path in files:
        with reading(path), pq.ParquetFile(path, page_checksum_verification=True) as parquet:
            # one thread: pages freed by another thread's heap are not returned by release_unused
            tables.append(parquet.read(columns=names, use_threads=False))
    if not tables:
        return pa.Table.from_batches([], pa.schema([]))
    table = pa.concat_tables(tables)
    for name in (name for name in REQUIRED_COLUMNS if name in schemas[0].names and name not in names):
        table = table.append_column(name, pa.nulls(table.num_rows, pa.string()))  # stands in, for the checks
    return table


def _first_null_text(files: list[Path]) -> int | None:
    """The source row of the first null ``text`` in ``files`` (None: none, or no such column), from each row
    group's null count; a row group without one is read."""
    at = 0
    for path in files:
        with reading(path), pq.ParquetFile(path) as parquet:
            meta = parquet.metadata
            column = next((k for k in range(meta.num_columns) if meta.schema.column(k).path == "text"), None)
            if column is None:
                return None
            for g in range(meta.num_row_groups):
                stats = meta.row_group(g).column(column).statistics
                if stats is None or not stats.has_null_count or stats.null_count:
                    texts = parquet.read_row_group(g, columns=["text"]).column(0)
                    if texts.null_count:
                        return at + pc.index(pc.is_null(texts), True).as_py()
                at += meta.row_group(g).num_rows
    return None


def _optional(table: pa.Table, name: str, kind: pa.DataType) -> pa.Array:
    """Column ``name`` as one ``kind`` array (nulls when the table has none)."""
    if name not in table.column_names:
        return pa.nulls(table.num_rows, kind)
    return pa.concat_arrays([pa.nulls(0, kind)] + [chunk.cast(kind) for chunk in table.column(name).chunks])


def _check_unique(ids: list[pa.Array], paths: list[Path]) -> pa.Array:
    """Every doc_id of ``ids`` (each source's, read from ``paths``) as one ``large_string`` array. Raises
    ``ValueError`` naming the first row (in file order) whose ``doc_id`` an earlier row has, and the file of
    that earlier row."""
    every = pa.concat_arrays([pa.nulls(0, pa.large_string())] + [chunk.cast(pa.large_string()) for chunk in ids])
    if len(every) < 2:
        return every
    order = pc.sort_indices(every).to_numpy()  # stable: equal ids stay in row order
    ordered = every.take(order)
    same = pc.equal(ordered.slice(1), ordered.slice(0, len(ordered) - 1)).to_numpy(zero_copy_only=False)
    if not same.any():
        return every
    at = int(np.flatnonzero(order == order[1:][same].min())[0])  # the sorted place of the first repeated row
    starts = np.flatnonzero(np.r_[True, ~same])
    first = order[starts[np.searchsorted(starts, at, side="right") - 1]]  # the first row of that id
    row = int(order[at])
    source_of = np.searchsorted(np.cumsum([len(chunk) for chunk in ids]), [row, first], side="right")
    doc_id = every[row].as_py()
    raise ValueError(f"{paths[source_of[0]]}: doc_id {doc_id!r} already seen in {paths[source_of[1]]}")


def _checked_columns(path: Path, table: pa.Table, null_text=None) -> dict:
    """The row facts of one ingest file (``doc_id`` as Arrow; ``role`` and ``label`` as lists of one object per
    distinct value), checked. ``null_text()``: the row of the first null text (None: none), for a table read
    without its texts."""
    missing = [name for name in REQUIRED_COLUMNS if name not in table.column_names]
    if missing:
        raise ValueError(f"{path}: missing column(s) {missing}; ingest rows need {list(REQUIRED_COLUMNS)}")
    for name in ("doc_id", "text", "role"):
        first = null_text() if name == "text" and null_text else _first_null(table.column(name))
        if first is not None:
            raise ValueError(f"{path}: row {first} has a null {name}")
    columns = {"doc_id": table.column("doc_id").combine_chunks()}
    columns.update({name: _shared(table.column(name)) for name in ("role", "label")})
    unknown = sorted(set(columns["role"]) - set(ROLE_RANK))
    if unknown:
        raise ValueError(f"{path}: unknown role(s) {unknown}; expected one of {sorted(ROLE_RANK)}")
    return columns


def _first_null(column: pa.ChunkedArray) -> int | None:
    """The row of the column's first null (None: none)."""
    return pc.index(pc.is_null(column), True).as_py() if column.null_count else None


def _shared(column: pa.ChunkedArray) -> list:
    """The column's values as a list holding one Python object per distinct value (``to_pylist`` makes one a
    row: 50 bytes or more a row for a role or a label)."""
    if not len(column):
        return []
    encoded = column.combine_chunks().dictionary_encode()
    values = np.array(encoded.dictionary.to_pylist() + [None], dtype=object)
    codes = encoded.indices.fill_null(len(encoded.dictionary)).to_numpy()
    return values[codes].tolist()


def text_bytes_stored(ingest_dir: Path) -> int:
    """The uncompressed bytes of the ``text`` column of every ingest file under ``ingest_dir``, from the Parquet
    footers alone (the texts' UTF-8 bytes plus 4 a text, page headers and any min/max statistics: an estimate for
    ``signing.preload``'s threshold); 0 for a missing folder, file or column, and for a
    file that is not Parquet, which ``read_corpus`` then reports."""
    total = 0
    for files in source_files(ingest_dir).values():
        for path in files:
            try:
                meta = pq.ParquetFile(path).metadata
            except (OSError, pa.ArrowException):  # read_corpus names the file and what is wrong with it
                continue
            names = [meta.schema.column(k).name for k in range(meta.num_columns)]
            if "text" in names:
                at = names.index("text")
                total += sum(meta.row_group(g).column(at).total_uncompressed_size for g in range(meta.num_row_groups))
    return total
