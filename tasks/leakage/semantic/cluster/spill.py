"""The Ray engine's window vectors kept off the driver (``tasks/leakage/semantic/cluster/ray_engine.py``): what the
workers write and read in a spill folder beside the store, so that no process holds every corpus vector.

Windows go to *buckets* by store key (``bucket_of``: the key's first 4 bytes scaled to ``n`` ranges, so the
buckets in order are the keys in order; at most about ``BUCKET_ROWS`` used windows a bucket). The spill folder
holds:

- ``embedded/<bucket>-<first key>.parquet``: the vectors of one bucket from one ``BATCHES_PER_CALL`` chunk of an
  actor call (``key``, ``vector``);
- ``runs``, ``plan``, ``todo``: the corpus windows' keys, and what a bucket uses (``corpus_keys``);
- ``sorted/<bucket>.parquet``: a bucket's used vectors sorted by key (``gather_bucket``, from ``embedded`` and the
  kept store's rows of the bucket): the store's rows are these, bucket after bucket (``write_store``);
- ``route/<shard>/<bucket>.parquet``: the vectors of one search shard's corpus windows whose keys fall in one
  bucket (``position``: the window's place among the corpus windows, ``vector``), read by the shard's search
  task (``read_shard``).

Files are plain Parquet (no compression): they live for one run. ``key`` is 16 bytes, ``vector`` float32
(fixed-size lists), as in the store. The kept store's keys reach the driver as a sorted ``S16`` array
(``stored_keys``, read a row group at a time; ``KeySet``), not as a set of Python bytes (~80 bytes a key).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tasks.common.files.ioerrors import DamagedFile, reading
from tasks.common.files.stamped import FINGERPRINT_KEY, one_line
from tasks.leakage.semantic import store

#: Used windows a bucket (``buckets``): a bucket's vectors, ~100 MB at 384 floats, are what one task holds.
BUCKET_ROWS = 65_536


def buckets(n_keys: int) -> int:
    """How many buckets for ``n_keys`` windows (repeats counted: at least the used keys): one per ``BUCKET_ROWS``
    (at least one); a bucket may then have no key."""
    return max(-(-n_keys // BUCKET_ROWS), 1)


def bucket_of(key: bytes, n: int) -> int:
    """The bucket of a store key among ``n``: its first 4 bytes (big-endian) times ``n``, over 2^32."""
    return (int.from_bytes(key[:4], "big") * n) >> 32


def prefix_range(b: int, n: int) -> tuple[int, int]:
    """The first-4-bytes values (big-endian) of bucket ``b``'s keys among ``n``: ``[lo, hi)`` (``bucket_of``
    gives ``b`` exactly when ``b * 2^32 <= prefix * n < (b + 1) * 2^32``)."""
    return -(-(b << 32) // n), -(-((b + 1) << 32) // n)


def unique_blob(blob: bytes) -> tuple[np.ndarray, np.ndarray]:
    """``(used, inverse)`` of 16-byte keys concatenated: the distinct keys sorted, as (m, 2) uint64 (big-endian
    halves: their order is the bytes'), and each key's row in it."""
    if not blob:
        return np.zeros((0, 2), np.uint64), np.zeros(0, np.int64)
    halves = np.frombuffer(blob, ">u8").reshape(-1, 2).astype(np.uint64)
    used, inverse = np.unique(halves, axis=0, return_inverse=True)
    return used, inverse.reshape(-1)


def keys_bytes(used: np.ndarray) -> bytes:
    """Rows of ``unique_blob``'s ``used`` as their 16-byte keys, concatenated."""
    return used.astype(">u8").tobytes()


class KeySet:
    """Store keys as a sorted ``(n,)`` ``S16`` array, looked up by ``np.searchsorted``: what ``Encoder.stored``
    is asked (``key in``, ``len``, truth). Compared in numpy only: an ``S16`` element read back as ``bytes`` loses
    its trailing zero bytes."""

    def __init__(self, keys: np.ndarray) -> None:
        self.keys = keys

    def __len__(self) -> int:
        return len(self.keys)

    def __contains__(self, key: bytes) -> bool:
        return bool(self.isin(np.array([key], "S16"))[0])

    def isin(self, keys: np.ndarray) -> np.ndarray:
        """Per key of ``keys`` (an ``S16`` array), whether it is one of these."""
        at = np.minimum(np.searchsorted(self.keys, keys), max(len(self.keys) - 1, 0))
        return self.keys[at] == keys if len(self.keys) else np.zeros(len(keys), bool)


def split16(blob: bytes) -> list[bytes]:
    """16-byte keys, concatenated, as a list."""
    return [blob[i : i + 16] for i in range(0, len(blob), 16)]


def matrix_of(column: pa.ChunkedArray | pa.Array, width: int) -> np.ndarray:
    """A fixed-size-list float32 column as an ``(n, width)`` array."""
    flat = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    return np.asarray(flat.flatten().to_numpy(zero_copy_only=False), np.float32).reshape(len(flat), width)


def keyed(keys: list[bytes], matrix: np.ndarray) -> pa.Table:
    """``key`` (16 bytes) and ``vector`` (the float32 rows of ``matrix``, fixed-size lists of its width)."""
    width = max(matrix.shape[1], 1) if matrix.ndim == 2 else 1
    flat = pa.array(np.ascontiguousarray(matrix, np.float32).ravel(), pa.float32())
    return pa.table({"key": pa.array(keys, pa.binary(16)), "vector": pa.FixedSizeListArray.from_arrays(flat, width)})


def write_embedded(folder: Path, keys: list[bytes], matrix: np.ndarray, n: int) -> None:
    """One actor call's vectors (``keys`` in bucket order) as a file per bucket in ``folder/embedded``, named by
    the bucket and its first key: a retried call writes the same file."""
    out = folder / "embedded"
    out.mkdir(parents=True, exist_ok=True)
    owner = np.array([bucket_of(k, n) for k in keys], np.int64)
    for b in np.unique(owner).tolist():
        rows = np.flatnonzero(owner == b)
        table = keyed([keys[r] for r in rows], matrix[rows])
        pq.write_table(table, out / f"{b:06d}-{keys[rows[0]].hex()}.parquet", compression="none")


def stored_keys(folder: Path, expected: dict, incremental: bool, dim: int) -> tuple[np.ndarray, str]:
    """``store.load``'s keys, sorted (``S16``), and its reason, the store read a row group at a time (no process
    holds every kept vector): the same checks (``store.load``, ``stamped.read_stamped``: the fingerprint, page
    CRCs, 16-byte distinct keys, finite unit vectors of ``dim`` floats); a store that fails one gives no keys."""
    none = np.zeros(0, "S16")
    if not incremental:
        return none, "leakage.incremental: false"
    if expected["precision"] == "int8":
        return none, "cpu_precision int8: vectors depend on their batch, none kept"
    path = folder / store.STORE
    if not path.is_file():
        return none, f"no cache in {folder}"
    try:
        with reading(path), pq.ParquetFile(path, page_checksum_verification=True) as parquet:
            stamped = json.loads((parquet.schema_arrow.metadata or {})[FINGERPRINT_KEY])
            if not isinstance(stamped, dict):
                return none, f"the cache {path} cannot be used (its fingerprint is not a JSON object)"
            changed = sorted(k for k in expected if stamped.get(k) != expected[k])
            if changed:
                return none, f"the cache fingerprint changed ({', '.join(changed)})"
            parts = [_checked_keys(parquet.read_row_group(g), dim) for g in range(parquet.num_row_groups)]
    except (OSError, ValueError, KeyError) as err:
        cause = err.__cause__ if isinstance(err, DamagedFile) and err.__cause__ else err
        return none, f"the cache {path} cannot be used ({one_line(cause)})"
    keys = np.sort(np.concatenate(parts)) if parts and all(p is not None for p in parts) else None
    if keys is None or bool(np.any(keys[1:] == keys[:-1])):
        return none, f"the cache {path} cannot be used (keys or vectors not as written)"
    return keys, "store found"


def _checked_keys(group: pa.Table, dim: int) -> np.ndarray | None:
    """A store row group's keys as ``S16``, or None when its rows fail ``store.rows_as_written``."""
    keys = group.column("key").to_pylist()
    ok = store.rows_as_written(keys, group.column("vector").combine_chunks(), dim) is not None
    return np.array(keys, "S16") if ok else None


def gather_bucket(folder: Path, b: int, n: int, shard: int, kept: Path | None):
    """Bucket ``b`` of ``n``'s used vectors (its keys in ``plan/<b>.parquet``, ``corpus_keys.plan_bucket``),
    found in ``embedded`` and in the kept store at ``kept`` (those of its rows, read by a filter on the bucket's
    key range that skips the other row groups by their statistics);
    written sorted to ``sorted/<b>.parquet`` and routed to the search shards (``plan/<b>-route.parquet``: a
    shard every ``shard`` positions). Returns ``(keys, matrix)`` of the ``side`` ones (those the driver scores
    itself). Raises ``RuntimeError`` when a used window has no vector (a call's file missing)."""
    plan = pq.read_table(folder / "plan" / f"{b:06d}.parquet")
    tables = [pq.read_table(f) for f in sorted((folder / "embedded").glob(f"{b:06d}-*.parquet"))]
    if kept is not None:
        used = pc.field("key").isin(plan.column("key").combine_chunks())
        tables.append(pq.read_table(kept, columns=["key", "vector"], filters=_key_range(b, n) & used))
    tables = [t.select(["key", "vector"]) for t in tables if t.num_rows]
    table = pa.concat_tables(tables) if tables else None
    wanted = plan.column("key").to_pylist()
    found = {k: r for r, k in enumerate(table.column("key").to_pylist())} if table is not None else {}
    missing = sum(k not in found for k in wanted)
    if missing:
        raise RuntimeError(f"leakage semantic (ray): {missing} windows of bucket {b} have no vector in {folder}")
    width = table.column("vector").type.list_size if table is not None else 1
    matrix = matrix_of(table.column("vector"), width)[[found[k] for k in wanted]] if wanted else np.zeros((0, 1))
    (folder / "sorted").mkdir(exist_ok=True)
    pq.write_table(keyed(wanted, matrix), folder / "sorted" / f"{b:06d}.parquet", compression="none")
    route = pq.read_table(folder / "plan" / f"{b:06d}-route.parquet")
    row, position = route.column("used").to_numpy(), route.column("position").to_numpy()
    owner = position // shard
    for k in np.unique(owner).tolist():
        mine = owner == k
        (folder / "route" / f"{k:06d}").mkdir(parents=True, exist_ok=True)
        vectors = pa.FixedSizeListArray.from_arrays(pa.array(matrix[row[mine]].ravel(), pa.float32()), width)
        part = pa.table({"position": pa.array(position[mine], pa.int64()), "vector": vectors})
        pq.write_table(part, folder / "route" / f"{k:06d}" / f"{b:06d}.parquet", compression="none")
    picked = np.flatnonzero(plan.column("side").to_numpy(zero_copy_only=False))
    return b"".join(wanted[i] for i in picked), matrix[picked]


def _key_range(b: int, n: int) -> pc.Expression:
    """A filter for bucket ``b`` of ``n``'s keys (``bucket_of``): its first-4-bytes range, as 16-byte scalars
    (against plain ``bytes`` the row groups' statistics are not used, and every row group is read)."""
    lo, hi = prefix_range(b, n)
    rows = pc.field("key") >= pa.scalar(lo.to_bytes(4, "big") + bytes(12), pa.binary(16))
    return (
        rows & (pc.field("key") < pa.scalar(hi.to_bytes(4, "big") + bytes(12), pa.binary(16))) if hi < 1 << 32 else rows
    )


def read_shard(folder: Path, k: int, start: int, n: int) -> np.ndarray:
    """Search shard ``k``'s vectors: the ``n`` corpus windows from position ``start``, in order, ``(n, dim)``
    float32. Raises ``RuntimeError`` when a position is missing or repeated."""
    files = sorted((folder / "route" / f"{k:06d}").glob("*.parquet"))
    table = pa.concat_tables([pq.read_table(f) for f in files])
    position = table.column("position").to_numpy()
    order = np.argsort(position, kind="stable")
    if not np.array_equal(position[order], np.arange(start, start + n)):
        raise RuntimeError(f"leakage semantic (ray): search shard {k} in {folder} is not windows {start}..{start + n}")
    return matrix_of(table.column("vector"), table.column("vector").type.list_size)[order]


def write_store(folder: Path, n: int, path: Path, key: dict) -> None:
    """The store at ``path`` (``store.write_rows``) from ``sorted/<bucket>.parquet`` of the ``n`` buckets, in
    order: the keys sorted, the rows regrouped into ``store.STORE_ROWS`` a row group."""
    files = [f for f in (folder / "sorted" / f"{b:06d}.parquet" for b in range(n)) if pq.read_metadata(f).num_rows]
    widths = [pq.read_schema(f).field("vector").type.list_size for f in files]  # a bucket without keys: no width
    store.write_rows(path, _regrouped(files, store.STORE_ROWS), key, widths[0] if widths else 1)


def _regrouped(files: list[Path], rows: int):
    """The rows of ``files`` in order, as tables of ``rows`` rows (the last one shorter), each one chunk."""
    held: list[pa.Table] = []
    count = 0
    for f in files:
        held.append(pq.read_table(f))
        count += held[-1].num_rows
        while count >= rows:
            table = pa.concat_tables(held)
            yield table.slice(0, rows).combine_chunks()
            held, count = [table.slice(rows)], count - rows
    if count:
        yield pa.concat_tables(held).combine_chunks()


@dataclass(frozen=True)
class Routed:
    """The corpus windows' vectors as the Ray engine keeps them: ``n`` windows in ``folder``'s ``route`` files
    (below), searched ``exact`` or not, in shards of ``shard`` windows from ``starts`` (``search.plan``)."""

    folder: Path
    n: int
    exact: bool
    starts: list[int]
    shard: int

    def __len__(self) -> int:
        return self.n
