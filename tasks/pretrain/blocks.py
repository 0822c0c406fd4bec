"""The packed blocks pretraining reads (``data/tokenize/pretrain/<tok>/<split>``): the train blocks memory-mapped
(``open_blocks``: a step gathers only its own rows), the held-out blocks as tensors (``load_blocks``)."""

from __future__ import annotations

import hashlib
import json
import mmap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch
from datasets import load_from_disk

from tasks.common.files.ioerrors import reading

CHUNK_ROWS = 4096  # rows per pass of a scan over every block (``BlockRows.all``, ``blocks_sha256``)


def blocks_dir(data: Path, tokenization: str, split: str) -> Path:
    """``<data>/tokenize/pretrain/<tokenization>/<split>``: the blocks the tokenize stage wrote."""
    return Path(data) / "tokenize" / "pretrain" / tokenization / split


def load_blocks(folder: Path, max_blocks: int | None = None) -> dict[str, Any]:
    """Packed blocks as tensors ``input_ids``, ``attention_mask``, ``maskable`` (not special, not pad), each
    ``(n_blocks, seq_len)``, and ``source_id`` ``(n_blocks,)`` indexing ``source_names`` (sorted).

    ``max_blocks`` keeps at most that many, taking the sources in turn (see ``stratified_rows``), so a small
    held-out set still covers every pretraining source. Raises ``FileNotFoundError``/``ValueError`` naming
    ``folder`` if it is missing, empty, ragged or has no ``source`` column.
    """
    data = _read(folder)
    names, source_id = np.unique(np.asarray(data["source"], dtype=str), return_inverse=True)
    if max_blocks is not None:
        keep = stratified_rows(source_id, max_blocks)
        data, source_id = data.select(keep), source_id[keep]
    if len(data) == 0:
        raise ValueError(f"{folder}: no blocks")
    data = data.with_format("torch", columns=["input_ids", "attention_mask", "special_tokens_mask"])
    try:
        input_ids = data["input_ids"][:].long()
        attention_mask = data["attention_mask"][:].long()
        maskable = (attention_mask == 1) & (data["special_tokens_mask"][:] == 0)
    except (RuntimeError, ValueError) as err:  # rows of different lengths cannot stack
        raise ValueError(f"{folder}: rows must all have the same length (packed blocks): {err}") from err
    return {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "maskable": maskable,
        "source_id": torch.from_numpy(source_id),
        "source_names": names.tolist(),
    }


def stratified_rows(source_id: np.ndarray, max_blocks: int) -> np.ndarray:
    """Row indices (ascending) of at most ``max_blocks`` rows: the first row of each source, then the second
    of each, and so on (round robin in row order), so every source is in, and small ones whole."""
    rows = np.arange(len(source_id))
    order = np.argsort(source_id, kind="stable")
    rank = np.empty_like(rows)
    starts = np.searchsorted(source_id[order], source_id[order])
    rank[order] = rows - starts
    return np.sort(np.lexsort((rows, rank))[:max_blocks])


def _read(folder: Path):
    """The ``datasets`` folder, memory-mapped; errors as ``load_blocks`` says."""
    _require(folder)
    with reading(folder):  # a damaged Arrow file: one line naming the folder and the stage that writes it
        data = load_from_disk(str(folder))
    _require(folder, data.column_names)
    return data


def _require(folder: Path, *column_names: list[str]) -> None:
    """Raise ``FileNotFoundError`` when ``folder`` is missing, ``ValueError`` when any of ``column_names`` (each
    a table's columns) lacks ``source``: both name the folder and the tokenize stage."""
    if not folder.exists():
        raise FileNotFoundError(f"{folder}: no tokenized blocks (run the tokenize stage)")
    if any("source" not in names for names in column_names):
        raise ValueError(f"{folder}: no 'source' column (written by the tokenize stage; rerun it)")


