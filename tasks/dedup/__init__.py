"""dedup stage: exact and MinHash near-duplicate clusters over all sources at once.

Reads ``<data>/ingest/<source>/`` (a shard per input file; ``tasks.common.files.shards``), writes
``<data>/dedup/<source>.parquet`` (every row, plus ``cluster_id`` and ``is_duplicate``) and
``<data>/dedup/clusters.jsonl`` (one line per cluster of two or more).

Method (text-dedup / datatrove style, with verification):
1. Normalize (``tasks.common.matching.textnorm``: Unicode format characters (Cf) removed, NFKC, casefold, whitespace
   collapsed). Rows with the same normalized text are exact duplicates (md5 of the normalized text).
2. One representative per exact group gets a MinHash signature over its word ``n``-gram shingles (Broder 1997)
   from the MinHash kit the leakage audit shares (``tasks.common.matching.minhash``: datasketch's ``affine32`` values,
   computed with numpy in forked worker processes, which inherit the texts as Arrow arrays; format characters
   are removed in Arrow; a shard's words are cut by one ``bytes.translate`` and Arrow's whitespace split, and
   only words a worker has not seen yet are hashed in Python, pieces holding a non-ASCII character split by the
   regex; shards hold equal shares of the text bytes, a multiple of ``num_proc`` of them). Documents with
   fewer than ``n`` words have no shingle: they are matched exactly only ("short docs").
3. One LSH banding over all sources (bands and rows from datasketch's optimiser) proposes candidate pairs;
   each is merged only if its exact Jaccard on the shingle sets reaches the threshold, so every merge is a
   true near duplicate; no Jaccard is computed for a candidate whose rows are already joined, and the others
   are merged in compiled code on ``num_proc`` threads (``tasks/common/matching/pairjaccard.py``). The sets are
   held as sorted 64-bit shingle hashes (two distinct shingles collide with probability ~2**-64). Clusters
   are the connected components (union-find), so a chain A~B~C joins A and C
   even when J(A, C) is below the threshold; ``clusters.jsonl`` shows the chain. Signatures and Jaccards of texts
   seen before come from ``<data>/dedup_index`` (``incremental.py``: the rule, and why outputs stay equal). The
   remaining parts (row labels, output files, metrics) are ``tasks/dedup/outputs.py``; the Parquet files are
   written in a thread while the cluster report is built. Nothing here imports pandas (pyarrow would on
   ``pa.array`` of a list).

Which rows may be merged, per source, is ``tasks/dedup/policy.py`` (exact and near dedup on or off, a word
floor for exact copies; a merge needs both rows' policies to allow its kind). What the merges cost in labelled
data (label and tag conflicts, decided by ``conflict_policy`` ``majority`` or ``drop_all``; entities removed; the
largest cluster) is ``tasks/dedup/conflicts.py``; conflicts and an oversized cluster are logged as warnings.

Keep rule (deterministic): a ``task`` row before a ``pretrain`` row (labelled data is scarcer), then the longest
normalized text (characters), then the smallest ``doc_id``; in a conflicting cluster, task rows that lost its
label or entity vote come last (``conflicts.py``). ``cluster_id`` is the ``doc_id`` of the cluster's first row
in the order before the vote (a singleton's own). With ``keep_one_per: role`` (the default) each cluster keeps its
first row *within each role*: a pretraining document that duplicates a task document is not a duplicate here
(it keeps the shared ``cluster_id``); train-side copies of evaluation documents are the leakage stage's to
remove, and copies of train-split documents are legitimate in-domain pretraining text. Duplicates within a role
are still marked. With ``keep_one_per: cluster`` one row survives per cluster across roles.
"""

from __future__ import annotations

