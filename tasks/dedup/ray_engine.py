"""dedup with ``engine: ray``: the per-word work on a Ray cluster, the same outputs as ``local``, byte for byte.

What runs where:

1. **Signatures** (Ray Data): ``read_parquet`` of the ingest shards, then ``map_batches`` of the local
   engine's own shard function (normalize, shingle, md5, MinHash) plus each doc's LSH band keys. The
   blocks, shingle sets included, stay in the object store (spilled to disk by Ray when it fills).
2. **Row facts** (driver): md5 (16 raw bytes, ``S16``), word and character counts per row, 32 bytes a doc, for
   the keep order and the policies, as in ``local``; fetched a block at a time, each block's rows the next run of
   the ingest rows (Ray Data keeps the files' order; each block's ``doc_id`` digest is checked), so no doc_id
   comes back. The ingest files' other columns but ``text`` are read on the driver
   (``corpus.read_corpus`` without texts: doc_id, source, role, label, tags, group; a null text is found from
   the Parquet statistics), and the labels are numpy arrays (``labels.RowLabels``).
3. **Candidates** (Ray tasks): a hash shuffle by ``(band, key)``: each block's band keys of the signed rows
   are split into ``P`` partitions by key hash; each partition's reducer groups equal keys and emits every
   pair of its group (``left < right`` in keep order), sorted and unique, so the union over partitions is
   the ``local`` candidate set exactly.
4. **Verification** (Ray tasks): exact Jaccard of each candidate, one task per (left block, right block),
   reading only those two blocks' shingle sets.
5. **Components** (driver): a union-find on the driver, not a distributed algorithm. The candidate list
   (16 bytes a pair) and its Jaccards come back, and the sequential keep-order union-find of ``local`` runs
   on them unchanged (its order gives the merges ``clusters.jsonl`` lists and the counts; a distributed
   connected-components pass would need a per-component replay of it, designed in docs/scaling.md "Beyond
   10^9"), over one int64 array of the rows (``near.Forest``). Before
   fetching, the driver sums the reducers' pair counts and raises ``MemoryError`` if ``DRIVER_BYTES_PER_PAIR``
   per pair exceeds its free memory. docs/scaling.md has the measured candidates per doc and where a driver
   stops fitting.
6. **Outputs** (Ray tasks): ``write_sources``, one task per source, reads the source's ingest files and writes
   ``<source>.parquet`` with the ``cluster_id`` and ``is_duplicate`` columns the driver sends (no table with
   texts is ever on the driver; the workers must see the driver's files: one machine or a shared file
   system). ``clusters.jsonl`` and the metrics are the driver's, from the row facts.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import psutil
import pyarrow as pa
import pyarrow.compute as pc

from tasks.common.files.shards import read_source
from tasks.common.matching import minhash
from tasks.common.runtime import raycluster
from tasks.config.corpus.dedup import DedupParams
from tasks.dedup.corpus import Corpus
from tasks.dedup.outputs import write_source
from tasks.dedup.signatures import DocSignatures, band_shape, sign_shard

PAIR_BLOCK = 20_000  # pairs per Jaccard task at most: a Ray task's share, kept small enough to balance
# driver bytes per candidate pair: rows (16), Jaccard (8), the Jaccard memo (16), sort and merge temporaries (24)
DRIVER_BYTES_PER_PAIR = 64


def sign_documents(files: list[Path], corpus: Corpus, cfg: DedupParams) -> DocSignatures:
    """Sign every row of ``files`` (the ingest shards ``corpus`` was read from) on Ray Data.

    Returns a ``DocSignatures`` whose row facts are on the driver and whose shingle sets stay in Ray's
    object store; its ``candidates`` and ``jaccards`` run as Ray tasks. Raises ``ImportError`` without Ray.
    """
    ray = raycluster.connect(cfg.ray)
    bands, rows = band_shape(cfg)
    a, b = minhash.permutations(cfg.num_perm, cfg.seed)
    shards = ray.data.read_parquet([str(f) for f in files], columns=["doc_id", "text"])
    # a file is one read task: split it, so that the signing and the later tasks spread over the workers
    dataset = shards.repartition(target_num_rows_per_block=cfg.shard_size_docs).map_batches(
        _sign_batch,
        batch_format="pyarrow",
        batch_size=cfg.shard_size_docs,
        fn_kwargs={"n": cfg.shingle_size_words, "perms": (a, b), "bands_rows": (bands, rows)},
    )
    # the blocks in file order, so a block's rows are a run of the corpus's rows (from_blocks checks it)
    dataset.context.execution_options.preserve_order = True
    blocks = dataset.materialize().to_arrow_refs()
    return RaySignatures.from_blocks(blocks, [_block_meta.remote(block) for block in blocks], corpus.doc_id.array)


def _sign_batch(batch: pa.Table, n: int, perms, bands_rows) -> pa.Table:
    """One Ray Data batch: ``sign_shard``'s results (the md5s as 16 raw bytes) with each doc's ``doc_id``, band keys
    and shingle set."""
    part = sign_shard((batch.column("text").to_pylist(), n, *perms))
    keys = minhash.band_keys(part.signature, *bands_rows)
    digests = pa.py_buffer(bytes.fromhex("".join(part.text_hash)))
    return pa.table(
        {
            "doc_id": batch.column("doc_id"),
            "text_hash": pa.Array.from_buffers(pa.binary(16), len(part.text_hash), [None, digests]),
            "n_words": pa.array(part.n_words),
            "n_chars": pa.array(part.n_chars),
            "keys": pa.FixedSizeListArray.from_arrays(pa.array(keys.reshape(-1)), bands_rows[0]),
            "shingles": _binary_column(part.shingles),
        }
    )


def _binary_column(arrays: list[np.ndarray]) -> pa.Array:
    """``large_binary`` with one uint64 array's bytes per row, built from two buffers (no bytes object per row)."""
    ends = np.cumsum([0] + [8 * len(x) for x in arrays], dtype=np.int64)
    data = np.concatenate([np.zeros(0, np.uint64)] + arrays).view(np.uint8)
    buffers = [None, pa.py_buffer(ends), pa.py_buffer(data)]
    return pa.LargeBinaryArray.from_buffers(pa.large_binary(), len(arrays), buffers)


