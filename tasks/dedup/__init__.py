"""dedup stage: exact and MinHash near-duplicate clusters over all sources at once.

Reads ``<data>/ingest/<source>.parquet``, writes ``<data>/dedup/<source>.parquet`` (every row, plus
``cluster_id`` and ``is_duplicate``) and ``<data>/dedup/clusters.jsonl`` (one line per cluster of two or more).

Method (text-dedup / datatrove style, with verification):
1. Normalize (``tasks.common.textnorm``: Unicode format characters (Cf) removed, NFKC, casefold, whitespace
   collapsed). Rows with the same normalized text are exact duplicates (md5 of the normalized text).
2. One representative per exact group gets a MinHash signature over its word ``n``-gram shingles (Broder 1997)
   from the MinHash kit the leakage audit shares (``tasks.common.minhash``: datasketch's ``affine32`` values,
   computed with numpy in worker processes; normalizing and word splitting run over a whole shard at once in
   Arrow, and only distinct words are hashed in Python). Documents with fewer than ``n`` words have no shingle: they are
   matched exactly only ("short docs").
3. One LSH banding over all sources (bands and rows from datasketch's optimiser) proposes candidate pairs;
   each is merged only if its exact Jaccard on the shingle sets reaches the threshold, so every merge is a
   true near duplicate. The sets are held as sorted 64-bit shingle hashes (two distinct shingles collide with
   probability ~2**-64). Clusters are the connected components (union-find), so a chain A~B~C joins A and C
   even when J(A, C) is below the threshold; ``clusters.jsonl`` shows the chain. The remaining parts (row
   labels, output files, metrics) are ``tasks/dedup/outputs.py``.

Which rows may be merged, per source, is ``tasks/dedup/policy.py`` (exact and near dedup on or off, a word
floor for exact copies; a merge needs both rows' policies to allow its kind). What the merges cost in labelled
data (label and tag conflicts, with ``conflict_policy`` ``keep_one`` or ``drop_all``; entities removed; the
largest cluster) is ``tasks/dedup/conflicts.py``; conflicts and an oversized cluster are logged as warnings.

Keep rule (deterministic): a ``task`` row before a ``pretrain`` row (labelled data is scarcer), then the longest
normalized text (characters), then the smallest ``doc_id``. ``cluster_id`` is the ``doc_id`` of the cluster's
first row in that order (a singleton's own). With ``keep_one_per: role`` (the default) each cluster keeps its
first row *within each role*: a pretraining document that duplicates a task document is not a duplicate here
(it keeps the shared ``cluster_id``); train-side copies of evaluation documents are the leakage stage's to
remove, and copies of train-split documents are legitimate in-domain pretraining text. Duplicates within a role
are still marked. With ``keep_one_per: cluster`` one row survives per cluster across roles.
"""

from __future__ import annotations

import hashlib
import logging
import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from tqdm import tqdm

from tasks.common import minhash, textnorm
from tasks.common.unionfind import UnionFind, UnionTimes
from tasks.config import Paths
from tasks.config.dedup import DedupParams
from tasks.dedup import policy
from tasks.dedup.conflicts import Conflicts, drop_conflicting, find_conflicts, largest_component
from tasks.dedup.outputs import ROLE_RANK, dedup_metrics, label_rows, lsh_summary, write_cluster_report, write_sources

REQUIRED_COLUMNS = ("doc_id", "source", "role", "text", "label")
OPTIONAL_COLUMNS = ("tags", "group")  # read when present: the row contract has them, older test files may not
WARN = logging.getLogger("clozeline.dedup")  # the RunLog has info only; warnings go to Python logging