import hashlib
import multiprocessing
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tasks.common.matching import minhash, pairjaccard, textnorm
from tasks.common.matching.unionfind import UnionFind
from tasks.config import Paths
from tasks.config.corpus.dedup import DedupParams
from tasks.dedup import policy, signing
from tasks.dedup.conflicts import drop_conflicting, find_conflicts, largest_component, resolve
from tasks.dedup.corpus import Corpus, read_corpus
from tasks.dedup.near import _progress, merge_near
from tasks.dedup.outputs import (
    ROLE_RANK,
    clear_dir,
    dedup_metrics,
    label_rows,
    lsh_summary,
    warn_about,
    write_cluster_report,
    write_sources,
)


def run(cfg: DedupParams, paths: Paths, log) -> dict[str, Any]:
    """Cluster exact and near duplicates of every ingest source; write the dedup outputs; return metrics.

    Raises ``FileNotFoundError`` if ``<data>/ingest`` is missing and ``ValueError`` naming the file for a
    missing column, a null text, an unknown role or a ``doc_id`` seen twice, and for a
    ``dedup.source_policy`` entry naming no ingest source.
    """
    corpus = read_corpus(paths.stage_data("ingest"), with_text=cfg.engine == "local")
    policies = policy.resolve(cfg, list(corpus.files))
    log.info(f"dedup: {len(corpus.doc_id)} docs from {len(corpus.files)} sources, engine {cfg.engine}")
    from tasks.dedup import incremental  # imported here: it builds on this module's DocSignatures

    index = paths.stage_data("dedup_index")
    docs = incremental.sign(corpus, cfg, index, log) if cfg.engine == "local" else sign_on_ray(paths, corpus, cfg)
    allowed = policy.row_policy(policies, corpus.source, docs.n_words, docs.n_chars, cfg.shingle_size_words)
    rank = keep_rank(corpus, docs)
    clusters = UnionFind(priority=lambda row: rank[row])  # root = the cluster's kept row
    exact_rep = merge_exact(docs.text_hash, rank, clusters, allowed.exact)
    bands, rows = band_shape(cfg)
    edges, lsh_counts = merge_near(docs, exact_rep, rank, clusters, cfg, (bands, rows), allowed.near)
    cluster = [clusters.find(i) for i in range(len(rank))]
    conflicts = find_conflicts(corpus, docs, cluster)
    resolution = resolve(corpus, cluster, conflicts, cfg)
    labels = label_rows(corpus, docs, rank, cluster, cfg, exact_rep, resolution.losers)
    drop_conflicting(corpus, labels, resolution.dropped, cfg)
    out_dir = paths.stage_data("dedup")
    clear_dir(out_dir)
    # Parquet and .npy writes (GIL mostly released) while the report is built in Python; the index's Jaccards
    # are written as `saving` ends, after the report, which computes some
    with incremental.saving(index, docs, cfg, log) as save_entries, ThreadPoolExecutor(1) as writer:
        jobs = [writer.submit(write_sources, out_dir, corpus, labels, clear=False), writer.submit(save_entries)]
        found = (edges, conflicts, resolution)
        report = write_cluster_report(out_dir / "clusters.jsonl", corpus, docs, labels, *found, cfg)
        for job in jobs:
            job.result()
    metrics = dedup_metrics(corpus, labels, report, policies, allowed.exact_protected)
    metrics["largest_component"] = largest_component(corpus, labels)
    metrics["lsh"] = {**lsh_summary(cfg.threshold, bands, rows), **lsh_counts}
    warn_about(report, conflicts, metrics["all"]["conflict_rules"], metrics["largest_component"], cfg)
    log.info(f"dedup: {metrics['all']['docs_removed']} of {len(corpus.doc_id)} docs marked duplicate")
    return metrics


# ---------------------------------------------------------------------------------------------- signatures