@raycluster.remote
def _block_meta(block: pa.Table) -> tuple[bytes, bytes, np.ndarray, np.ndarray]:
    """A block's row facts for the driver: its ``doc_id`` digest (``ids_digest``), the md5s (16 bytes a row, one
    after another), ``n_words`` and ``n_chars`` (``(rows,)`` int64); ~32 bytes a row, no doc_id."""
    hashes = block.column("text_hash").combine_chunks()
    data = hashes.buffers()[1].to_pybytes()[16 * hashes.offset :][: 16 * len(hashes)]
    counts = [block.column(name).to_numpy().astype(np.int64) for name in ("n_words", "n_chars")]
    return ids_digest(block.column("doc_id")), data, *counts


def ids_digest(ids: pa.Array | pa.ChunkedArray) -> bytes:
    """md5 of a string column's lengths (int64) and UTF-8 bytes: equal for the same ids, whatever the Arrow string
    type or chunks (Ray may hand over ``large_string``)."""
    ids = ids.cast(pa.large_string())
    ids = ids.combine_chunks() if isinstance(ids, pa.ChunkedArray) else ids
    if not len(ids):
        return hashlib.md5().digest()
    _, offsets, data = ids.buffers()
    bounds = np.frombuffer(offsets, np.int64)[ids.offset : ids.offset + len(ids) + 1]
    digest = hashlib.md5(np.diff(bounds).tobytes())
    digest.update(memoryview(data)[int(bounds[0]) : int(bounds[-1])] if bounds[-1] > bounds[0] else b"")
    return digest.digest()


