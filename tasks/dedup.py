"""dedup stage: exact and MinHash near-duplicate clusters over all sources at once.

Reads ``<data>/ingest/<source>.parquet``, writes ``<data>/dedup/<source>.parquet`` (every row, plus
``cluster_id`` and ``is_duplicate``) and ``<data>/dedup/clusters.jsonl`` (one line per cluster of two or more).

Method (text-dedup / datatrove style, with verification):
1. Normalize (``tasks.textnorm``: NFKC, zero-width removal, casefold, whitespace collapsed). Rows with the same
   normalized text are exact duplicates (md5 of the normalized text).
2. One representative per exact group gets a MinHash signature over its word ``n``-gram shingles (Broder 1997),
   in the ``affine32`` scheme of datasketch, computed with numpy over hashed shingles in worker processes.
   Documents with fewer than ``n`` words have no shingle: they are matched exactly only ("short docs").
3. A single datasketch ``MinHashLSH`` over all sources (bands and rows from datasketch's optimiser) proposes
   candidate pairs; each is merged only if its exact Jaccard on the shingle sets reaches the threshold, so
   every merge is a true near duplicate. The sets are held as sorted 64-bit shingle hashes (two distinct
   shingles collide with probability ~2**-64). Clusters are the connected components (union-find), so a
   chain A~B~C joins A and C even when J(A, C) is below the threshold; ``clusters.jsonl`` shows the chain.

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
import json
import multiprocessing
import shutil
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from datasketch import MinHash, MinHashLSH
from tqdm import tqdm

from tasks import textnorm
from tasks.config import Paths
from tasks.config.dedup import DedupParams, lsh_bands_rows
from tasks.unionfind import UnionFind

REQUIRED_COLUMNS = ("doc_id", "source", "role", "text", "label")
ROLE_RANK = {"task": 0, "pretrain": 1}
SIGNATURE_BLOCK_ROWS = 1 << 13  # shingles per numpy block: (num_perm, rows) uint32 is 4 MiB at 128 perms
_SHINGLE_MULTIPLIER = np.uint64(0x9E3779B97F4A7C15)  # odd 64-bit constant (golden ratio) of the rolling hash
_FMIX32 = (np.uint32(16), np.uint32(0x85EBCA6B), np.uint32(13), np.uint32(0xC2B2AE35), np.uint32(16))


def run(cfg: DedupParams, paths: Paths, log) -> dict[str, Any]:
    """Cluster exact and near duplicates of every ingest source; write the dedup outputs; return metrics.

    Raises ``FileNotFoundError`` if ``<data>/ingest`` is missing and ``ValueError`` naming the file for a
    missing column, a null text, an unknown role or a ``doc_id`` seen twice.
    """
    corpus = read_corpus(paths.stage_data("ingest"))
    log.info(f"dedup: {len(corpus.doc_id)} docs from {len(corpus.tables)} sources")
    docs = sign_documents(corpus.text, cfg)
    rank = keep_rank(corpus, docs)
    clusters = UnionFind(priority=lambda row: rank[row])  # root = the cluster's kept row
    exact_rep = merge_exact(docs.text_hash, rank, clusters)
    bands, rows = lsh_bands_rows(cfg.threshold, cfg.num_perm, *cfg.lsh_weights)
    edges, lsh_counts = merge_near(docs, exact_rep, rank, clusters, cfg, (bands, rows))
    labels = label_rows(corpus, docs, rank, clusters, cfg)
    out_dir = paths.stage_data("dedup")
    write_sources(out_dir, corpus, labels)
    report = write_cluster_report(out_dir / "clusters.jsonl", corpus, docs, labels, edges, cfg)
    metrics = dedup_metrics(corpus, labels, report)
    metrics["lsh"] = {**lsh_summary(cfg.threshold, bands, rows), **lsh_counts}
    log.info(f"dedup: {metrics['all']['docs_removed']} of {len(corpus.doc_id)} docs marked duplicate")
    return metrics


# ---------------------------------------------------------------------------------------------------- input


@dataclass
class Corpus:
    """All rows of all sources, in file order (sources sorted by file name)."""

    tables: dict[str, pa.Table]  # source (file stem) -> its ingest table
    doc_id: list[str]
    source: list[str]
    role: list[str]
    text: list[str]
    label: list[str | None]


def read_corpus(in_dir: Path) -> Corpus:
    """Read every ``*.parquet`` in ``in_dir`` (sorted); an empty folder gives an empty corpus.

    Raises ``FileNotFoundError`` for a missing folder, ``ValueError`` naming the file for bad rows.
    """
    if not in_dir.is_dir():
        raise FileNotFoundError(f"{in_dir}: ingest output folder not found (run the ingest stage first)")
    corpus = Corpus({}, [], [], [], [], [])
    first_file: dict[str, Path] = {}
    for path in sorted(in_dir.glob("*.parquet")):
        table = pq.read_table(path)
        columns = _checked_columns(path, table)
        for doc_id in columns["doc_id"]:
            if doc_id in first_file:
                raise ValueError(f"{path}: doc_id {doc_id!r} already seen in {first_file[doc_id]}")
            first_file[doc_id] = path
        corpus.tables[path.stem] = table
        corpus.doc_id += columns["doc_id"]
        corpus.source += [path.stem] * table.num_rows
        corpus.role += columns["role"]
        corpus.text += columns["text"]
        corpus.label += columns["label"]
    return corpus


def _checked_columns(path: Path, table: pa.Table) -> dict[str, list]:
    missing = [name for name in REQUIRED_COLUMNS if name not in table.column_names]
    if missing:
        raise ValueError(f"{path}: missing column(s) {missing}; ingest rows need {list(REQUIRED_COLUMNS)}")
    columns = {name: table.column(name).to_pylist() for name in REQUIRED_COLUMNS}
    for name in ("doc_id", "text", "role"):
        if None in columns[name]:
            raise ValueError(f"{path}: row {columns[name].index(None)} has a null {name}")
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


def sign_documents(texts: list[str], cfg: DedupParams) -> DocSignatures:
    """Hash, count and MinHash-sign every text, sharded over ``cfg.num_proc`` processes, with a progress bar.

    Shards are contiguous and results come back in order, so the output does not depend on ``num_proc``.
    """
    a, b = MinHash(num_perm=cfg.num_perm, seed=cfg.seed).permutations  # datasketch's affine32 (a, b)
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


def _map(func, jobs: list, num_proc: int):
    if num_proc == 1 or len(jobs) <= 1:
        yield from map(func, jobs)
        return
    # fork: workers need only numpy and textnorm, and spawn would re-import pandas/datasketch in each.
    with ProcessPoolExecutor(num_proc, mp_context=multiprocessing.get_context("fork")) as pool:
        yield from pool.map(func, jobs)


def _sign_shard(job: tuple) -> DocSignatures:
    texts, n, a, b = job
    cache = _WordHashes()
    hashes, n_words, n_chars, shingles = [], [], [], []
    for text in texts:
        normalized = textnorm.normalize(text)
        tokens = textnorm.words_of_normalized(normalized)
        hashes.append(hashlib.md5(normalized.encode("utf-8")).hexdigest())
        n_words.append(len(tokens))
        n_chars.append(len(normalized))
        shingles.append(np.unique(shingle_hashes_of(tokens, n, cache)))
    signature = minhash_signatures([fold_to_32_bits(s) for s in shingles], a, b)
    return DocSignatures(hashes, np.array(n_words, np.int64), np.array(n_chars, np.int64), signature, shingles)


class _WordHashes(dict):
    """word -> stable 64-bit hash (blake2b), computed once per word (Python's ``hash`` is salted per process)."""

    def __missing__(self, word: str) -> int:
        value = self[word] = int.from_bytes(hashlib.blake2b(word.encode("utf-8"), digest_size=8).digest(), "little")
        return value


def shingle_hashes_of(tokens: list[str], n: int, cache: dict[str, int] | None = None) -> np.ndarray:
    """64-bit hashes of the word ``n``-gram shingles of ``tokens``: ``(max(len(tokens) - n + 1, 0),)`` uint64.

    A shingle's hash is a polynomial rolling hash of its words' 64-bit blake2b hashes (mod 2**64, as in
    Rabin-Karp): equal shingles get equal hashes in any document and process, and two distinct shingles
    collide with probability about 2**-64, so Jaccard on these hash sets is the Jaccard of the shingle sets.
    """
    count = len(tokens) - n + 1
    if count <= 0:
        return np.zeros(0, np.uint64)
    cache = _WordHashes() if cache is None else cache
    word_hash = np.fromiter(map(cache.__getitem__, tokens), dtype=np.uint64, count=len(tokens))
    rolling = np.zeros(count, np.uint64)
    for offset in range(n):
        rolling = rolling * _SHINGLE_MULTIPLIER + word_hash[offset : offset + count]
    return rolling


def fold_to_32_bits(hashes: np.ndarray) -> np.ndarray:
    """uint64 -> uint32 by xor of the two halves (the input width of datasketch's affine32 scheme)."""
    return ((hashes >> np.uint64(32)) ^ hashes).astype(np.uint32)


def minhash_signatures(shingle_hashes: list[np.ndarray], a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """MinHash signatures ``(docs, num_perm)`` uint32 of per-document uint32 shingle hash arrays.

    The same values as datasketch 2.0 ``MinHash(scheme="affine32", hashfunc=identity).update_batch(hashes)``:
    a MurmurHash3 fmix32 pre-mix, then ``a * h + b mod 2**32`` per permutation and a minimum over shingles; a
    document without shingles keeps the empty value 2**32-1. Vectorised over blocks of documents
    (``(num_perm, shingles)`` products reduced with ``np.minimum.reduceat``), not one call per shingle.
    """
    out = np.full((len(shingle_hashes), len(a)), np.iinfo(np.uint32).max, dtype=np.uint32)
    filled = [i for i, h in enumerate(shingle_hashes) if len(h)]
    for block in _blocks(filled, [len(shingle_hashes[i]) for i in filled]):
        hv = _fmix32(np.concatenate([shingle_hashes[i] for i in block]))
        starts = np.cumsum([0] + [len(shingle_hashes[i]) for i in block[:-1]])
        permuted = a[:, None] * hv[None, :]
        permuted += b[:, None]
        out[block] = np.minimum.reduceat(permuted, starts, axis=1).T
    return out


def _blocks(indices: list[int], sizes: list[int]) -> list[list[int]]:
    blocks, current, rows = [], [], 0
    for index, size in zip(indices, sizes):
        if current and rows + size > SIGNATURE_BLOCK_ROWS:
            blocks.append(current)
            current, rows = [], 0
        current.append(index)
        rows += size
    return blocks + [current] if current else blocks


def _fmix32(hv: np.ndarray) -> np.ndarray:
    s1, m1, s2, m2, s3 = _FMIX32  # MurmurHash3 finalizer (Appleby), as datasketch's affine32 pre-mix
    hv = hv ^ (hv >> s1)
    hv = hv * m1
    hv = hv ^ (hv >> s2)
    hv = hv * m2
    return hv ^ (hv >> s3)


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


def merge_exact(text_hash: list[str], rank: np.ndarray, clusters: UnionFind) -> list[int]:
    """Union rows with equal normalized text; returns each row's exact-group representative (first in rank)."""
    rep_of_hash: dict[str, int] = {}
    for i in np.argsort(rank):
        rep_of_hash.setdefault(text_hash[i], int(i))
    exact_rep = [rep_of_hash[h] for h in text_hash]
    for i, rep in enumerate(exact_rep):
        clusters.union(i, rep)
    return exact_rep


def merge_near(
    docs: DocSignatures,
    exact_rep: list[int],
    rank: np.ndarray,
    clusters: UnionFind,
    cfg: DedupParams,
    bands_rows: tuple[int, int],
) -> tuple[list[tuple[int, int, float]], dict[str, int]]:
    """Union exact-group representatives whose LSH candidates pass exact Jaccard >= ``cfg.threshold``.

    One ``MinHashLSH`` holds every source. Candidates already in one cluster are not checked again. Returns
    the merges ``(row, row, jaccard)`` and counts of candidate pairs checked, merged and rejected.
    """
    signed = [i for i in np.argsort(rank).tolist() if exact_rep[i] == i and docs.n_words[i] >= cfg.shingle_size_words]
    lsh = MinHashLSH(num_perm=cfg.num_perm, params=bands_rows)
    a, b = MinHash(num_perm=cfg.num_perm, seed=cfg.seed).permutations
    sketches = {i: MinHash(hashvalues=docs.signature[i], permutations=(a, b), scheme="affine32") for i in signed}
    with lsh.insertion_session() as session:
        for i in signed:
            session.insert(i, sketches[i], check_duplication=False)
    edges: list[tuple[int, int, float]] = []
    counts = {"candidate_pairs": 0, "merged_pairs": 0, "rejected_pairs": 0}
    for i in tqdm(signed, desc="dedup: lsh query", unit="doc"):
        for j in sorted(lsh.query(sketches[i]), key=lambda k: rank[k]):
            if rank[j] <= rank[i] or clusters.find(i) == clusters.find(j):
                continue
            counts["candidate_pairs"] += 1
            similarity = jaccard(docs.shingles[i], docs.shingles[j])
            if similarity >= cfg.threshold:
                clusters.union(i, j)
                edges.append((i, j, similarity))
                counts["merged_pairs"] += 1
            else:
                counts["rejected_pairs"] += 1
    return edges, counts


def jaccard(x: np.ndarray, y: np.ndarray) -> float:
    """|x ∩ y| / |x ∪ y| of two sorted unique arrays (shingle hash sets); 1.0 for two empty sets."""
    shared = len(np.intersect1d(x, y, assume_unique=True))
    union = len(x) + len(y) - shared
    return shared / union if union else 1.0


# ----------------------------------------------------------------------------------------------- labelling


@dataclass
class RowLabels:
    """Per-row outcome: its cluster, the kept row of its keep unit, and why it is a duplicate.

    A keep unit is the cluster (``keep_one_per: cluster``) or the rows of one role in the cluster (``role``).
    """

    cluster: list[int]  # row index of the cluster's first row in keep order (names the cluster_id)
    kept: list[int]  # row index of the keep unit's kept row
    kind: list[str]  # "unique" | "kept" | "exact" (same normalized text as a better row of its unit) | "near"
    exact_of: list[int]  # first row in keep order with the same normalized text in the same keep unit
    short: list[bool]  # fewer words than the shingle size: exact matching only
    empty: list[bool]  # empty normalized text (also short)

    @property
    def is_duplicate(self) -> list[bool]:
        """All rows but the kept one of each keep unit."""
        return [kind in ("exact", "near") for kind in self.kind]


def label_rows(
    corpus: Corpus, docs: DocSignatures, rank: np.ndarray, clusters: UnionFind, cfg: DedupParams
) -> RowLabels:
    """Resolve every row to its cluster, the kept row of its keep unit (first in ``rank``) and a duplicate kind."""
    cluster = [clusters.find(i) for i in range(len(rank))]
    unit = [(root, corpus.role[i] if cfg.keep_one_per == "role" else "") for i, root in enumerate(cluster)]
    kept_of: dict[tuple[int, str], int] = {}
    exact_of_text: dict[tuple[int, str, str], int] = {}
    for i in np.argsort(rank).tolist():
        kept_of.setdefault(unit[i], i)
        exact_of_text.setdefault((*unit[i], docs.text_hash[i]), i)
    kept = [kept_of[u] for u in unit]
    exact_of = [exact_of_text[(*u, h)] for u, h in zip(unit, docs.text_hash)]
    size = np.bincount(cluster, minlength=len(cluster)) if cluster else np.zeros(0, np.int64)
    kind = []
    for i, root in enumerate(cluster):
        if size[root] == 1:
            kind.append("unique")
        elif kept[i] == i:
            kind.append("kept")
        else:
            kind.append("exact" if exact_of[i] != i else "near")
    n = cfg.shingle_size_words
    return RowLabels(cluster, kept, kind, exact_of, (docs.n_words < n).tolist(), (docs.n_chars == 0).tolist())


# ------------------------------------------------------------------------------------------------- output


def write_sources(out_dir: Path, corpus: Corpus, labels: RowLabels) -> None:
    """Write ``<out_dir>/<source>.parquet``: every ingest row plus ``cluster_id`` and ``is_duplicate``."""
    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)
    cluster_id = [corpus.doc_id[k] for k in labels.cluster]
    is_duplicate = labels.is_duplicate
    start = 0
    for source, table in corpus.tables.items():
        stop = start + table.num_rows
        table = table.append_column("cluster_id", pa.array(cluster_id[start:stop], pa.string()))
        table = table.append_column("is_duplicate", pa.array(is_duplicate[start:stop], pa.bool_()))
        pq.write_table(table, out_dir / f"{source}.parquet")
        start = stop


def write_cluster_report(
    path: Path,
    corpus: Corpus,
    docs: DocSignatures,
    labels: RowLabels,
    edges: list[tuple[int, int, float]],
    cfg: DedupParams,
) -> list[dict]:
    """Write one JSON line per cluster of two or more rows, sorted by ``cluster_id``; returns the records.

    A record lists its kept row per role (``kept``: role -> doc_id; one role under ``keep_one_per: cluster``),
    its members (kept rows first, each with its role, kind and ``exact_of``, the first row of its keep unit
    with the same normalized text), the verified LSH merges that built it (``edges``; union-find chains them,
    so two members can be below the threshold with each other), the exact Jaccard of every pair of members
    that are their own ``exact_of`` (``pairs``, at most ``cfg.report_max_pairs_per_cluster``; further copies
    of one text in a keep unit have Jaccard 1.0 and are listed through ``exact_of`` instead), its roles,
    sources and distinct labels.
    """
    members: dict[int, list[int]] = defaultdict(list)
    for i, root in enumerate(labels.cluster):
        members[root].append(i)
    edges_of: dict[int, list[tuple[int, int, float]]] = defaultdict(list)
    for edge in edges:
        edges_of[labels.cluster[edge[0]]].append(edge)
    records = []
    for root in sorted((r for r, rows in members.items() if len(rows) > 1), key=lambda r: corpus.doc_id[r]):
        rows = sorted(members[root], key=lambda i: (labels.kept[i] != i, ROLE_RANK[corpus.role[i]], corpus.doc_id[i]))
        record = _cluster_record(root, rows, corpus, docs, labels, cfg.report_max_pairs_per_cluster)
        record["edges"] = sorted([corpus.doc_id[i], corpus.doc_id[j], round(v, 6)] for i, j, v in edges_of[root])
        records.append(record)
    path.write_text("".join(json.dumps(r, sort_keys=True, ensure_ascii=False) + "\n" for r in records), "utf-8")
    return records


def _cluster_record(root, rows, corpus, docs, labels, max_pairs) -> dict[str, Any]:
    distinct = [i for i in rows if labels.exact_of[i] == i]
    pairs = []
    for x, i in enumerate(distinct):
        for j in distinct[x + 1 :]:
            if len(pairs) < max_pairs:
                pairs.append([corpus.doc_id[i], corpus.doc_id[j], round(jaccard(docs.shingles[i], docs.shingles[j]), 6)])
    n_distinct_pairs = len(distinct) * (len(distinct) - 1) // 2
    return {
        "cluster_id": corpus.doc_id[root],
        "kept": {corpus.role[i]: corpus.doc_id[i] for i in rows if labels.kept[i] == i},
        "size": len(rows),
        "roles": sorted({corpus.role[i] for i in rows}, key=ROLE_RANK.__getitem__),
        "sources": sorted({corpus.source[i] for i in rows}),
        "labels": sorted({corpus.label[i] for i in rows if corpus.label[i] is not None}),
        "members": [
            {
                "doc_id": corpus.doc_id[i],
                "source": corpus.source[i],
                "role": corpus.role[i],
                "kind": labels.kind[i],
                "exact_of": corpus.doc_id[labels.exact_of[i]],
            }
            for i in rows
        ],
        "pairs": pairs,
        "pairs_truncated": n_distinct_pairs > len(pairs),
    }


# ------------------------------------------------------------------------------------------------ metrics


def dedup_metrics(corpus: Corpus, labels: RowLabels, report: list[dict]) -> dict[str, Any]:
    """Per-source and overall counts. ``clusters`` counts clusters of two or more rows touching the source,
    ``cross_role_docs`` the rows in a cluster that also has a row of the other role (under ``keep_one_per:
    role`` they are not duplicates: the leakage stage judges them), ``all.cross_role_clusters`` those clusters.
    """
    cross_role = {r["cluster_id"] for r in report if len(r["roles"]) > 1}
    sources = {s: _source_counts(corpus, labels, report, {s}, cross_role) for s in corpus.tables}
    overall = _source_counts(corpus, labels, report, set(corpus.tables), cross_role)
    overall["cross_source_clusters"] = sum(len(r["sources"]) > 1 for r in report)
    overall["cross_role_clusters"] = len(cross_role)
    overall["label_conflict_clusters"] = sum(len(r["labels"]) > 1 for r in report)
    return {"sources": sources, "all": overall}


def _source_counts(
    corpus: Corpus, labels: RowLabels, report: list[dict], sources: set[str], cross_role: set[str]
) -> dict[str, Any]:
    rows = [i for i, source in enumerate(corpus.source) if source in sources]
    exact = sum(labels.kind[i] == "exact" for i in rows)
    near = sum(labels.kind[i] == "near" for i in rows)
    return {
        "docs_in": len(rows),
        "docs_kept": len(rows) - exact - near,
        "docs_removed": exact + near,
        "exact_duplicates": exact,
        "near_duplicates": near,
        "clusters": sum(bool(sources.intersection(r["sources"])) for r in report),
        "fraction_removed": (exact + near) / len(rows) if rows else 0.0,
        "short_docs": sum(labels.short[i] for i in rows),
        "empty_docs": sum(labels.empty[i] for i in rows),
        "cross_role_docs": sum(corpus.doc_id[labels.cluster[i]] in cross_role for i in rows),
    }


def lsh_summary(threshold: float, bands: int, rows: int) -> dict[str, float]:
    """LSH shape and ``P(candidate) = 1 - (1 - s**r)**b`` at the threshold and at threshold + 0.05."""
    return {
        "bands": bands,
        "rows": rows,
        "p_detect_at_threshold": 1.0 - (1.0 - threshold**rows) ** bands,
        "p_detect_at_threshold_plus_0_05": 1.0 - (1.0 - min(threshold + 0.05, 1.0) ** rows) ** bands,
    }
