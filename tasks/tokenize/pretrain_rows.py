"""The pretraining rows of ``tokenize`` read as a stream: per split, batches of documents in the order
``parquet.read_pretraining_rows`` gives them (by ``doc_id``; equal ids in source-name order, then file order), so
the stage holds a batch of texts, never the corpus.

Which rows: those of ``<data>/leakage/<source>.parquet`` for each pretraining source with ``is_duplicate`` false;
a ``role: task`` row lends its ``train`` split as ``train`` and its ``dev`` split as ``heldout``
(``parquet.TASK_TO_PRETRAIN_SPLIT``), any other row keeps its ``split``.

How (a k-way merge by ``doc_id``, ``heapq.merge``, stable: ties go to the earlier source): a first pass reads each
file's ``doc_id``, ``role``, ``split`` and ``is_duplicate`` columns in batches and checks, per split, that its rows
come in ``doc_id`` order. Such a file is merged as it is read (``READ_ROWS`` rows at a time, Parquet pages read
``READ_BUFFER`` bytes at a time, not a row group's column whole). A file whose rows are out of order is sorted
outside memory first: ``SORT_RUN_ROWS`` rows or ``SORT_RUN_BYTES`` at a time sorted (Arrow's stable sort, UTF-8
byte order, which is Python's ``str`` order) and spilled as Arrow IPC streams under ``spill`` in record batches of
about ``SPILL_BYTES`` (the rows a batch follow the run's bytes a row, so a run of long documents is read back a few
rows at a time). The merge reads a batch of each run at once, so a file's runs are first merged ``MERGE_FANIN`` at
a time into longer runs (consecutive runs: ties keep their order) until at most ``MERGE_FANIN`` remain: the runs
grow with the corpus, the batches held do not. Memory: a batch per open file or run (at most ``MERGE_FANIN`` runs a
file), one run while it is sorted, and the batch handed on (at most ``size`` documents and about ``BATCH_CHARS``
characters); disk: the spilled rows, twice while runs are merged.

Errors as ``read_clean_source``: ``FileNotFoundError`` naming a missing file, ``ValueError`` naming one that lacks
a contract column, ``ioerrors.DamagedFile`` naming one that cannot be read.
"""

from __future__ import annotations

import heapq
import shutil
from collections.abc import Iterable, Iterator
from operator import itemgetter
from pathlib import Path
from typing import NamedTuple

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tasks.common.files.ioerrors import reading, writing
from tasks.common.files.parquet import CLEAN_COLUMNS, TASK_TO_PRETRAIN_SPLIT
from tasks.config.corpus.split import PRETRAIN_SPLITS

READ_ROWS = 1024  # rows a Parquet read returns
READ_BUFFER = 1 << 20  # bytes of a column chunk read at once (0, pyarrow's default, reads the chunk whole)
BATCH_CHARS = 4_000_000  # text characters a batch ends at, whatever its documents: its ids and tokens are ~100x
SORT_RUN_ROWS, SORT_RUN_BYTES = 20_000, 32 << 20  # an out-of-order file is sorted in runs of whichever comes first
SPILL_BYTES = 1 << 20  # bytes of a spilled record batch, about: what the merge holds of each run
MERGE_FANIN = 16  # runs merged at once: a file's runs are merged into longer ones until this many remain
KEPT = ["doc_id", "text", "source"]
#: per pretraining split, the split a role=task row must have to lend its text to it
FROM_TASK_SPLIT = {pretrain: task for task, pretrain in TASK_TO_PRETRAIN_SPLIT.items()}


class Batch(NamedTuple):
    """Consecutive documents of a split: ``doc_ids``, ``texts`` and ``sources``, lists of one length."""

    doc_ids: list[str]
    texts: list[str]
    sources: list[str]