def run(cfg: DedupParams, paths: Paths, log) -> dict[str, Any]:
    """Cluster exact and near duplicates of every ingest source; write the dedup outputs; return metrics.

    Raises ``FileNotFoundError`` if ``<data>/ingest`` is missing and ``ValueError`` naming the file for a
    missing column, a null text, an unknown role or a ``doc_id`` seen twice, and for a
    ``dedup.source_policy`` entry naming no ingest source.
    """
    corpus = read_corpus(paths.stage_data("ingest"), with_text=cfg.engine == "local")
    policies = policy.resolve(cfg, list(corpus.files))
    log.info(f"dedup: {len(corpus.doc_id)} docs from {len(corpus.files)} sources, engine {cfg.engine}")
    docs = sign_documents(corpus.text, cfg) if cfg.engine == "local" else sign_on_ray(paths, corpus, cfg)
    allowed = policy.row_policy(policies, corpus.source, docs.n_words, docs.n_chars, cfg.shingle_size_words)
    rank = keep_rank(corpus, docs)
    clusters = UnionFind(priority=lambda row: rank[row])  # root = the cluster's kept row
    exact_rep = merge_exact(docs.text_hash, rank, clusters, allowed.exact)
    bands, rows = band_shape(cfg)
    edges, lsh_counts = merge_near(docs, exact_rep, rank, clusters, cfg, (bands, rows), allowed.near)
    labels = label_rows(corpus, docs, rank, clusters, cfg, exact_rep)
    conflicts = find_conflicts(corpus, docs, labels)
    drop_conflicting(corpus, labels, conflicts, cfg)
    out_dir = paths.stage_data("dedup")
    write_sources(out_dir, corpus, labels)
    report = write_cluster_report(out_dir / "clusters.jsonl", corpus, docs, labels, edges, conflicts, cfg)
    metrics = dedup_metrics(corpus, labels, report, policies, allowed.exact_protected)
    metrics["largest_component"] = largest_component(corpus, labels)
    metrics["lsh"] = {**lsh_summary(cfg.threshold, bands, rows), **lsh_counts}
    warn_about(report, conflicts, metrics["largest_component"], cfg)
    log.info(f"dedup: {metrics['all']['docs_removed']} of {len(corpus.doc_id)} docs marked duplicate")
    return metrics


def warn_about(report: list[dict], conflicts: Conflicts, component: dict, cfg: DedupParams) -> None:
    """Log a warning for conflicting clusters (with what ``conflict_policy`` did) and for an oversized cluster."""
    conflicting = [r["cluster_id"] for r in report if r["label_conflict"] or r["tags_conflict"]]
    if conflicting:
        action = "every row of the keep unit dropped" if cfg.conflict_policy == "drop_all" else "best row kept"
        WARN.warning(
            f"dedup: {len(conflicts.labels)} cluster(s) with disagreeing labels and {len(conflicts.tags)} with "
            f"disagreeing tags (conflict_policy={cfg.conflict_policy}: {action}), e.g. {conflicting[:5]}; "
            "members' labels and tags digests are in clusters.jsonl"
        )
    if component["docs"] > cfg.warn_component_docs:
        WARN.warning(
            f"dedup: cluster {component['cluster_id']} chains {component['docs']} docs from {component['sources']} "
            f"source(s) and {component['groups']} group(s), above dedup.warn_component_docs="
            f"{cfg.warn_component_docs}: the split stage keeps it in one split"
        )


# ---------------------------------------------------------------------------------------------------- input


@dataclass
class Corpus:
    """All rows of all sources, in file order (sources sorted by file name). ``text`` is empty when the corpus
    was read without it (``engine: ray`` signs the texts on the workers; the driver never holds them)."""

    files: dict[str, Path]  # source (file stem) -> its ingest file
    doc_id: list[str]
    source: list[str]
    role: list[str]
    text: list[str]
    label: list[str | None]
    tags: list[list[str] | None] = field(default_factory=list)  # IOB2 tags of token rows, else None
    group: list[str | None] = field(default_factory=list)


