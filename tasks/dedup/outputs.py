"""The dedup stage's outputs: the per-source Parquet files, ``clusters.jsonl`` and the metrics, from the row
labels (``labels.py``)."""

from __future__ import annotations

import functools
import itertools
import json
import logging
import shutil
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tasks.common.files.ioerrors import writing
from tasks.common.files.shards import read_source, write_manifest
from tasks.common.matching import minhash
from tasks.common.matching.textnorm import arrow_strings
from tasks.dedup.conflicts import RULES, entity_count, tags_digest
from tasks.dedup.corpus import ROLE_RANK, int64s

if TYPE_CHECKING:
    from tasks.config.corpus.dedup import DedupParams, DedupPolicy
    from tasks.dedup.conflicts import Conflicts, Resolution
    from tasks.dedup.corpus import Corpus, Strings
    from tasks.dedup.labels import RowLabels
    from tasks.dedup.signatures import DocSignatures

WARN = logging.getLogger("clozeline.dedup")  # the RunLog has info only; warnings go to Python logging


def write_sources(out_dir: Path, corpus: Corpus, labels: RowLabels, clear: bool = True, write_each=None) -> None:
    """Write ``<out_dir>/<source>.parquet``: every ingest row plus ``cluster_id`` and ``is_duplicate``
    (``write_source``). ``clear``: empty ``out_dir`` first (``clear_dir``). ``write_each``: writes the sources,
    given an iterator of ``(files, path, cluster_id, is_duplicate)``, each made as it is asked for (``engine:
    ray``: a Ray task each, ``ray_engine.write_sources``); else each is written here, from the corpus's table or
    read from its files. Built from Arrow buffers (``pa.array`` of a list imports pandas), in C++ without the
    GIL: the stage runs it beside the report."""
    if clear:
        clear_dir(out_dir)
    bounds, is_duplicate = np.cumsum([0] + [corpus.rows[s] for s in corpus.files]).tolist(), labels.is_duplicate

    def job(source: str, start: int, stop: int) -> tuple[list[Path], Path, pa.Array, pa.Array]:
        ids = corpus.doc_id.array.take(int64s(labels.cluster[start:stop])).cast(pa.string())
        return corpus.files[source], out_dir / f"{source}.parquet", ids, _arrow_bools(is_duplicate[start:stop])

    jobs = (job(source, start, stop) for source, start, stop in zip(corpus.files, bounds, bounds[1:]))
    if write_each is not None:
        write_each(jobs)
    else:
        for source, (files, path, ids, duplicate) in zip(corpus.files, jobs):
            table = corpus.tables.get(source)
            write_source(read_source(files) if table is None else table, path, ids, duplicate)
    write_manifest(out_dir, {source: [out_dir / f"{source}.parquet"] for source in corpus.files})  # split checks it


def write_source(table: pa.Table, path: Path, cluster_id: pa.Array, is_duplicate: pa.Array) -> None:
    """``table`` (a source's ingest rows) with its ``cluster_id`` and ``is_duplicate`` columns, written to ``path``."""
    table = table.append_column("cluster_id", cluster_id).append_column("is_duplicate", is_duplicate)
    with writing(path):  # out of room: one line naming the file, not a traceback
        pq.write_table(table, path)


def clear_dir(out_dir: Path) -> None:
    """``out_dir`` made empty (created when missing)."""
    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)


def _arrow_bools(flags: list[bool] | np.ndarray) -> pa.Array:
    bits = np.packbits(np.asarray(flags, bool), bitorder="little")
    return pa.Array.from_buffers(pa.bool_(), len(flags), [None, pa.py_buffer(bits)])