class PretrainRows:
    """The pretraining rows of ``sources`` (names, resolved: ``resolve_pretrain``) under ``<data>/leakage``;
    ``batches(split, size)`` streams a split. A context manager: leaving it removes ``spill``."""

    def __init__(self, data: Path, sources: Iterable[str], spill: Path) -> None:
        self.spill = Path(spill)
        self.files = [checked_file(data, source) for source in sorted(sources)]
        self.runs: dict[tuple[Path, str], list[Path]] = {}
        for path in self.files:
            for split in PRETRAIN_SPLITS:
                if not in_order(path, split):
                    self.runs[path, split] = spill_sorted(path, split, self.spill / f"{path.stem}-{split}")

    def batches(self, split: str, size: int) -> Iterator[Batch]:
        """The split's documents in order, ``size`` at a time, or fewer where they reach ``BATCH_CHARS``
        characters of text (long documents: a batch's memory follows its text, not its count)."""
        streams = [
            chain_runs(self.runs[path, split]) if (path, split) in self.runs else file_rows(path, split)
            for path in self.files
        ]
        merged = heapq.merge(*streams, key=itemgetter(0))
        while rows := take(merged, size):
            yield Batch(*(list(column) for column in zip(*rows)))

    def __enter__(self) -> PretrainRows:
        return self

    def __exit__(self, *exc) -> None:
        shutil.rmtree(self.spill, ignore_errors=True)


def take(rows: Iterator[tuple[str, str, str]], size: int) -> list[tuple[str, str, str]]:
    """The next rows up to ``size`` of them, or up to the one that reaches ``BATCH_CHARS`` characters of text."""
    out, chars = [], 0
    for row in rows:
        out.append(row)
        chars += len(row[1])
        if len(out) == size or chars >= BATCH_CHARS:
            break
    return out


class FrameRows:
    """``PretrainRows``' ``batches`` over a frame held in memory (columns ``doc_id``, ``text``, ``source``,
    ``split``: already the pretraining rows), ordered as ``PretrainRows`` orders them (test fixtures)."""

    def __init__(self, frame: pd.DataFrame) -> None:
        self.frame = frame.sort_values("doc_id", kind="stable")

    def batches(self, split: str, size: int) -> Iterator[Batch]:
        part = self.frame.loc[self.frame["split"] == split, KEPT]
        for start in range(0, len(part), size):
            yield Batch(*(part[c].iloc[start : start + size].tolist() for c in KEPT))


def checked_file(data: Path, source: str) -> Path:
    """``<data>/leakage/<source>.parquet``, its schema holding the contract columns and ``source``."""
    path = Path(data) / "leakage" / f"{source}.parquet"
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file (source {source!r} named in params.yaml)")
    with reading(path):
        names = pq.ParquetFile(path).schema_arrow.names
    missing = [col for col in (*CLEAN_COLUMNS, "source") if col not in names]
    if missing:
        raise ValueError(f"{path}: missing contract columns {missing}")
    return path


def split_rows(path: Path, split: str, columns: list[str]) -> Iterator[pa.Table]:
    """``columns`` of the file's rows that are pretraining text of ``split``, a ``READ_ROWS`` batch at a time."""
    names = sorted({*columns, "role", "split", "is_duplicate"})
    # pre_buffer (pyarrow's default) would read the row group's column chunks whole before the first batch
    with reading(path), pq.ParquetFile(path, buffer_size=READ_BUFFER, pre_buffer=False) as parquet:
        # a row group at a time: one iter_batches over a file of many row groups held more of it as it went
        for batch in (b for g in range(parquet.num_row_groups) for b in parquet.iter_batches(READ_ROWS, [g], names)):
            task = pc.fill_null(pc.equal(batch["role"], "task"), False)
            wanted = pc.if_else(task, FROM_TASK_SPLIT.get(split), split)
            keep = pc.and_(pc.invert(pc.fill_null(batch["is_duplicate"], False)), pc.equal(batch["split"], wanted))
            yield pa.Table.from_batches([batch]).filter(pc.fill_null(keep, False)).select(columns)