class RaySignatures(DocSignatures):
    """``DocSignatures`` whose shingle sets live in Ray blocks: block ``k`` holds rows ``starts[k]:starts[k + 1]``
    in order (Ray Data's blocks in file order, checked by ``from_blocks``)."""

    blocks: list
    starts: np.ndarray  # (blocks + 1,) int64

    @classmethod
    def from_blocks(cls, blocks: list, meta: list, doc_ids: pa.Array) -> RaySignatures:
        """The row facts of the blocks' ``_block_meta`` (refs, fetched one at a time), each block's rows the next
        run of ``doc_ids``' rows. Raises ``ValueError`` when the blocks hold other rows, or in another order
        (compared by ``ids_digest``), than the ingest files."""
        import ray

        n_rows = len(doc_ids)
        counts = np.empty(n_rows, np.int64), np.empty(n_rows, np.int64)
        docs = cls(np.empty(n_rows, "S16"), *counts, np.zeros((0, 0), np.uint32), [])
        docs.blocks, starts = blocks, [0]
        for k, ref in enumerate(meta):
            digest, hashes, n_words, n_chars = ray.get(ref)
            start, stop = starts[-1], starts[-1] + len(n_words)
            if stop > n_rows or digest != ids_digest(doc_ids.slice(start, stop - start)):
                raise ValueError(
                    f"dedup (ray): Ray Data's block {k} does not hold ingest rows {start}:{stop} in file order"
                )
            docs.text_hash[start:stop] = np.frombuffer(hashes, "S16")
            docs.n_words[start:stop], docs.n_chars[start:stop] = n_words, n_chars
            starts.append(stop)
        if starts[-1] != n_rows:
            raise ValueError(f"dedup (ray): Ray Data read {starts[-1]} rows for the {n_rows} rows of the ingest files")
        docs.starts = np.asarray(starts, np.int64)
        return docs

    def located(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(block, row in block)`` of each of ``rows``: two ``(len(rows),)`` int64 arrays."""
        block = np.searchsorted(self.starts, rows, side="right") - 1
        return block, rows - self.starts[block]

    def candidates(self, signed: np.ndarray, bands_rows: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
        """As ``DocSignatures.candidates``, by a hash shuffle of the band keys over Ray tasks."""
        import ray

        position = np.full(len(self.text_hash), -1, np.int64)
        position[signed] = np.arange(len(signed))
        parts = max(raycluster.cpus(ray), 1)
        split = _partition_keys.options(num_returns=parts)
        bounds = zip(self.starts.tolist(), self.starts[1:].tolist())
        mapped = [split.remote(block, position[start:stop], parts) for block, (start, stop) in zip(self.blocks, bounds)]
        mapped = [m if isinstance(m, list) else [m] for m in mapped]
        reduce = _bucket_pairs.options(num_returns=2)
        counts, reduced = zip(*[reduce.remote(len(signed), *[m[p] for m in mapped]) for p in range(parts)])
        _check_driver_fits(sum(raycluster.gather(list(counts), "dedup: lsh")))
        pairs = minhash.sorted_unique(np.concatenate([np.zeros(0, np.int64)] + ray.get(list(reduced))))
        rows = np.asarray(signed, np.int64)
        return rows[pairs // max(len(signed), 1)], rows[pairs % max(len(signed), 1)]

    def _compute(self, left: np.ndarray, right: np.ndarray, num_proc: int) -> np.ndarray:
        """Exact Jaccards: one Ray task per left block and at most ``PAIR_BLOCK`` pairs, given the blocks it reads."""
        out = np.empty(len(left))
        if not len(left):
            return out
        block = self.located(left)[0]
        order = np.argsort(block, kind="stable")
        starts = np.flatnonzero(np.diff(block[order], prepend=-1))
        groups = np.split(order, starts[1:])
        jobs = [chunk for group in groups for chunk in np.array_split(group, -(-len(group) // PAIR_BLOCK))]
        refs = [self._jaccard_job(left[job], right[job]) for job in jobs]
        for job, values in zip(jobs, raycluster.gather(refs, "dedup: jaccard")):
            out[job] = values
        return out

    def _jaccard_job(self, left: np.ndarray, right: np.ndarray):
        """A Ray task for pairs whose left rows share one block, with that block and each block the right rows need."""
        (left_block, left_at), (right_block, right_at) = self.located(left), self.located(right)
        needed, slot = np.unique(right_block, return_inverse=True)
        blocks = [self.blocks[left_block[0]]] + [self.blocks[b] for b in needed]
        return _jaccard_task.remote(left_at, right_at, slot, *blocks)


def write_sources(jobs: Iterable[tuple[list[Path], Path, pa.Array, pa.Array]]) -> None:
    """``outputs.write_source`` of each ``(ingest files, output path, cluster_id, is_duplicate)`` as a Ray task that
    reads the source's files itself: no table with texts comes to the driver (the workers see the driver's
    files: one machine, or a shared file system). The same bytes as ``engine: local`` writes. A job's arrays are
    copied to the object store as its task is sent, and are not held here after that."""
    raycluster.gather([_write_source.remote(*job) for job in jobs], "dedup: write")


@raycluster.remote
def _write_source(files: list[Path], path: Path, cluster_id: pa.Array, is_duplicate: pa.Array) -> None:
    write_source(read_source(files), path, cluster_id, is_duplicate)


def _check_driver_fits(pairs: int) -> None:
    """Raise ``MemoryError`` before the candidate pairs come to the driver if they would not fit in its free memory
    (``DRIVER_BYTES_PER_PAIR`` each: an upper bound, since a pair found in several bands is counted once per band)."""
    need, free = pairs * DRIVER_BYTES_PER_PAIR, psutil.virtual_memory().available
    if need > free:
        raise MemoryError(
            f"dedup (ray): up to {pairs:,} candidate pairs need about {need / 2**30:.1f} GiB on the "
            f"driver for the union-find, {free / 2**30:.1f} GiB free: run the driver on a larger "
            "machine, or raise dedup.threshold (fewer candidates)"
        )


@raycluster.remote
def _partition_keys(block: pa.Table, pos: np.ndarray, parts: int):
    """The map side of the shuffle: ``(band, key, position)`` of the block's signed rows (``pos`` is each block
    row's position in keep order among the signed rows, -1 if unsigned), split by key hash."""
    signed = pos >= 0
    keys = pc.list_flatten(block.column("keys")).to_numpy().reshape(block.num_rows, -1)[signed]
    bands = keys.shape[1] if keys.ndim == 2 else 0
    band = np.tile(np.arange(bands, dtype=np.int64), len(keys))
    key, pos = keys.reshape(-1), np.repeat(pos[signed], bands)
    target = ((key ^ (band.astype(np.uint64) * minhash.MULTIPLIER)) % np.uint64(parts)).astype(np.int64)
    out = [(band[target == p], key[target == p], pos[target == p]) for p in range(parts)]
    return out if parts > 1 else out[0]


