"""The Ray engine's corpus windows by key bucket (issue 63): which windows the actor pool embeds, which vectors
each search shard reads and what ``Encoder.count`` counts, decided by one task a bucket, so that the driver holds
nothing a corpus window (it held ~100 bytes a window: 70 GiB at 10^8 docs).

A layout task (``corpus_layout.lay_out_row_group``) writes its row group's windows to ``runs/<group>.arrow``
(``write_run``: Arrow IPC, one record batch, uncompressed, so a reader maps it and copies only what it takes):
``key`` (16 bytes), ``local`` (the window's place among the group's windows, int64) and ``tokens`` (int32
wordpiece ids), sorted by key then ``local``. Bucket ``b`` of ``n`` (``spill.bucket_of``) is a range of the keys'
first 4 bytes (``spill.prefix_range``), so its rows in a run are found by binary search (``rows_between``), and one task
a bucket (``plan_bucket``) reads them from every run and writes into the spill folder

- ``plan/<b>.parquet``: the bucket's used keys, sorted (``key``), and whether the driver scores it (``side``: a
  key of the eval side's windows);
- ``plan/<b>-route.parquet``: per corpus window of the bucket, the row of its key there (``used``) and its place
  among the corpus windows (``position``: its group's first window, as the driver numbers them, plus ``local``);
- ``todo/<b>.parquet``: the first window of each corpus key neither stored nor the eval side's (``key``,
  ``tokens``): what the actor pool embeds (the eval side's are the driver's to send);

and returns its ``BucketCounts``. A key's first window is its lowest position: the runs are read in group
order and ``np.unique`` keeps the first occurrence. ``spill.gather_bucket`` then reads ``plan`` for the vectors.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tasks.leakage.semantic.cluster.spill import KeySet, prefix_range


def write_run(folder: Path, index: int, keys: np.ndarray, tokens: list[np.ndarray]) -> None:
    """Row group ``index``'s windows (``keys`` (w,) ``S16`` and their wordpiece ids, in window order) as its run
    file, sorted by key then window (module docstring)."""
    order = np.argsort(keys, kind="stable")  # S16 compares as its bytes, zero tails included
    lengths = np.array([len(tokens[i]) for i in order], np.int64)
    values = np.concatenate([tokens[i] for i in order]) if len(order) else np.zeros(0, np.int32)
    offsets = pa.array(np.concatenate([[0], np.cumsum(lengths)]), pa.int32())  # raises past 2^31 tokens
    table = pa.table(
        {
            "key": key_array(keys[order]),
            "local": pa.array(order.astype(np.int64)),
            "tokens": pa.ListArray.from_arrays(offsets, pa.array(values.astype(np.int32))),
        }
    )
    (folder / "runs").mkdir(parents=True, exist_ok=True)
    with pa.OSFile(str(run_path(folder, index)), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_batch(table.combine_chunks().to_batches()[0] if table.num_rows else _empty_batch(table))


def run_path(folder: Path, index: int) -> Path:
    return folder / "runs" / f"{index:06d}.arrow"


def read_run(folder: Path, index: int) -> pa.Table:
    """Run file ``index``, memory-mapped (nothing read until taken)."""
    return pa.ipc.open_file(pa.memory_map(str(run_path(folder, index)))).read_all()


def key_array(keys: np.ndarray) -> pa.FixedSizeBinaryArray:
    """An ``S16`` array as 16-byte Arrow keys, from its buffer (``tolist`` would drop a key's zero tail)."""
    data = pa.py_buffer(np.ascontiguousarray(keys).tobytes())
    return pa.FixedSizeBinaryArray.from_buffers(pa.binary(16), len(keys), [None, data])


def key_view(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """16-byte Arrow keys as an ``S16`` numpy array: a view of one chunk's buffer, a copy of several."""
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    views = [np.frombuffer(c.buffers()[1], "S16", len(c), c.offset * 16) for c in chunks if len(c)]
    if len(views) == 1:
        return views[0]
    return np.concatenate(views) if views else np.zeros(0, "S16")


def rows_between(keys: np.ndarray, lo: int, hi: int) -> tuple[int, int]:
    """The rows of sorted ``keys`` (``S16``) whose first 4 bytes lie in ``[lo, hi)``, by binary search over a
    strided view (``np.searchsorted`` would copy the prefixes, a run's worth a bucket)."""
    prefixes = keys.view(">u4")[::4] if len(keys) else np.zeros(0, ">u4")
    return bisect.bisect_left(prefixes, lo), bisect.bisect_left(prefixes, hi)  # type: ignore[call-overload]


@dataclass
class BucketCounts:
    """What ``Encoder.count`` needs of a bucket's corpus windows: ``distinct`` keys, of which those that are
    the eval side's (``shared``: ``S16`` sorted, with their first window's wordpieces and whether stored) and,
    of the others, how many are stored and the tokens of their first windows (wordpieces + 2 each); ``embed``:
    the rows of its ``todo`` file. Summed over buckets by ``summed``."""

    distinct: int = 0
    shared: np.ndarray = field(default_factory=lambda: np.zeros(0, "S16"))
    shared_lengths: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    shared_stored: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    others_stored: int = 0
    others_tokens: int = 0
    embed: int = 0

    @staticmethod
    def summed(parts: list[BucketCounts]) -> BucketCounts:
        """The buckets' counts as one (their ``shared`` arrays concatenated once)."""
        return BucketCounts(
            sum(p.distinct for p in parts),
            np.concatenate([np.zeros(0, "S16")] + [p.shared for p in parts]),
            np.concatenate([np.zeros(0, np.int64)] + [p.shared_lengths for p in parts]),
            np.concatenate([np.zeros(0, bool)] + [p.shared_stored for p in parts]),
            sum(p.others_stored for p in parts),
            sum(p.others_tokens for p in parts),
            sum(p.embed for p in parts),
        )

    def count(self, n_windows: int, cached: KeySet, stats: dict, store_stats: dict) -> None:
        """``Encoder.count`` of ``n_windows`` corpus windows with these keys, counted after the eval side's
        windows (the pass embeds the corpus last): ``cached`` is then some of the eval side's keys, so a key
        not the eval side's is new, and one of ``shared`` is new unless in ``cached``; once each, and stored or
        computed."""
        new = ~cached.isin(self.shared)
        n_new = self.distinct - len(self.shared) + int(new.sum())
        from_store = self.others_stored + int(self.shared_stored[new].sum())
        stats["windows_from_cache"] += n_windows - n_new
        stats["windows_embedded"] += n_new
        stats["tokens_embedded"] += self.others_tokens + int((self.shared_lengths[new] + 2).sum())
        store_stats["windows_stored"] += from_store
        store_stats["windows_computed"] += n_new - from_store


def plan_bucket(folder: Path, b: int, n: int, group_starts: np.ndarray, side: bytes, stored: bytes) -> BucketCounts:
    """Bucket ``b`` of ``n``'s files (module docstring) from the runs of the ``len(group_starts) - 1`` row groups
    (``group_starts``: each group's first window), ``side`` (the eval side's keys in the bucket, 16 bytes each,
    sorted) and ``stored`` (the kept store's, the same way)."""
    lo, hi = prefix_range(b, n)
    parts = []
    for g in range(len(group_starts) - 1):
        run = read_run(folder, g)
        r0, r1 = rows_between(key_view(run.column("key")), lo, hi)
        parts.append(run.take(pa.array(np.arange(r0, r1))))  # a copy: the run's map is released, one at a time
    keys = np.concatenate([key_view(p.column("key")) for p in parts]) if parts else np.zeros(0, "S16")
    position = np.concatenate([group_starts[g] + p.column("local").to_numpy() for g, p in enumerate(parts)] or [[]])
    distinct, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    side_keys = np.frombuffer(side, "S16")
    used = np.union1d(side_keys, distinct).astype("S16")
    write_plan(folder, b, used, KeySet(side_keys).isin(used), np.searchsorted(used, distinct)[inverse], position)
    is_side, is_stored = KeySet(side_keys).isin(distinct), KeySet(np.frombuffer(stored, "S16")).isin(distinct)
    lengths = np.concatenate([_lengths(p.column("tokens")) for p in parts] or [np.zeros(0, np.int64)])[first]
    embed = first[~is_side & ~is_stored]
    write_todo(folder, b, parts, embed)
    others = ~is_side
    return BucketCounts(
        len(distinct),
        distinct[is_side],
        lengths[is_side],
        is_stored[is_side],
        int((is_stored & others).sum()),
        int((lengths[others] + 2).sum()),
        len(embed),
    )


def write_plan(folder: Path, b: int, used: np.ndarray, side: np.ndarray, row: np.ndarray, position: np.ndarray):
    """``plan/<b>.parquet`` (``used`` keys and ``side`` flags) and ``plan/<b>-route.parquet`` (per corpus window
    its key's ``row`` in ``used`` and its ``position``)."""
    (folder / "plan").mkdir(parents=True, exist_ok=True)
    pq.write_table(
        pa.table({"key": key_array(used), "side": pa.array(side, pa.bool_())}),
        folder / "plan" / f"{b:06d}.parquet",
        compression="none",
    )
    route = pa.table({"used": pa.array(row, pa.int64()), "position": pa.array(position, pa.int64())})
    pq.write_table(route, folder / "plan" / f"{b:06d}-route.parquet", compression="none")


def write_todo(folder: Path, b: int, parts: list[pa.Table], rows: np.ndarray) -> None:
    """``todo/<b>.parquet``: the ``rows`` (indexes into ``parts``' rows, concatenated) as ``key``, ``tokens``."""
    cuts = np.cumsum([0] + [p.num_rows for p in parts])
    owner = np.searchsorted(cuts, rows, "right") - 1
    taken = [parts[g].select(["key", "tokens"]).take(pa.array(rows[owner == g] - cuts[g])) for g in np.unique(owner)]
    schema = pa.schema([("key", pa.binary(16)), ("tokens", pa.list_(pa.int32()))])
    table = pa.concat_tables(taken) if taken else schema.empty_table()
    (folder / "todo").mkdir(parents=True, exist_ok=True)
    pq.write_table(table, folder / "todo" / f"{b:06d}.parquet", compression="none")


def _lengths(tokens: pa.ChunkedArray) -> np.ndarray:
    """Wordpieces per window, (w,) int64."""
    return np.concatenate([np.diff(c.offsets.to_numpy()) for c in tokens.chunks] or [np.zeros(0, np.int64)])


def _empty_batch(table: pa.Table) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.array([], f.type) for f in table.schema], schema=table.schema)