def in_order(path: Path, split: str) -> bool:
    """Whether the file's rows of ``split`` come in ``doc_id`` order (reads the ids, not the texts)."""
    last = None
    for table in split_rows(path, split, ["doc_id"]):
        ids = table["doc_id"].to_pylist()
        if ids and ((last is not None and ids[0] < last) or any(b < a for a, b in zip(ids, ids[1:]))):
            return False
        last = ids[-1] if ids else last
    return True


def file_rows(path: Path, split: str) -> Iterator[tuple[str, str, str]]:
    """``(doc_id, text, source)`` of the file's rows of ``split``, in file order."""
    for table in split_rows(path, split, KEPT):
        yield from zip(*(table[c].to_pylist() for c in KEPT))


def spill_sorted(path: Path, split: str, folder: Path) -> list[Path]:
    """The file's rows of ``split`` as sorted runs of ``SORT_RUN_ROWS`` rows, one Arrow IPC stream each."""
    folder.mkdir(parents=True, exist_ok=True)
    runs, held, n_held = [], [], 0
    for table in split_rows(path, split, KEPT):
        held.append(table)
        n_held += table.num_rows
        if n_held >= SORT_RUN_ROWS or sum(t.nbytes for t in held) >= SORT_RUN_BYTES:
            runs.append(write_run(pa.concat_tables(held), folder / f"run-{len(runs):05d}.arrow"))
            held, n_held = [], 0
    if n_held:
        runs.append(write_run(pa.concat_tables(held), folder / f"run-{len(runs):05d}.arrow"))
    return merged_down(runs, folder)


def write_run(table: pa.Table, path: Path) -> Path:
    ordered = table.take(pc.sort_indices(table, sort_keys=[("doc_id", "ascending")]))
    chunk = max(1, SPILL_BYTES * ordered.num_rows // max(ordered.nbytes, 1))
    with writing(path), pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, ordered.schema) as writer:
        writer.write_table(ordered, max_chunksize=chunk)
    return path


def merged_down(runs: list[Path], folder: Path) -> list[Path]:
    """``runs`` merged ``MERGE_FANIN`` consecutive runs at a time, pass after pass, until at most ``MERGE_FANIN``
    remain (each merged run replaces its inputs on disk)."""
    passes = 0
    while len(runs) > MERGE_FANIN:
        passes += 1
        groups = [runs[start : start + MERGE_FANIN] for start in range(0, len(runs), MERGE_FANIN)]
        runs = [merge_runs(group, folder / f"merge-{passes}-{i:05d}.arrow") for i, group in enumerate(groups)]
    return runs


def merge_runs(group: list[Path], path: Path) -> Path:
    """One run of the rows of ``group`` (stable merge), written in record batches of about ``SPILL_BYTES``."""
    with reading(group[0]), pa.OSFile(str(group[0])) as source:
        schema = pa.ipc.open_stream(source).schema
    with writing(path), pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, schema) as writer:
        held, size = [], 0
        for row in chain_runs(group):
            held.append(row)
            size += sum(map(len, row))
            if size >= SPILL_BYTES:
                writer.write_batch(pa.record_batch(list(zip(*held)), schema=schema))
                held, size = [], 0
        if held:
            writer.write_batch(pa.record_batch(list(zip(*held)), schema=schema))
    for run in group:
        run.unlink()
    return path


def chain_runs(runs: list[Path]) -> Iterator[tuple[str, str, str]]:
    """The sorted runs of one file merged (stable: an earlier run first)."""
    return heapq.merge(*(run_rows(run) for run in runs), key=itemgetter(0))


def run_rows(path: Path) -> Iterator[tuple[str, str, str]]:
    with reading(path), pa.OSFile(str(path)) as source:
        for batch in pa.ipc.open_stream(source):
            yield from zip(*(batch[c].to_pylist() for c in KEPT))