@dataclass
class DocSignatures:
    """Per-document results of the worker pass; arrays have one row per document."""

    text_hash: list[str]  # md5 hex of the normalized text
    n_words: np.ndarray  # (docs,) int64
    n_chars: np.ndarray  # (docs,) int64, length of the normalized text
    signature: np.ndarray  # (docs, num_perm) uint32; all 2**32-1 for docs with fewer words than the shingle size
    shingles: list[np.ndarray]  # per doc: sorted unique uint64 shingle hashes (the set that Jaccard is taken on)

    known_pairs: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # sorted pair keys
    known_jaccards: np.ndarray = field(default_factory=lambda: np.zeros(0))  # (len(known_pairs),) float64
    # (flat uint64, (docs,) starts, (docs,) sizes): every ``shingles[i]`` is ``flat[starts[i]:][:sizes[i]]``;
    # set when they were signed in one pass, so the Jaccards read them without copying them together first
    packed: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    def jaccards(self, left: np.ndarray, right: np.ndarray, num_proc: int) -> np.ndarray:
        """Exact Jaccard (``minhash.jaccard``) of rows ``left[k]`` and ``right[k]``: ``(pairs,)`` float64.

        A pair computed by an earlier call is looked up (the cluster report asks again for most of the pairs
        the LSH pass checked; Jaccard is symmetric); the others are computed by ``pairjaccard.jaccards`` on
        ``num_proc`` threads, and remembered."""
        left, right = np.asarray(left, np.int64), np.asarray(right, np.int64)
        keys = self.pair_keys(left, right)
        at = np.searchsorted(self.known_pairs, keys).clip(max=max(len(self.known_pairs) - 1, 0))
        known = self.known_pairs[at] == keys if len(self.known_pairs) else np.zeros(len(keys), bool)
        values = np.empty(len(keys))
        values[known] = self.known_jaccards[at[known]]
        values[~known] = self._compute(left[~known], right[~known], num_proc)
        pairs, first = np.unique(np.concatenate([self.known_pairs, keys[~known]]), return_index=True)
        self.known_pairs, self.known_jaccards = pairs, np.concatenate([self.known_jaccards, values[~known]])[first]
        return values

    def pair_keys(self, left: np.ndarray, right: np.ndarray) -> np.ndarray:
        """One int64 key per unordered pair of rows: what ``known_pairs`` holds."""
        return np.minimum(left, right) * len(self.text_hash) + np.maximum(left, right)

    def candidates(self, signed: list[int], bands_rows: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
        """LSH candidates among the ``signed`` rows: ``(left, right)`` int64 rows sharing a band key, ``left``
        before ``right`` in ``signed``, sorted by (position of left, position of right) in ``signed``."""
        keys = minhash.band_keys(self.signature[signed], *bands_rows)
        first, second = shared_bucket_pairs(keys)
        rows = np.asarray(signed, np.int64)
        return rows[first], rows[second]

    def _compute(self, left: np.ndarray, right: np.ndarray, num_proc: int) -> np.ndarray:
        return pairjaccard.jaccards(self.shingles, left, right, threads=num_proc, packed=self.packed)


def shared_bucket_pairs(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every pair of rows ``a < b`` of ``keys`` (``(rows, bands)`` band keys) equal in at least one band, as two
    int64 arrays sorted by ``(a, b)``: ``minhash.candidate_pair_arrays(keys, keys)`` without its ``(x, x)`` pairs
    and second orders, which a self-join would build (twice the pairs, plus every row once per band) only to
    drop them. Per band, rows are sorted by key and each run of equal keys gives its pairs."""
    n, found = len(keys), [np.zeros(0, np.int64)]
    for band in range(keys.shape[1] if n else 0):
        order = np.argsort(keys[:, band], kind="stable")
        ordered = keys[order, band]
        run_start = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
        run_end = np.r_[run_start[1:], n]  # each position's partners are the later positions of its run
        ends = np.repeat(run_end, run_end - run_start)
        at, partner = minhash.expand_ranges(np.arange(n) + 1, ends)
        a, b = order[at], order[partner]
        found.append(np.minimum(a, b) * n + np.maximum(a, b))
    pairs = minhash.sorted_unique(np.concatenate(found))
    return pairs // max(n, 1), pairs % max(n, 1)


def sign_documents(texts: list[str] | pa.Array, cfg: DedupParams) -> DocSignatures:
    """Hash, count and MinHash-sign every text, sharded over ``cfg.num_proc`` processes, with a progress bar.

    Shards are contiguous and results come back in order, so the output does not depend on ``num_proc``.
    The texts reach the forked workers by inheritance (each job is a row range, not a pickled list of texts),
    and each shard comes back as a few flat arrays (``_sign_packed``), not one array per document.
    """
    global _FORKED_TEXTS
    a, b = minhash.permutations(cfg.num_perm, cfg.seed)
    sizes = _text_sizes(texts)
    jobs = [(start, stop, cfg.shingle_size_words, a, b)
            for start, stop in balanced_shards(sizes, cfg.shard_size_docs, cfg.num_proc)]  # fmt: skip
    parts = []
    signing.prepare(int(sizes.sum()))  # before the fork: the workers inherit the compiled kernels
    _FORKED_TEXTS = texts
    try:
        with _progress(total=len(texts), desc="dedup: minhash", unit="doc") as bar:
            for part in _map(_sign_range, jobs, cfg.num_proc):
                parts.append(part)
                bar.update(len(part[0]))
    finally:
        _FORKED_TEXTS = []
    empty = (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros((0, cfg.num_perm), np.uint32),
             np.zeros(0, np.uint64), np.zeros(0, np.int64))  # fmt: skip
    joined = [np.concatenate([none] + [part[k + 1] for part in parts]) for k, none in enumerate(empty)]
    return _unpacked(([h for part in parts for h in part[0]], *joined))


def balanced_shards(sizes: np.ndarray, max_docs: int, num_proc: int) -> list[tuple[int, int]]:
    """Contiguous ``(start, stop)`` row ranges covering ``len(sizes)`` rows, cut where the running total of
    ``sizes`` (``(rows,)``, each text's length: the work) crosses equal fractions, so every worker gets the same
    work: as many ranges as the fewest multiple of ``num_proc`` that ``max_docs`` rows per range allows, and a
    range still over ``max_docs`` rows cut into equal parts. (Equal row counts left one worker busy for 60% of
    the pass at 1x: long articles and short posts sit in different parts of the corpus.)"""
    if not len(sizes):
        return []
    count = -(-len(sizes) // max_docs)
    count = -(-count // num_proc) * num_proc
    running = np.cumsum(sizes, dtype=np.float64)
    cuts = np.searchsorted(running, running[-1] * np.arange(1, count) / count) + 1  # after the row crossing
    bounds = np.unique(np.concatenate([[0], cuts, [len(sizes)]])).tolist()
    ranges = []
    for start, stop in zip(bounds, bounds[1:]):
        parts = -(-(stop - start) // max_docs)
        edges = [start + (stop - start) * k // parts for k in range(parts + 1)]
        ranges += list(zip(edges, edges[1:]))
    return ranges


def _text_sizes(texts: list[str] | pa.Array) -> np.ndarray:
    """``(texts,)`` int64: UTF-8 bytes of an Arrow array's texts, characters of a list's."""
    if isinstance(texts, pa.Array):
        return minhash.numpy_view(pc.binary_length(texts)).astype(np.int64)  # texts are never null here
    return np.fromiter(map(len, texts), np.int64, count=len(texts))


_FORKED_TEXTS: list[str] | pa.Array = []  # read by forked signing workers: inherited at fork, never pickled


def _sign_range(job: tuple) -> tuple:
    start, stop, n, a, b = job
    return _sign_packed(_FORKED_TEXTS[start:stop], n, a, b)


def _unpacked(packed: tuple) -> DocSignatures:
    """``_sign_packed``'s arrays as ``DocSignatures``: each document's shingle set a view of the one flat array,
    which the Jaccards use whole (``DocSignatures.packed``)."""
    text_hash, n_words, n_chars, signature, flat, sizes = packed
    ends = np.cumsum(sizes)
    starts = ends - sizes
    shingles = [flat[start:stop] for start, stop in zip(starts.tolist(), ends.tolist())]
    return DocSignatures(text_hash, n_words, n_chars, signature, shingles, packed=(flat, starts, sizes))


def sign_on_ray(paths: Paths, corpus: Corpus, cfg: DedupParams) -> DocSignatures:
    """``sign_documents`` on Ray Data (``tasks/dedup/ray_engine.py``, imported only here: Ray is optional)."""
    from tasks.dedup import ray_engine

    return ray_engine.sign_documents([path for files in corpus.files.values() for path in files], corpus, cfg)


def _map(func, jobs: list, num_proc: int):
    if num_proc == 1 or len(jobs) <= 1:
        yield from map(func, jobs)
        return
    # fork: workers need only numpy and textnorm, and spawn would re-import pandas/datasketch in each.
    with ProcessPoolExecutor(num_proc, mp_context=multiprocessing.get_context("fork")) as pool:
        yield from pool.map(func, jobs)


PIECE_CACHE_MAX = 1_000_000  # distinct pieces one process remembers across its shards (about 150 bytes each)
_PIECES = minhash.PieceHashes()  # per process: a forked worker fills its own copy over its shards


def _sign_shard(job: tuple) -> DocSignatures:
    return _unpacked(_sign_packed(*job))


def _sign_packed(texts: list[str] | pa.Array, n: int, a: np.ndarray, b: np.ndarray) -> tuple:
    """A shard's results as a few arrays (cheap to pickle back from a worker): md5s, word and character counts,
    signatures, and the shingle sets flattened (``signing.shingle_sets``)."""
    normalized = textnorm.normalize_many(texts)
    if len(_PIECES) > PIECE_CACHE_MAX:
        _PIECES.clear()
        _PIECES.words.clear()
    values, doc = minhash.word_hash_stream(normalized, _PIECES.words, _PIECES)
    flat, sizes = signing.shingle_sets(values, doc, len(normalized), n)
    hashes = [hashlib.md5(text.encode("utf-8")).hexdigest() for text in normalized]
    n_words = np.bincount(doc, minlength=len(normalized)).astype(np.int64)
    n_chars = np.fromiter(map(len, normalized), dtype=np.int64, count=len(normalized))
    return hashes, n_words, n_chars, signing.signatures(flat, sizes, a, b), flat, sizes


# ---------------------------------------------------------------------------------------------- clustering


def keep_rank(corpus: Corpus, docs: DocSignatures) -> np.ndarray:
    """Position of each row in the keep order (0 = kept first): task before pretrain, longer, smaller doc_id."""
    order = sorted(
        range(len(corpus.doc_id)),
        key=lambda i: (ROLE_RANK[corpus.role[i]], -int(docs.n_chars[i]), corpus.doc_id[i]),
    )
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    return rank


def merge_exact(text_hash: list[str], rank: np.ndarray, clusters: UnionFind, allowed: np.ndarray) -> list[int]:
    """Union the ``allowed`` rows with equal normalized text; returns each row's exact-group representative
    (the group's first row in rank; a row not allowed is its own)."""
    rep_of_hash: dict[str, int] = {}
    for i in np.argsort(rank):
        if allowed[i]:
            rep_of_hash.setdefault(text_hash[i], int(i))
    exact_rep = [rep_of_hash[h] if allowed[i] else i for i, h in enumerate(text_hash)]
    for i, rep in enumerate(exact_rep):
        clusters.union(i, rep)
    return exact_rep


def band_shape(cfg: DedupParams) -> tuple[int, int]:
    """``(bands, rows)`` of the LSH for ``cfg`` (``minhash.lsh_bands_rows``); raises ``ValueError`` naming the
    keys when datasketch's optimiser finds no shape (fewer than 2 bands: raise ``num_perm`` or lower the
    threshold)."""
    try:
        return minhash.lsh_bands_rows(cfg.threshold, cfg.num_perm, cfg.lsh_weights)
    except ValueError as err:
        raise ValueError(
            f"dedup.threshold={cfg.threshold}, dedup.num_perm={cfg.num_perm}, dedup.lsh_*_weight="
            f"{cfg.lsh_weights}: datasketch finds no LSH shape ({err}); a high threshold needs more num_perm"
        ) from None