def open_blocks(folder: Path) -> dict[str, Any]:
    """The blocks of ``folder`` without reading them: ``input_ids`` (int64), ``attention_mask`` (int64) and
    ``maskable`` (bool: not special, not pad) are ``BlockRows`` of shape ``(n_blocks, seq_len)`` over the
    memory-mapped Arrow shards (the files ``state.json`` lists, in order), whose ``rows`` index gathers just
    those rows; ``source_names`` (sorted) as in ``load_blocks``. Each shard's pages are dropped once its rows are
    indexed, so a rank's memory holds its steps' batches, not the corpus. Raises as ``load_blocks``."""
    _require(folder)
    columns: dict[str, list[np.ndarray]] = {name: [] for name in ("input_ids", "attention_mask", "special_tokens_mask")}
    files, names = [], set()
    with reading(folder):  # a damaged Arrow file: one line naming the folder and the stage that writes it
        shards = [
            _map(folder / entry["filename"])
            for entry in json.loads((folder / "state.json").read_bytes())["_data_files"]
        ]
        tables = [(mapped, pa.ipc.open_stream(pa.py_buffer(mapped)).read_all()) for mapped in shards]
    _require(folder, *(table.column_names for _, table in tables))
    for mapped, table in tables:
        for batch in table.to_batches():
            for name, views in columns.items():
                views.append(_rows_view(batch.column(name), folder))
            names.update(pc.unique(batch.column("source")).to_pylist())
            files.append(mapped)
        release([mapped])  # the offsets and names read
    if not files or len({view.shape[1] for view in columns["input_ids"]}) > 1:
        raise ValueError(f"{folder}: no blocks, or rows of different lengths (packed blocks)")
    ids, attention, special = columns.values()
    return {
        "input_ids": BlockRows([ids], files, lambda i: torch.from_numpy(i.astype(np.int64))),
        "attention_mask": BlockRows([attention], files, lambda a: torch.from_numpy(a.astype(np.int64))),
        "maskable": BlockRows([attention, special], files, lambda a, s: torch.from_numpy((a == 1) & (s == 0))),
        "source_names": sorted(names),
    }


def _map(path: Path) -> mmap.mmap:
    with open(path, "rb") as file:
        return mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)


def release(maps) -> None:
    """Drop the pages of ``maps`` from this process's memory (``MADV_DONTNEED``: clean file pages, read again
    from the page cache or the disk when next touched), so what a gather or a scan read does not stay in its
    resident set (a whole map: a fault maps its neighbours too, past any window one could guess)."""
    for mapped in set(maps):
        mapped.madvise(mmap.MADV_DONTNEED)


def _rows_view(chunk: pa.ListArray, folder: Path) -> np.ndarray:
    """``(rows, seq_len)`` numpy view of a list column's chunk, no copy (the memory map's pages)."""
    offsets = chunk.offsets.to_numpy()
    lengths = np.diff(offsets)
    if len(lengths) and (lengths != lengths[0]).any():
        raise ValueError(f"{folder}: rows must all have the same length (packed blocks)")
    flat = chunk.values.to_numpy(zero_copy_only=True)[offsets[0] : offsets[-1]]
    return flat.reshape(len(lengths), int(lengths[0]) if len(lengths) else 0)


class BlockRows:
    """A ``(n_blocks, seq_len)`` column read on demand from shard views: ``self[rows]`` (a tensor or array of
    block indices, or a slice) gathers those rows of each of ``columns`` (one list of per-chunk views each, over
    the memory maps ``files``, one per chunk), returns ``make(*gathered)``, a tensor, and drops the pages it read
    (``release``). ``len``, ``shape`` and ``all`` as a tensor's."""

    def __init__(self, columns: list[list[np.ndarray]], files: list[mmap.mmap], make: Callable[..., torch.Tensor]):
        self.columns, self.files, self.make = columns, files, make
        self.starts = np.cumsum([0] + [len(view) for view in columns[0]])
        self.shape = (int(self.starts[-1]), int(columns[0][0].shape[1]))

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, rows) -> torch.Tensor:
        if isinstance(rows, slice):
            rows = np.arange(*rows.indices(len(self)))
        rows = np.asarray(rows, dtype=np.int64)
        chunk = np.searchsorted(self.starts, rows, side="right") - 1
        local = rows - self.starts[chunk]
        touched = np.unique(chunk)
        gathered = []
        for views in self.columns:
            out = np.empty((len(rows), self.shape[1]), dtype=views[0].dtype)
            for c in touched:
                picked = chunk == c
                out[picked] = views[c][local[picked]]
            gathered.append(out)
        release(self.files[c] for c in touched)
        return self.make(*gathered)

    def all(self) -> bool:
        """Whether every value is nonzero, scanned ``CHUNK_ROWS`` rows at a time."""
        return all(bool(self[lo : lo + CHUNK_ROWS].all()) for lo in range(0, len(self), CHUNK_ROWS))


def blocks_sha256(input_ids) -> str:
    """sha256 of ``input_ids`` (a tensor or ``BlockRows``) as one C-order int64 array's bytes, hashed
    ``CHUNK_ROWS`` rows at a time: the digest of ``input_ids.numpy().tobytes()`` without holding it."""
    digest = hashlib.sha256()
    for lo in range(0, len(input_ids), CHUNK_ROWS):
        digest.update(input_ids[lo : lo + CHUNK_ROWS].numpy().astype(np.int64).tobytes())
    return digest.hexdigest()