@raycluster.remote
def _bucket_pairs(n_signed: int, *parts) -> tuple[int, np.ndarray]:
    """The reduce side: every pair ``first * n_signed + second`` (``first < second``) that shares a ``(band, key)``,
    and how many (the driver checks that they fit before it fetches them)."""
    band, key, pos = (
        np.concatenate([np.zeros(0, dtype)] + [p[k] for p in parts])
        for k, dtype in enumerate((np.int64, np.uint64, np.int64))
    )
    order = np.lexsort((pos, key, band))
    band, key, pos = band[order], key[order], pos[order]
    new = np.ones(len(pos), bool)
    new[1:] = (band[1:] != band[:-1]) | (key[1:] != key[:-1])
    group_end = np.append(np.flatnonzero(new)[1:], len(pos))[np.cumsum(new) - 1]
    rows, partner = minhash.expand_ranges(np.arange(len(pos)) + 1, group_end)
    pairs = minhash.sorted_unique(pos[rows] * n_signed + pos[partner])
    return len(pairs), pairs


@raycluster.remote
def _jaccard_task(left_at: np.ndarray, right_at: np.ndarray, slot: np.ndarray, left_block: pa.Table, *right_blocks):
    """``minhash.jaccards_with`` of row ``left_at[k]`` of ``left_block`` and row ``right_at[k]`` of
    ``right_blocks[slot[k]]``; the shingle sets are read in place from the blocks' Arrow buffers."""
    left_sets, right_sets = _shingle_sets(left_block), [_shingle_sets(block) for block in right_blocks]
    out = np.empty(len(left_at))
    order = np.argsort(left_at, kind="stable")
    starts = np.flatnonzero(np.diff(left_at[order], prepend=-1))
    for group in np.split(order, starts[1:]):
        ys = [right_sets[s](j) for s, j in zip(slot[group].tolist(), right_at[group].tolist())]
        out[group] = minhash.jaccards_with(left_sets(int(left_at[group[0]])), ys)
    return out


def _shingle_sets(block: pa.Table):
    """``row -> (shingles,) uint64`` views into the ``shingles`` column of ``block`` (no copy)."""
    column = block.column("shingles").combine_chunks()
    _, offsets, data = column.buffers()
    bounds = np.frombuffer(offsets, np.int64)[column.offset : column.offset + len(column) + 1] // 8
    values = np.frombuffer(data, np.uint64, count=int(bounds[-1])) if bounds[-1] else np.zeros(0, np.uint64)
    return lambda row: values[bounds[row] : bounds[row + 1]]
