"""The dedup index's arrays as segments (``tasks/dedup/incremental.py`` is the index): each run appends one segment,
``signatures-<tag>.npy`` + ``shingles-<tag>.npy``, holding only the texts it signed, and keeps the earlier
segments by hard link, so a night's save writes the new texts' values, not the whole corpus' (rewriting 180 MB
of arrays took ~1.4 s of each night at 16x the default corpus).

Every entry row of ``entries.parquet`` says where its values lie: ``segment`` (the tag), ``signature_row``,
``shingles_start`` and ``shingles_stop`` (in the segment's flat shingle array). The stamp holds each segment's
shape and checksum (``SHAPES``: rows, shingles, each file's CRC-32), checked on load with the entries' bounds,
so damaged arrays or arrays of another index are never paired with these entries. A segment is rewritten into
the new one when under half its rows are still entries (texts that left the corpus leave their rows behind),
and all are when more than ``MAX_SEGMENTS`` would be kept. A full run writes one segment, in entry order.
``<tag>`` is ``incremental.generation`` of the segment's texts.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tasks.common.files.shards import file_crc32, linked_or_copied
from tasks.common.files.stamped import one_line

SHAPES = "segments"  # the stamp key: {tag: [signature rows, shingles, CRC-32 of each file]}
ENTRIES = "entries.parquet"
MAX_SEGMENTS = 16
COLUMNS = ("segment", "signature_row", "shingles_start", "shingles_stop")


class UnusableIndex(Exception):
    """The arrays cannot be used with ``entries.parquet``; the message names the file and why."""


@dataclass
class Stored:
    """Where each loaded entry's values lie (one item per entry row), and the shape of every segment read."""

    segment: list[str] = field(default_factory=list)
    row: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    start: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    stop: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    shapes: dict[str, list[int]] = field(default_factory=dict)


def file_names(tag: str) -> tuple[str, str]:
    """The signatures and shingles files of segment ``tag``."""
    return f"signatures-{tag}.npy", f"shingles-{tag}.npy"


def load(folder: Path, stored: Stored, num_perm: int) -> tuple[np.ndarray, list[np.ndarray]]:
    """The entries' ``(signatures (entries, num_perm) uint32, shingle sets)`` from their segments, the shingles
    memory-mapped. Raises ``UnusableIndex`` for a segment missing, damaged, or not of the shape its stamp says."""
    signature = np.empty((len(stored.segment), num_perm), np.uint32)
    shingles: list[np.ndarray] = [np.zeros(0, np.uint64)] * len(stored.segment)
    positions: dict[str, list[int]] = {}
    for k, tag in enumerate(stored.segment):
        positions.setdefault(tag, []).append(k)
    for tag, at in positions.items():
        values, flat = _arrays(folder, tag, stored.shapes.get(tag), num_perm)
        at = np.asarray(at)
        row, start, stop = stored.row[at], stored.start[at], stored.stop[at]
        if len(at) and not (
            row.min() >= 0
            and row.max() < len(values)
            and (start >= 0).all()
            and (start <= stop).all()
            and stop.max() <= len(flat)
        ):
            raise UnusableIndex(f"{folder / ENTRIES}: an entry points outside segment {tag}")
        signature[at] = values[row]
        for k, lo, hi in zip(at.tolist(), start.tolist(), stop.tolist()):
            shingles[k] = flat[lo:hi]
    return signature, shingles


def _arrays(folder: Path, tag: str, shape: list[int] | None, num_perm: int) -> tuple[np.ndarray, np.ndarray]:
    """Segment ``tag``'s ``(signatures, flat shingles)``, checked against the ``shape`` its stamp records: rows,
    shingles and each file's CRC-32 (damaged bytes, or another index's files of the same shape, never pass)."""
    names = file_names(tag)
    try:
        crcs = [file_crc32(folder / name) for name in names]
        values = np.load(folder / names[0])
        flat = np.asarray(np.load(folder / names[1], mmap_mode="r"))  # pages read when a Jaccard needs them
    except (OSError, ValueError, EOFError) as err:  # missing (another run's index), truncated, empty, not numpy
        raise UnusableIndex(f"{getattr(err, 'filename', None) or folder}: {one_line(err)}") from None
    rows, total, *expected = shape or (-1, -1)
    if values.shape != (rows, num_perm) or flat.shape != (total,) or crcs != expected:
        raise UnusableIndex(
            f"{folder / names[0]}: the arrays do not fit {ENTRIES} ({values.shape[0]} signatures, "
            f"{rows} expected, CRC-32 {crcs} against {expected})"
        )
    return values, flat


def save(tmp: Path, folder: Path, kept: np.ndarray, stored: Stored, values, tag_of) -> dict[str, np.ndarray | list]:
    """Write the segments of the entries ``kept`` (``(entries,)`` int64: the loaded entry each one is, -1 for a text
    signed this run) into ``tmp``: loaded entries of a segment worth keeping stay there (its files linked from
    ``folder``), the others go to one new segment, in entry order, built from ``values(rows)`` (their
    ``(signatures, shingle sets)``; ``rows`` index ``kept``) and named ``tag_of(rows)``. Returns the entry columns
    (``COLUMNS``) and ``shapes``."""
    keep = _segments_to_keep(kept, stored)
    moved = np.flatnonzero([k < 0 or stored.segment[k] not in keep for k in kept.tolist()])
    columns = {"segment": [""] * len(kept), **{name: np.zeros(len(kept), np.int64) for name in COLUMNS[1:]}}
    shapes = {}
    for tag in sorted(keep):
        for name in file_names(tag):
            linked_or_copied(folder / name, tmp / name)
        shapes[tag] = stored.shapes[tag]
    staying = np.setdiff1d(np.arange(len(kept)), moved)
    for k in staying.tolist():
        columns["segment"][k] = stored.segment[kept[k]]
    for name, source in zip(COLUMNS[1:], (stored.row, stored.start, stored.stop)):
        columns[name][staying] = source[kept[staying]]
    if len(moved):
        tag = tag_of(moved)
        signatures, sets = values(moved)
        sizes = np.fromiter(map(len, sets), np.int64, count=len(sets))
        names = file_names(tag)
        np.save(tmp / names[0], signatures)
        np.save(tmp / names[1], np.concatenate([np.zeros(0, np.uint64)] + list(sets)))
        for k in moved.tolist():
            columns["segment"][k] = tag
        columns["signature_row"][moved] = np.arange(len(moved))
        columns["shingles_stop"][moved] = np.cumsum(sizes)
        columns["shingles_start"][moved] = columns["shingles_stop"][moved] - sizes
        shapes[tag] = [len(moved), int(sizes.sum()), *(file_crc32(tmp / name) for name in names)]
    return columns | {SHAPES: shapes}


def _segments_to_keep(kept: np.ndarray, stored: Stored) -> set[str]:
    """The loaded segments whose files stay: at least half their rows are still entries, at most ``MAX_SEGMENTS``."""
    live = Counter(stored.segment[k] for k in kept.tolist() if k >= 0)
    keep = {tag for tag, n in live.items() if 2 * n >= stored.shapes[tag][0]}
    return keep if len(keep) < MAX_SEGMENTS else set()
