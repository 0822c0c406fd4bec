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
   regex; on a large corpus one compiled pass over each shard's UTF-8 bytes does it instead, ``kernels/scan.py``,
   with the same values; shards hold equal shares of the text bytes, a multiple of ``num_proc`` of them). Documents with
   fewer than ``n`` words have no shingle: they are matched exactly only ("short docs").
3. One LSH banding over all sources (bands and rows from datasketch's optimiser) proposes candidate pairs;
   each is merged only if its exact Jaccard on the shingle sets reaches the threshold, so every merge is a
   true near duplicate; no Jaccard is computed for a candidate whose rows are already joined, and the others
   are merged in compiled code on ``num_proc`` threads (``tasks/common/matching/pairjaccard.py``). The sets are
   held as sorted 64-bit shingle hashes (two distinct shingles collide with probability ~2**-64). Clusters
   are the connected components (union-find), so a chain A~B~C joins A and C
   even when J(A, C) is below the threshold; ``clusters.jsonl`` shows the chain. Signatures and Jaccards of texts
   seen before come from ``<data>/dedup_index`` (``incremental.py``: the rule, and why outputs stay equal). The
   row labels are ``labels.py``, the output files and metrics ``tasks/dedup/outputs.py``; the Parquet files are
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

Modules:

- ``corpus``: the input, every row of every ingest source, checked (``read_corpus``).
- ``policy``: which rows may be merged, per source.
- ``signatures``: per-document hashes, counts, MinHash signatures and shingle sets, signed in forked workers.
- ``signing``: the per-shard shingle-set and signature kernels (numpy, or compiled on a large corpus).
- ``kernels/``: the compiled shard scan: normalized texts, word hashes and shingle sets from UTF-8 bytes.
- ``incremental``: the signatures and Jaccards of texts seen before, kept in ``<data>/dedup_index``.
- ``segments``: the index's append-only segment files.
- ``ray_engine``: the signing and LSH on Ray Data (``engine: ray``; Ray is imported when it runs).
- ``near``: the LSH near-duplicate merge, verified by exact Jaccard in keep order.
- ``conflicts``: label and tag conflicts in clusters and their resolution.
- ``labels``: every row's cluster, kept row and duplicate kind.
- ``outputs``: the Parquet files, ``clusters.jsonl`` and the metrics.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pyarrow.compute as pc

from tasks.common.runtime import heap
from tasks.config import Paths
from tasks.config.corpus.dedup import DedupParams
from tasks.dedup import incremental, policy, ray_engine
from tasks.dedup.conflicts import Conflicts, Resolution, drop_conflicting, find_conflicts, largest_component, resolve
from tasks.dedup.corpus import ROLE_RANK, Corpus, read_corpus
from tasks.dedup.labels import RowLabels, label_rows
from tasks.dedup.near import Forest, merge_near
from tasks.dedup.outputs import (
    clear_dir,
    dedup_metrics,
    lsh_summary,
    warn_about,
    write_cluster_report,
    write_sources,
)
from tasks.dedup.signatures import DocSignatures, band_shape


def run(cfg: DedupParams, paths: Paths, log: Any) -> dict[str, Any]:
    """Cluster exact and near duplicates of every ingest source; write the dedup outputs; return metrics.

    Raises ``FileNotFoundError`` if ``<data>/ingest`` is missing and ``ValueError`` naming the file for a
    missing column, a null text, an unknown role or a ``doc_id`` seen twice, and for a
    ``dedup.source_policy`` entry naming no ingest source.
    """
    heap.map_large_blocks()  # else the driver keeps the pages of the row-sized temporaries it frees
    index = paths.stage_data("dedup_index")
    loading = incremental.preload(paths.stage_data("ingest"), cfg, index)  # the kernels load while the files are read
    local = cfg.engine == "local"
    corpus = read_corpus(paths.stage_data("ingest"), with_text=local)
    policies = policy.resolve(cfg, list(corpus.files))
    log.info(f"dedup: {len(corpus.doc_id)} docs from {len(corpus.files)} sources, engine {cfg.engine}")
    docs = incremental.sign(corpus, cfg, index, log, loading) if local else sign_on_ray(paths, corpus, cfg)
    allowed = policy.row_policy(policies, corpus.source, docs.n_words, docs.n_chars, cfg.shingle_size_words)
    labels, found, lsh_counts = cluster_rows(corpus, docs, allowed, cfg)  # found: the merges, conflicts, votes
    out_dir = paths.stage_data("dedup")
    clear_dir(out_dir)
    # Parquet and .npy writes (GIL mostly released) while the report is built in Python, each in a thread of its
    # own (one after the other, the index's entries ended ~0.9 s after the report at 16x the bench corpus); the
    # index's Jaccards are written as `saving` ends, after the report, which computes some
    with incremental.saving(index, docs, cfg, log) as save_entries, ThreadPoolExecutor(2) as writer:
        write_each = None if local else ray_engine.write_sources  # engine ray: each source by a Ray task
        jobs = [writer.submit(write_sources, out_dir, corpus, labels, False, write_each), writer.submit(save_entries)]
        report = write_cluster_report(out_dir / "clusters.jsonl", corpus, docs, labels, *found, cfg)
        for job in jobs:
            job.result()
    metrics = dedup_metrics(corpus, labels, report, policies, allowed.exact_protected)
    metrics["largest_component"] = largest_component(corpus, labels)
    metrics["lsh"] = {**lsh_summary(cfg.threshold, *band_shape(cfg)), **lsh_counts}
    warn_about(report, found[1], metrics["all"]["conflict_rules"], metrics["largest_component"], cfg)
    log.info(f"dedup: {metrics['all']['docs_removed']} of {len(corpus.doc_id)} docs marked duplicate")
    return metrics


# ---------------------------------------------------------------------------------------------- clustering


def cluster_rows(
    corpus: Corpus, docs: DocSignatures, allowed: policy.RowPolicy, cfg: DedupParams
) -> tuple[RowLabels, tuple[list, Conflicts, Resolution], dict[str, int]]:
    """Every row's labels after the exact and near merges and the conflict vote (``labels.RowLabels``); the near
    merges, conflicts and their resolution (what ``clusters.jsonl`` lists); the LSH counts. The keep order, the
    exact groups and the union-find end here (~40 bytes a doc the outputs do not hold)."""
    rank = keep_rank(corpus, docs)
    exact_rep, cluster, edges, lsh_counts = merge_rows(docs, rank, allowed, cfg)
    conflicts = find_conflicts(corpus, docs, cluster)
    resolution = resolve(corpus, cluster, conflicts, cfg)
    labels = label_rows(corpus, docs, rank, cluster, cfg, exact_rep, resolution.losers)
    drop_conflicting(corpus, labels, resolution.dropped, cfg)
    return labels, (edges, conflicts, resolution), lsh_counts


def merge_rows(docs: DocSignatures, rank: np.ndarray, allowed: policy.RowPolicy, cfg: DedupParams) -> tuple:
    """The exact and near merges (``merge_exact``, ``near.merge_near``) in keep order ``rank``: each row's exact
    group representative and cluster root (``(rows,)`` int64 each), the near merges and the LSH counts. The text
    ids and the union-find end here, before the labels' temporaries."""
    text_id = np.unique(np.asarray(docs.text_hash), return_inverse=True)[1].reshape(-1)  # equal: one normalized text
    exact_rep = merge_exact(text_id, rank, allowed.exact)
    clusters = Forest(exact_rep, rank)  # root = the cluster's kept row
    edges, lsh_counts = merge_near(docs, exact_rep, text_id, clusters, cfg, band_shape(cfg), allowed.near)
    return exact_rep, clusters.roots(), edges, lsh_counts


def keep_rank(corpus: Corpus, docs: DocSignatures) -> np.ndarray:
    """Position of each row in the keep order (0 = kept first): task before pretrain, longer, smaller doc_id
    (Arrow sorts strings by their UTF-8 bytes, which is Python's code point order)."""
    n = len(corpus.doc_id)
    by_id = np.empty(n, np.int64)
    by_id[pc.sort_indices(corpus.doc_id.array).to_numpy()] = np.arange(n)
    role = np.fromiter(map(ROLE_RANK.__getitem__, corpus.role), np.int64, count=n)
    rank = np.empty(n, np.int64)
    rank[np.lexsort((by_id, -np.asarray(docs.n_chars, np.int64), role))] = np.arange(n)
    return rank


def merge_exact(text_id: np.ndarray, rank: np.ndarray, allowed: np.ndarray) -> np.ndarray:
    """Each row's exact-group representative: the first ``allowed`` row in rank of its ``text_id`` (``(rows,)``
    int64, equal for one normalized text); a row not allowed is its own."""
    order = np.argsort(rank)
    picked = order[allowed[order]]  # the allowed rows, in keep order
    ids, first = np.unique(text_id[picked], return_index=True)
    rep_of = np.zeros(len(text_id), np.int64)
    rep_of[ids] = picked[first]
    exact_rep = np.arange(len(text_id), dtype=np.int64)
    exact_rep[picked] = rep_of[text_id[picked]]
    return exact_rep


def sign_on_ray(paths: Paths, corpus: Corpus, cfg: DedupParams) -> DocSignatures:
    """``sign_documents`` on Ray Data (``tasks/dedup/ray_engine.py``; Ray is optional, imported there when used)."""
    return ray_engine.sign_documents([path for files in corpus.files.values() for path in files], corpus, cfg)
