"""The dedup stage's outputs: row labels (cluster, kept row, duplicate kind), the per-source Parquet files,
``clusters.jsonl`` and the metrics."""

from __future__ import annotations

import json
import shutil
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tasks.common import minhash
from tasks.common.unionfind import UnionFind

if TYPE_CHECKING:
    from tasks.config.dedup import DedupParams
    from tasks.dedup import Corpus, DocSignatures

ROLE_RANK = {"task": 0, "pretrain": 1}


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
                pairs.append([corpus.doc_id[i], corpus.doc_id[j], round(minhash.jaccard(docs.shingles[i], docs.shingles[j]), 6)])
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
    """LSH shape and ``P(candidate)`` (``minhash.p_candidate``) at the threshold and at threshold + 0.05."""
    return {
        "bands": bands,
        "rows": rows,
        "p_detect_at_threshold": minhash.p_candidate(threshold, bands, rows),
        "p_detect_at_threshold_plus_0_05": minhash.p_candidate(min(threshold + 0.05, 1.0), bands, rows),
    }