def write_cluster_report(
    path: Path,
    corpus: Corpus,
    docs: DocSignatures,
    labels: RowLabels,
    edges: list[tuple[int, int, float]],
    conflicts: Conflicts,
    resolution: Resolution,
    cfg: DedupParams,
) -> list[dict]:
    """Write one JSON line per cluster of two or more rows, sorted by ``cluster_id``, a batch at a time; returns each
    record's ``SUMMARY`` fields (and ``members`` in a conflict): what the metrics read. ``pairs`` (up to
    ``report_max_pairs_per_cluster``) is formatted straight to JSON text, by Arrow (``_pairs_json``).

    A record lists its kept row per role (``kept``: role -> doc_id; one role under ``keep_one_per: cluster``),
    its members (kept rows first, each with its role, kind and ``exact_of``, the first row of its keep unit
    in its exact group), the verified LSH merges that built it (``edges``; union-find chains them,
    so two members can be below the threshold with each other), the exact Jaccard of every pair of members
    that are their own ``exact_of`` (``pairs``, at most ``cfg.report_max_pairs_per_cluster``; 1.0 for two
    rows of the same normalized text; further copies of one text in a keep unit are listed through
    ``exact_of`` instead), its roles, sources and distinct labels, each member's ``label`` and
    ``tags_digest``, whether its task rows disagree (``label_conflict``, ``label_conflict_exact``: two task
    rows of one normalized text disagree, ``tags_conflict``), the label votes of a label conflict
    (``label_votes``: label -> task rows, ``{}`` without one) and the rule that decided a conflict
    (``conflict_rule``, null without one; ``tasks/dedup/conflicts.py``).
    """
    members, edges_of = cluster_members(labels.cluster), defaultdict(list)
    for edge in edges:
        edges_of[int(labels.cluster[edge[0]])].append(edge)
    roots, records = sorted(members, key=lambda r: corpus.doc_id[r]), []
    with writing(path), path.open("w", encoding="utf-8") as out:  # a batch of clusters at a time: less held at once
        for start in range(0, len(roots), REPORT_BATCH):
            batch = {root: members.pop(root) for root in roots[start : start + REPORT_BATCH]}
            for record, line in _records(batch, corpus, docs, labels, edges_of, conflicts, resolution, cfg):
                out.write(line)
                summary = {key: record[key] for key in SUMMARY}
                conflicting = record["label_conflict"] or record["tags_conflict"]  # the metrics read members only then
                records.append((summary | {"members": record["members"]}) if conflicting else summary)
    return records


REPORT_BATCH = 8192  # clusters a batch: its members' dicts cost ~1.5 KB a member until written
SUMMARY = ("cluster_id", "roles", "sources", "conflict_rule", "label_conflict", "label_conflict_exact", "tags_conflict")


def _records(members: dict[int, list[int]], corpus, docs, labels, edges_of, conflicts, resolution, cfg):
    """``(record, its JSON line)`` of each cluster of ``members`` (root -> rows, in ``cluster_id`` order)."""
    rows_shown = sorted(i for rows in members.values() for i in rows)
    digests = dict(zip(rows_shown, map(tags_digest, corpus.tags_at(rows_shown))))
    clusters = {
        root: sorted(rows, key=lambda i: (labels.kept[i] != i, ROLE_RANK[corpus.role[i]], corpus.doc_id[i]))
        for root, rows in members.items()
    }
    shown = {root: _shown_pairs(rows, labels, cfg.report_max_pairs_per_cluster) for root, rows in clusters.items()}
    every = [pair for pairs in shown.values() for pair in pairs]
    counts = [len(pairs) for pairs in shown.values()]
    pair_lists = _pairs_json(every, _similarities(every, docs, cfg.num_proc), _JsonStrings(corpus.doc_id), counts)
    for (root, rows), pairs_json in zip(clusters.items(), pair_lists):
        record = _cluster_record(root, rows, corpus, labels, len(shown[root]), digests)
        record["edges"] = sorted([corpus.doc_id[i], corpus.doc_id[j], round(v, 6)] for i, j, v in edges_of[root])
        record["label_conflict"], record["tags_conflict"] = root in conflicts.labels, root in conflicts.tags
        record["label_conflict_exact"] = root in conflicts.labels_exact
        record["label_votes"] = conflicts.votes.get(root, {})
        record["conflict_rule"] = resolution.rule.get(root)
        yield record, _record_line(record, pairs_json)


def cluster_members(cluster: list[int] | np.ndarray) -> dict[int, list[int]]:
    """``{root: its rows, ascending}`` of every cluster of two or more rows (``cluster[i]``: row ``i``'s root)."""
    cluster = np.asarray(cluster, np.int64)
    rows = np.flatnonzero(np.bincount(cluster, minlength=len(cluster))[cluster] > 1)
    members: dict[int, list[int]] = defaultdict(list)
    for i, root in zip(rows.tolist(), cluster[rows].tolist()):
        members[root].append(i)
    return members


def _shown_pairs(rows: list[int], labels: RowLabels, max_pairs: int) -> list[tuple[int, int]]:
    """The first ``max_pairs`` pairs of a cluster's members that are their own ``exact_of``, in member order."""
    return list(itertools.islice(itertools.combinations([i for i in rows if labels.exact_of[i] == i], 2), max_pairs))


