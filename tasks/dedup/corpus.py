"""dedup's input: every row of every ingest source, checked (``read_corpus``; the stage is
``tasks/dedup/__init__.py``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tasks.common.files.shards import check_manifest, read_source, source_files

ROLE_RANK = {"task": 0, "pretrain": 1}  # the roles a row may have, in keep order (task rows are kept first)
REQUIRED_COLUMNS = ("doc_id", "source", "role", "text", "label")
OPTIONAL_COLUMNS = ("tags", "group")  # read when present: the row contract has them, older test files may not


@dataclass
class Corpus:
    """All rows of all sources, in file order (sources sorted by file name). ``read_corpus`` keeps the texts as
    Arrow arrays (``text_chunks``; ``texts()`` joins them) and leaves ``text`` empty; neither is filled when the
    corpus was read without texts (``engine: ray`` signs the texts on the workers; the driver never holds them)."""

    files: dict[str, list[Path]]  # source -> its ingest files in row order (``tasks.common.files.shards``)
    doc_id: list[str]
    source: list[str]
    role: list[str]
    text: list[str]
    label: list[str | None]
    tags: list[list[str] | None] = field(default_factory=list)  # IOB2 tags of token rows, else None
    group: list[str | None] = field(default_factory=list)
    text_chunks: list[pa.Array] = field(default_factory=list)  # read_corpus: the texts as Arrow (``text`` empty)
    tables: dict[str, pa.Table] = field(default_factory=dict)  # source -> its ingest table, when read with text

    def texts(self) -> list[str] | pa.Array:
        """Every text, as read: one Arrow ``large_string`` array (no Python string per text), else ``text``."""
        if not self.text_chunks:
            return self.text
        return pa.concat_arrays([chunk.cast(pa.large_string()) for chunk in self.text_chunks])

    def texts_at(self, rows: np.ndarray) -> pa.Array:
        """The texts of ``rows`` (``(n,)`` int64, ascending) as one Arrow ``large_string`` array, gathered chunk by
        chunk: a ``take`` on the chunked array joins every chunk first (~0.4 s for 180 MB of text)."""
        bounds = np.cumsum([0] + [len(chunk) for chunk in self.text_chunks])
        cuts = np.searchsorted(rows, bounds)
        parts = [
            chunk.take(_int64s(rows[lo:hi] - start)).cast(pa.large_string())
            for chunk, start, lo, hi in zip(self.text_chunks, bounds, cuts, cuts[1:])
        ]
        return pa.concat_arrays([pa.nulls(0, pa.large_string())] + parts)


def _int64s(values: np.ndarray) -> pa.Array:
    """``values`` as an Arrow int64 array over the same bytes (``pa.array`` of numpy imports pandas)."""
    values = np.ascontiguousarray(values, np.int64)
    return pa.Array.from_buffers(pa.int64(), len(values), [None, pa.py_buffer(values)])


def read_corpus(in_dir: Path, with_text: bool = True) -> Corpus:
    """Read every source in ``in_dir`` (``<source>.parquet`` or a folder of shards, ``shards.source_files``; sorted);
    an empty folder gives an empty corpus. ``with_text``: keep
    each table (its texts are signed, and it is written back with the labels); else only the row facts, one
    file in memory at a time.

    Raises ``FileNotFoundError`` for a missing folder, ``ValueError`` naming the file for bad rows, and naming the
    shards ingest wrote (``<in_dir>/manifest.json``, ``shards.check_manifest``) that are missing.
    """
    if not in_dir.is_dir():
        raise FileNotFoundError(f"{in_dir}: ingest output folder not found (run the ingest stage first)")
    check_manifest(in_dir, "ingest")  # a deleted shard would be read as fewer documents, without an error
    corpus = Corpus({}, [], [], [], [], [])
    first_file: dict[str, Path] = {}
    for name, files in source_files(in_dir).items():
        path = files[0] if len(files) == 1 else in_dir / name  # what an error names
        table = read_source(files)
        columns = _checked_columns(path, table)
        for doc_id in columns["doc_id"]:
            if doc_id in first_file:
                raise ValueError(f"{path}: doc_id {doc_id!r} already seen in {first_file[doc_id]}")
            first_file[doc_id] = path
        corpus.files[name] = files
        corpus.doc_id += columns["doc_id"]
        corpus.source += [name] * table.num_rows
        corpus.role += columns["role"]
        if with_text:  # the texts are held anyway: the whole table costs little more, and is not read twice
            corpus.text_chunks += table.column("text").chunks
            corpus.tables[name] = table
        corpus.label += columns["label"]
        for name in OPTIONAL_COLUMNS:
            values = table.column(name).to_pylist() if name in table.column_names else [None] * table.num_rows
            getattr(corpus, name).extend(values)
    return corpus


def _checked_columns(path: Path, table: pa.Table) -> dict[str, list]:
    """The row facts of one ingest file as lists (all required columns but ``text``), checked."""
    missing = [name for name in REQUIRED_COLUMNS if name not in table.column_names]
    if missing:
        raise ValueError(f"{path}: missing column(s) {missing}; ingest rows need {list(REQUIRED_COLUMNS)}")
    for name in ("doc_id", "text", "role"):
        if table.column(name).null_count:
            first = pc.index(pc.is_null(table.column(name)), True).as_py()
            raise ValueError(f"{path}: row {first} has a null {name}")
    columns = {name: table.column(name).to_pylist() for name in REQUIRED_COLUMNS if name != "text"}
    unknown = sorted(set(columns["role"]) - set(ROLE_RANK))
    if unknown:
        raise ValueError(f"{path}: unknown role(s) {unknown}; expected one of {sorted(ROLE_RANK)}")
    return columns


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