def read_corpus(in_dir: Path, with_text: bool = True) -> Corpus:
    """Read every ``*.parquet`` in ``in_dir`` (sorted), one file in memory at a time; an empty folder gives an
    empty corpus.

    Raises ``FileNotFoundError`` for a missing folder, ``ValueError`` naming the file for bad rows.
    """
    if not in_dir.is_dir():
        raise FileNotFoundError(f"{in_dir}: ingest output folder not found (run the ingest stage first)")
    corpus = Corpus({}, [], [], [], [], [])
    first_file: dict[str, Path] = {}
    for path in sorted(in_dir.glob("*.parquet")):
        with pq.ParquetFile(path) as parquet:  # read_table builds a dataset and imports pandas: ~0.4 s
            table = parquet.read()
        columns = _checked_columns(path, table)
        for doc_id in columns["doc_id"]:
            if doc_id in first_file:
                raise ValueError(f"{path}: doc_id {doc_id!r} already seen in {first_file[doc_id]}")
            first_file[doc_id] = path
        corpus.files[path.stem] = path
        corpus.doc_id += columns["doc_id"]
        corpus.source += [path.stem] * table.num_rows
        corpus.role += columns["role"]
        corpus.text += table.column("text").to_pylist() if with_text else []
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

    def jaccards(self, left: np.ndarray, right: np.ndarray, num_proc: int) -> np.ndarray:
        """Exact Jaccard (``minhash.jaccard``) of rows ``left[k]`` and ``right[k]``: ``(pairs,)`` float64.

        A pair computed by an earlier call is looked up (the cluster report asks again for most of the pairs
        the LSH pass checked; Jaccard is symmetric); the others are computed in blocks of ``PAIR_BLOCK`` pairs
        over ``num_proc`` forked processes, which inherit the shingle sets, and remembered."""
        left, right = np.asarray(left, np.int64), np.asarray(right, np.int64)
        keys = np.minimum(left, right) * len(self.text_hash) + np.maximum(left, right)
        at = np.searchsorted(self.known_pairs, keys).clip(max=max(len(self.known_pairs) - 1, 0))
        known = self.known_pairs[at] == keys if len(self.known_pairs) else np.zeros(len(keys), bool)
        values = np.empty(len(keys))
        values[known] = self.known_jaccards[at[known]]
        values[~known] = self._compute(left[~known], right[~known], num_proc)
        pairs, first = np.unique(np.concatenate([self.known_pairs, keys[~known]]), return_index=True)
        self.known_pairs, self.known_jaccards = pairs, np.concatenate([self.known_jaccards, values[~known]])[first]
        return values

    def candidates(self, signed: list[int], bands_rows: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
        """LSH candidates among the ``signed`` rows: ``(left, right)`` int64 rows sharing a band key, ``left``
        before ``right`` in ``signed``, sorted by (position of left, position of right) in ``signed``."""
        keys = minhash.band_keys(self.signature[signed], *bands_rows)
        first, second = minhash.candidate_pair_arrays(keys, keys)
        later = second > first  # a self-join holds (x, x) and both orders of each pair
        rows = np.asarray(signed, np.int64)
        return rows[first[later]], rows[second[later]]

    def _compute(self, left: np.ndarray, right: np.ndarray, num_proc: int) -> np.ndarray:
        global _FORKED_SETS
        _FORKED_SETS = self.shingles
        blocks = [(left[k : k + PAIR_BLOCK], right[k : k + PAIR_BLOCK]) for k in range(0, len(left), PAIR_BLOCK)]
        try:
            return np.concatenate([np.zeros(0)] + list(_map(_jaccard_block, blocks, num_proc)))
        finally:
            _FORKED_SETS = []


PAIR_BLOCK = 20_000  # pairs per Jaccard job: fewer pairs are checked in this process
_FORKED_SETS: list[np.ndarray] = []  # read by forked Jaccard workers: inherited at fork, never pickled


def _jaccard_block(job: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    left, right = job
    order = np.argsort(left, kind="stable")  # one binary search per left row for all of its partners
    starts = np.flatnonzero(np.diff(left[order], prepend=-1))
    out = np.empty(len(left))
    for group in np.split(order, starts[1:]):
        sets = [_FORKED_SETS[j] for j in right[group].tolist()]
        out[group] = minhash.jaccards_with(_FORKED_SETS[int(left[group[0]])], sets)
    return out


def sign_documents(texts: list[str], cfg: DedupParams) -> DocSignatures:
    """Hash, count and MinHash-sign every text, sharded over ``cfg.num_proc`` processes, with a progress bar.

    Shards are contiguous and results come back in order, so the output does not depend on ``num_proc``.
    """
    a, b = minhash.permutations(cfg.num_perm, cfg.seed)
    shards = [texts[start : start + cfg.shard_size_docs] for start in range(0, len(texts), cfg.shard_size_docs)]
    jobs = [(shard, cfg.shingle_size_words, a, b) for shard in shards]
    parts = []
    with tqdm(total=len(texts), desc="dedup: minhash", unit="doc") as bar:
        for part in _map(_sign_shard, jobs, cfg.num_proc):
            parts.append(part)
            bar.update(len(part.text_hash))
    return DocSignatures(
        text_hash=[h for part in parts for h in part.text_hash],
        n_words=np.concatenate([np.zeros(0, np.int64)] + [part.n_words for part in parts]),
        n_chars=np.concatenate([np.zeros(0, np.int64)] + [part.n_chars for part in parts]),
        signature=np.concatenate([np.zeros((0, cfg.num_perm), np.uint32)] + [part.signature for part in parts]),
        shingles=[s for part in parts for s in part.shingles],
    )


def sign_on_ray(paths: Paths, corpus: Corpus, cfg: DedupParams) -> DocSignatures:
    """``sign_documents`` on Ray Data (``tasks/dedup/ray_engine.py``, imported only here: Ray is optional)."""
    from tasks.dedup import ray_engine

    return ray_engine.sign_documents(list(corpus.files.values()), corpus, cfg)


def _map(func, jobs: list, num_proc: int):
    if num_proc == 1 or len(jobs) <= 1:
        yield from map(func, jobs)
        return
    # fork: workers need only numpy and textnorm, and spawn would re-import pandas/datasketch in each.
    with ProcessPoolExecutor(num_proc, mp_context=multiprocessing.get_context("fork")) as pool:
        yield from pool.map(func, jobs)


def _sign_shard(job: tuple) -> DocSignatures:
    texts, n, a, b = job
    normalized = textnorm.normalize_many(texts)
    values, doc = minhash.word_hash_stream(normalized, minhash.WordHashes())
    shingles = [minhash.sorted_unique(windows) for windows in minhash.shingle_windows(values, doc, len(texts), n)]
    hashes = [hashlib.md5(text.encode("utf-8")).hexdigest() for text in normalized]
    n_words = np.bincount(doc, minlength=len(texts)).astype(np.int64)
    n_chars = np.fromiter(map(len, normalized), dtype=np.int64, count=len(texts))
    return DocSignatures(hashes, n_words, n_chars, minhash.signatures(shingles, a, b), shingles)


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


def merge_near(
    docs: DocSignatures,
    exact_rep: list[int],
    rank: np.ndarray,
    clusters: UnionFind,
    cfg: DedupParams,
    bands_rows: tuple[int, int],
    allowed: np.ndarray,
) -> tuple[list[tuple[int, int, float]], dict[str, int]]:
    """Union ``allowed`` rows, one per exact group (its first allowed row in rank), whose LSH candidates pass
    exact Jaccard >= ``cfg.threshold``.

    One banding holds every source. Pairs are checked in keep order (the better row first, its candidates
    by rank), and candidates already in one cluster are not checked again; two rows with the same normalized
    text (kept apart by the exact policy) are skipped (``identical_text_pairs``). Returns the merges
    ``(row, row, jaccard)`` and counts of candidate pairs checked, merged and rejected.
    """
    signed, seen = [], set()
    for i in np.argsort(rank).tolist():
        if allowed[i] and exact_rep[i] not in seen:
            seen.add(exact_rep[i])
            signed.append(i)
    left, right = docs.candidates(signed, bands_rows)
    # every candidate's Jaccard up front, in parallel; the merge pass below stays sequential (its order is the rule)
    similarity = docs.jaccards(left, right, cfg.num_proc)
    text_id = np.unique(np.asarray(docs.text_hash), return_inverse=True)[1]
    identical = text_id[left] == text_id[right]
    merging = (similarity >= cfg.threshold) & ~identical
    edges, times = _merge_in_order(left, right, similarity, np.flatnonzero(merging), clusters, len(docs.text_hash))
    # the other pairs change no cluster: each is counted if its rows were still apart at its turn in the order
    others = np.flatnonzero(~merging)
    apart = ~times.connected_before(left[others], right[others], others)
    rejected, identical_apart = int((apart & ~identical[others]).sum()), int((apart & identical[others]).sum())
    counts = {"candidate_pairs": len(edges) + rejected, "merged_pairs": len(edges), "rejected_pairs": rejected,
              "identical_text_pairs": identical_apart}  # fmt: skip
    return edges, counts


def _merge_in_order(left, right, similarity, order: np.ndarray, clusters: UnionFind, n_rows: int):
    """Union the candidate pairs ``order`` (indices into ``left``/``right``, ascending) whose rows are still in
    two clusters; returns the merges ``(row, row, jaccard)`` and when each pair of rows became connected (the
    exact merges before never join two rows that LSH compares: those are one per exact group)."""
    times = UnionTimes(n_rows)
    edges: list[tuple[int, int, float]] = []
    values = similarity[order].tolist()
    pairs = zip(order.tolist(), left[order].tolist(), right[order].tolist(), values)
    for t, i, j, value in tqdm(pairs, total=len(order), desc="dedup: lsh merges", unit="pair"):
        if clusters.find(i) != clusters.find(j):
            clusters.union(i, j)
            times.union(i, j, t)
            edges.append((i, j, value))
    return edges, times