def _similarities(pairs: list[tuple[int, int]], docs: DocSignatures, num_proc: int) -> list[float]:
    """Shingle-set Jaccard of each pair, in order, rounded to 1e-6; 1.0 for the same normalized text (also when it
    is too short for a shingle)."""
    left, right = np.array(pairs, dtype=np.int64).reshape(-1, 2).T
    values = docs.jaccards(left, right, num_proc)
    values[[docs.text_hash[i] == docs.text_hash[j] for i, j in pairs]] = 1.0
    return list(map(round, values.tolist(), itertools.repeat(6)))


def _cluster_record(root, rows, corpus, labels, shown_pairs: int, digests: dict) -> dict[str, Any]:
    distinct = int(sum(labels.exact_of[i] == i for i in rows))
    n_distinct_pairs = distinct * (distinct - 1) // 2
    return {
        "cluster_id": corpus.doc_id[root],
        "kept": {corpus.role[i]: corpus.doc_id[i] for i in rows if labels.kind[i] == "kept"},
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
                "label": corpus.label[i],
                "tags_digest": digests[i],
            }
            for i in rows
        ],
        "pairs_truncated": n_distinct_pairs > shown_pairs,
    }


class _JsonStrings(dict):
    """``doc_id`` row -> the id as a JSON string literal (``json.dumps(..., ensure_ascii=False)``), made once."""

    def __init__(self, doc_id: Strings | list[str]) -> None:
        super().__init__()
        self.doc_id = doc_id

    def __missing__(self, row: int) -> str:
        self[row] = text = _encode_string(self.doc_id[row])
        return text


_encode_string = json.encoder.encode_basestring  # what json.dumps(..., ensure_ascii=False) quotes a str with


def _pairs_json(
    pairs: list[tuple[int, int]], values: list[float], quoted: _JsonStrings, counts: list[int]
) -> list[str]:
    """Each cluster's pairs as JSON text, ``json.dumps([[doc_id, doc_id, value], ...])`` of its ``counts[k]`` pairs
    (``pairs`` and ``values`` hold every cluster's, cluster after cluster), the same text, built by Arrow in one
    pass (formatting each pair in Python cost ~1.3 s of the report at 16x the bench corpus). A value is written as
    ``json.dumps`` writes a float (its ``repr``): Arrow's shortest round-trip digits, which are the same but for a
    whole number ("1" for 1.0), below 1e-4 or from 1e16 (no exponent) and a value that is not finite: those
    few are Python's own."""
    left, right = np.array(pairs, dtype=np.int64).reshape(-1, 2).T
    rows, at = np.unique(np.concatenate([left, right]), return_inverse=True)
    ids = arrow_strings([quoted[row] for row in rows.tolist()])
    floats = np.asarray(values, np.float64)
    digits = pc.cast(pa.Array.from_buffers(pa.float64(), len(floats), [None, pa.py_buffer(floats)]), pa.large_string())
    magnitude = np.abs(floats)
    odd = (floats == np.floor(floats)) | (magnitude < 1e-4) | (magnitude >= 1e16) | ~np.isfinite(floats)
    if odd.any():
        digits = pc.replace_with_mask(
            digits, _arrow_bools(odd), arrow_strings(list(map(json.dumps, floats[odd].tolist())))
        )
    firsts, seconds = ids.take(int64s(at[: len(left)])), ids.take(int64s(at[len(left) :]))
    opening, comma, closing, nothing = arrow_strings(["[", ", ", "]", ""])  # scalars (pa.scalar imports pandas)
    texts = pc.binary_join_element_wise(opening, firsts, comma, seconds, comma, digits, closing, nothing)
    offsets = np.zeros(len(counts) + 1, np.int32)
    np.cumsum(counts, out=offsets[1:])
    lists = pa.ListArray.from_arrays(
        pa.Array.from_buffers(pa.int32(), len(offsets), [None, pa.py_buffer(offsets)]), texts
    )
    return pc.binary_join_element_wise(opening, pc.binary_join(lists, comma), closing, nothing).to_pylist()


def _record_line(record: dict[str, Any], pairs_json: str) -> str:
    """The record's JSON line (``sort_keys``, ``ensure_ascii=False``) with ``"pairs": pairs_json`` in its
    sorted place: the keys before "pairs" and after it are dumped apart and joined around it."""
    before = json.dumps({k: v for k, v in record.items() if k < "pairs"}, sort_keys=True, ensure_ascii=False)
    after = json.dumps({k: v for k, v in record.items() if k > "pairs"}, sort_keys=True, ensure_ascii=False)
    return f'{before[:-1]}, "pairs": {pairs_json}, {after[1:]}\n'


def dedup_metrics(
    corpus: Corpus, labels: RowLabels, report: list[dict], policies: dict[str, DedupPolicy], protected: np.ndarray
) -> dict[str, Any]:
    """Per-source and overall counts. ``clusters`` counts clusters of two or more rows touching the source,
    ``cross_role_docs`` the rows in a cluster that also has a row of the other role (under ``keep_one_per:
    role`` they are not duplicates: the leakage stage judges them), ``all.cross_role_clusters`` those clusters.

    Removed rows: ``docs_removed = exact_duplicates + near_duplicates + conflict_dropped`` and ``docs_in =
    docs_kept + docs_removed``. Labelled data (task rows only): ``entities_in`` / ``entities_removed`` (IOB2
    chunks of ``tags``, conlleval's count) and ``labelled_docs_removed`` (removed task rows with a label or
    tags); ``label_conflict_clusters`` / ``tags_conflict_clusters`` count the conflicting clusters in which
    the source has a task row with a label / with tags, ``label_conflict_clusters = label_conflict_clusters_exact
    + label_conflict_clusters_near`` (exact: two task rows of one normalized text disagree); ``lost_vote_docs``
    are the removed ``exact`` / ``near`` rows that lost a conflict vote (a subset of those two counts, not a
    further reason). ``all.conflict_rules``: conflicting clusters per rule (``tasks/dedup/conflicts.py``).
    ``exact_protected_docs``: rows their policy kept out of exact matching (``exact: false`` or under
    ``exact_min_words``). Each source also reports its resolved ``policy``.
    """
    cross_role = {r["cluster_id"] for r in report if len(r["roles"]) > 1}
    task = np.flatnonzero(np.asarray(corpus.role, object) == "task")
    entities = np.zeros(len(corpus.role), np.int64)
    entities[task] = [entity_count(tags) for tags in corpus.tags_at(task)]
    counts = _Counts(corpus, labels, report, protected, entities)
    sources = {s: {**counts.of({s}), "policy": policies[s].model_dump()} for s in corpus.files}
    overall = counts.of(set(corpus.files))
    overall["cross_source_clusters"] = sum(len(r["sources"]) > 1 for r in report)
    overall["cross_role_clusters"] = len(cross_role)
    rules = Counter(r["conflict_rule"] for r in report if r["conflict_rule"] is not None)
    overall["conflict_rules"] = {rule: rules[rule] for rule in RULES}
    return {"sources": sources, "all": overall}


@dataclass(frozen=True)
class _Counts:
    corpus: Corpus
    labels: RowLabels
    report: list[dict]
    protected: np.ndarray
    entities: np.ndarray

    @functools.cached_property
    def per_row(self) -> dict[str, np.ndarray]:
        """``(rows,)`` arrays, built once for every ``of``: the row's source code and the facts it is counted by."""
        corpus, labels = self.corpus, self.labels
        task, tagged = np.asarray(corpus.role, object) == "task", corpus.tags.is_valid().to_numpy(zero_copy_only=False)
        flags = {
            "source": np.fromiter(map(self.source_code.__getitem__, corpus.source), np.int32, len(corpus.source)),
            "exact": labels.kind == "exact",
            "near": labels.kind == "near",
            "conflict": labels.kind == "conflict",
            "short": labels.short,
            "empty": labels.empty,
            "protected": self.protected,
            "entities": self.entities,
            "cross_role": _cross_role(labels.cluster, task),
            "lost_vote": labels.lost_vote,
            "labelled": task & (np.not_equal(np.asarray(corpus.label, object), None) | tagged),
        }
        arrays = {name: np.asarray(values) for name, values in flags.items()}  # bools stay 1 byte a row
        arrays["removed"] = arrays["exact"] | arrays["near"] | arrays["conflict"]
        return arrays

    @functools.cached_property
    def source_code(self) -> dict[str, int]:
        """Each source's code in ``per_row["source"]``."""
        return {source: k for k, source in enumerate(dict.fromkeys(self.corpus.source))}

    def of(self, sources: set[str]) -> dict[str, Any]:
        """The counts over the rows of ``sources``."""
        at = self.per_row
        rows = np.isin(at["source"], [self.source_code[source] for source in sources if source in self.source_code])
        removed = rows & (at["removed"] > 0)
        total = {
            name: int(at[name][rows].sum())
            for name in ("exact", "near", "conflict", "short", "empty", "protected", "cross_role", "entities")
        }
        n_rows, n_removed = int(rows.sum()), int(removed.sum())
        touching = [r for r in self.report if sources.intersection(r["sources"])]
        return {
            "docs_in": n_rows,
            "docs_kept": n_rows - n_removed,
            "docs_removed": n_removed,
            "exact_duplicates": total["exact"],
            "near_duplicates": total["near"],
            "conflict_dropped": total["conflict"],
            "clusters": len(touching),
            "fraction_removed": n_removed / n_rows if n_rows else 0.0,
            "short_docs": total["short"],
            "empty_docs": total["empty"],
            "exact_protected_docs": total["protected"],
            "cross_role_docs": total["cross_role"],
            "label_conflict_clusters": sum(r["label_conflict"] and _takes_part(r, sources, "label") for r in touching),
            "label_conflict_clusters_exact": sum(
                r["label_conflict_exact"] and _takes_part(r, sources, "label") for r in touching
            ),
            "label_conflict_clusters_near": sum(
                r["label_conflict"] and not r["label_conflict_exact"] and _takes_part(r, sources, "label")
                for r in touching
            ),
            "tags_conflict_clusters": sum(
                r["tags_conflict"] and _takes_part(r, sources, "tags_digest") for r in touching
            ),
            "entities_in": total["entities"],
            "entities_removed": int(at["entities"][removed].sum()),
            "lost_vote_docs": int((at["lost_vote"][rows] & (at["exact"] | at["near"])[rows]).sum()),
            "labelled_docs_removed": int(at["labelled"][removed].sum()),
        }


def _cross_role(cluster: np.ndarray, task: np.ndarray) -> np.ndarray:
    """``(rows,)`` bool: the row's cluster has rows of both roles (``task``: ``(rows,)`` bool, the task rows)."""
    size, tasks = np.bincount(cluster, minlength=len(cluster)), np.bincount(cluster, task, minlength=len(cluster))
    return ((tasks > 0) & (tasks < size))[cluster]


def _takes_part(record: dict, sources: set[str], field: str) -> bool:
    """Whether a task row of ``sources`` with a ``field`` (label or tags) is a member of the cluster."""
    return any(m["source"] in sources and m["role"] == "task" and m[field] is not None for m in record["members"])


def lsh_summary(threshold: float, bands: int, rows: int) -> dict[str, float]:
    """LSH shape and ``P(candidate)`` (``minhash.p_candidate``) at the threshold and at threshold + 0.05."""
    return {
        "bands": bands,
        "rows": rows,
        "p_detect_at_threshold": minhash.p_candidate(threshold, bands, rows),
        "p_detect_at_threshold_plus_0_05": minhash.p_candidate(min(threshold + 0.05, 1.0), bands, rows),
    }


def warn_about(report: list[dict], conflicts: Conflicts, rules: dict, component: dict, cfg: DedupParams) -> None:
    """Log a warning for conflicting clusters (with how ``conflict_policy`` decided them, ``rules``: clusters per
    rule) and for an oversized cluster."""
    conflicting = [r["cluster_id"] for r in report if r["conflict_rule"] is not None]
    if conflicting:
        decided = ", ".join(f"{rule} {n}" for rule, n in rules.items() if n)
        WARN.warning(
            f"dedup: {len(conflicts.labels)} cluster(s) with disagreeing labels ({len(conflicts.labels_exact)} "
            f"between copies of one text) and {len(conflicts.tags)} with disagreeing tags (conflict_policy="
            f"{cfg.conflict_policy}: {decided}), e.g. {conflicting[:5]}; members' labels, votes and rules are in "
            "clusters.jsonl"
        )
    if component["docs"] > cfg.warn_component_docs:
        WARN.warning(
            f"dedup: cluster {component['cluster_id']} chains {component['docs']} docs from {component['sources']} "
            f"source(s) and {component['groups']} group(s), above dedup.warn_component_docs="
            f"{cfg.warn_component_docs}: the split stage keeps it in one split"
        )
