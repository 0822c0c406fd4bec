"""leakage: audit every evaluation set for contamination, remove or flag the leaking training docs, then
measure how well the audit works.

Reads ``data/split/<source>.parquet``. Evaluation documents are the kept (``is_duplicate == false``) dev/test
rows of task sources. Two lexical checks:

- (a) every pretraining row (train and heldout) against every task dev/test document;
- (b) every task train row against the dev/test documents of the same task source.

The detectors (word 13-gram overlap as in GPT-3 appendix C, whole-doc equality for short texts, MinHash
(Broder 1997) LSH over whole docs and over passage windows, and word 13-grams equal but for a few substituted
words, ``tasks.leakage.substitution``) live in ``tasks.leakage.detectors``; they read
``tokenize``: ``textnorm.words`` with look-alike letters of other scripts folded to their UTS #39 prototypes
(``tasks.common.matching.confusables``). Then the semantic detector (``tasks.leakage.semantic``, MiniLM window
embeddings; its threshold chosen on dev data) checks every eval doc against the pretraining docs kept after the
lexical action, for paraphrases no n-gram sees; its matches are flagged (``semantic.action: flag``, the
default: sliced in the report as not semantically clean) or removed. Two passes measure the audit itself, since
``rate_after`` counts only what the same detectors can no longer find:

- ``tasks.leakage.planted``: perturbed copies of every eval doc at growing edit strength (format, replaced
  words, synonyms, shuffled sentences, quoted fragments, look-alike letters), scored by every detector with the
  audit's params: each detector's recall and the audit's (``planted``);
- ``tasks.leakage.residual``: an independent, differently loose detector (pooled word 8-gram coverage) on
  the corpus after the action: the contamination left (``residual``).

Incremental (``leakage.incremental``, ``tasks.leakage.incremental``: the rule): each training text's lexical
and residual results are kept per text md5 in ``<data>/leakage_cache`` (kept across runs), with the eval docs
they cover, so a run scans new training texts against every eval doc and the kept ones only against the eval docs
added since (all again when the detector params or the code changed); which lexical methods find each planted
copy is kept there too (``tasks.leakage.plant_cache``), so only new copies are scanned; the semantic
detector's window vectors are kept in ``<data>/leakage_embeddings`` (``tasks.leakage.embedding_store``), so it
embeds only windows it has not seen; the outputs equal a from-scratch run's byte for byte.

Across runs (``tasks.leakage.lineage``): when pretraining continues a model folder (``pretrain.init_from``), the
eval docs are also checked, with the same lexical detectors, against the text that model and its ancestors
trained on (the files its ``pretraining.json`` records by md5); a matched eval doc is removed from its set or
flagged (``pretrain_action``), and a lineage that cannot be established is ``status: unknown`` (``lineage``).

Writes ``data/leakage/<source>.parquet`` (split columns + ``leak_flag``; removed rows absent),
``data/leakage/removed.jsonl`` (one line per removed row, with its reason), ``data/leakage/table.parquet``
(train_doc, eval_doc, method, score, span, plus sources, eval split and check; method ``semantic`` for the
semantic detector's pairs), ``data/leakage/lineage.parquet`` (the lineage audit's pairs) and
``data/leakage/review.jsonl`` (the semantic detector's labelled review sample and
its highest-scoring real flags, for a person to check); the two measuring passes write nothing else. Returns
``eval_sets.<source>/<split>`` ``{docs, rate_before, rate_after}``: the share of eval docs with at least one
lexically matching pretraining doc, before and after the action, plus
``task_train_rate_*`` (check b), ``any_rate_*`` (flagged docs still count after the action; see
``leakage_metrics``) and ``semantic_rate`` (a semantic match in the kept corpus), and the ``planted``,
``residual``, ``semantic`` and ``lineage`` metrics.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from tasks.common.matching import minhash

from tasks.common.runtime import gcpause
from tasks.common.matching.confusables import fold_words
from tasks.common.pretraining_texts import NO_LINEAGE
from tasks.common.files.parquet import read_source_frames
from tasks.common.matching.textnorm import words
from tasks.config.corpus.leakage import LeakageParams
from tasks.leakage import lineage, planted, residual
from tasks.leakage.detectors import (
    Side,
    detect,
    make_side,
    make_sides,
    minhash_doc_matches,
    minhash_passage_matches,
    ngram_matches,
)

# the detectors stay importable from tasks.leakage for benchmarks/leakage.py
__all__ = ["run", "eval_rows", "train_rows", "make_sides", "ngram_matches", "minhash_doc_matches",
           "minhash_passage_matches", "tokenize"]

REQUIRED_COLUMNS = ("doc_id", "source", "role", "text", "split", "is_duplicate")
EVAL_SPLITS = ("dev", "test")
TABLE_COLUMNS = [
    "train_doc", "eval_doc", "method", "score", "span", "train_source", "eval_source", "eval_split", "check"
]


def tokenize(text: str) -> list[str]:
    """The words every lexical detector reads: ``textnorm.words``, each word's non-ASCII look-alike letters
    folded to their UTS #39 prototypes (``tasks.common.matching.confusables.fold_words``; ASCII words unchanged)."""
    return fold_words(words(text))


def run(cfg: LeakageParams, paths, log) -> dict:
    """Audit ``<data>/split`` and write ``<data>/leakage``; returns the metrics dict (with ``planted``,
    ``residual`` and ``semantic``). Raises ``FileNotFoundError`` without input and ``ValueError`` naming a file
    with missing columns. The lexical scan's millions of n-gram tuples are kept out of the cyclic collector's
    walks (``tasks.common.runtime.gcpause``: paused while they are built, frozen after).
    """
    with gcpause.frozen_survivors():
        return audit(cfg, paths, log)


def audit(cfg: LeakageParams, paths, log) -> dict:
    """The stage (``run``), collector state aside."""
    frames = read_sources(paths.stage_data("split"))
    rows = pd.concat(list(frames.values()), ignore_index=True)
    eval_frame, train_frame = eval_rows(rows), train_rows(rows)
    evals = make_side([tokenize(x) for x in eval_frame["text"]], minhash.WordHashes())
    log.info(f"leakage: {len(train_frame)} training docs vs {len(evals.hashes)} eval docs, engine {cfg.engine}")
    from tasks.leakage import incremental  # imported here: it builds on this module's scan_locally

    with gcpause.paused_gc():
        scanned = incremental.scan(train_frame, eval_frame, evals, cfg, paths.stage_data("leakage_cache"), log) \
            if cfg.engine == "local" else scan_on_ray(paths, train_frame, evals, cfg)
    gcpause.freeze()
    table = audit_table(scanned.matches, train_frame, eval_frame)
    lexical_removed = removed_docs(table, cfg)
    plants, not_planted, lexical_found = plant_copies(eval_frame, evals, train_frame, scanned, table, cfg,
                                                      paths.stage_data("leakage_cache"), log)  # fmt: skip
    found = [set(m) for m in lexical_found]
    detectors = planted.DETECTORS
    review: list[dict] = []
    semantic_metrics = {"enabled": False}
    scored = None
    paths.stage_data("leakage_embeddings").mkdir(parents=True, exist_ok=True)  # a DVC output, semantic or not
    if cfg.semantic.enabled:
        from tasks.leakage import semantic_audit  # torch and the encoder only when the detector runs

        result = semantic_audit.audit(cfg, eval_frame, evals.tokens, train_frame, set(lexical_removed), plants, log,
                                      store=paths.stage_data("leakage_embeddings"))
        table = pd.concat([table, pd.DataFrame.from_records(result.rows, columns=TABLE_COLUMNS)], ignore_index=True)
        table = table.sort_values(["eval_doc", "train_doc", "method"], ignore_index=True)
        for m, hit in zip(found, result.found):
            if hit:
                m.add("semantic")
        detectors += ("semantic",)
        review, semantic_metrics, scored = result.review, {"enabled": True, **result.metrics}, result.scored
    cache = None if cfg.pretrain_init_from in NO_LINEAGE else lineage.dvc_cache(Path.cwd())  # dvc: 0.5 s to import
    across = lineage.audit(cfg, paths, eval_frame, evals, tokenize, cache)
    log.info(f"leakage: lineage of {cfg.pretrain_init_from}: {across.metrics['status']}, "
             f"{len(across.metrics['files_checked'])} files checked, {len(across.pairs)} matching pairs")
    removed = removed_docs(table, cfg) | across.removed
    out_dir = paths.stage_data("leakage")
    write_outputs(frames, table, removed, out_dir, review, across.marked)
    across.pairs.to_parquet(out_dir / "lineage.parquet", index=False)
    log.info(f"leakage: {len(table)} matching pairs, {len(removed)} docs removed -> {out_dir}")
    metrics = leakage_metrics(rows, eval_frame, table, removed, [not t for t in evals.tokens], across.marked)
    metrics["lineage"] = across.metrics
    metrics["planted"] = planted.summarize(plants, found, list(eval_frame["doc_id"]), not_planted, detectors, cfg,
                                           scored)
    metrics["residual"] = residual.residual(eval_frame, evals.tokens, scanned.pretrain, set(removed), cfg)
    metrics["semantic"] = semantic_metrics
    log.info(f"leakage: planted recall {metrics['planted']['recall']}, residual rate {metrics['residual']['rate']}")
    return metrics


@dataclass(frozen=True)
class TrainingScan:
    """What one pass over the training docs yields: the detectors' matches ``(train_i, eval_j, method, score,
    span)``, which training rows have words, and the residual scan of the pretraining rows (``residual.Scan``,
    its docs numbered as the pretraining rows of ``train_frame`` in order)."""

    matches: list[tuple]
    has_words: np.ndarray  # (len(train_frame),) bool
    pretrain: residual.Scan


def scan_locally(train_frame: pd.DataFrame, evals: Side, cfg: LeakageParams) -> TrainingScan:
    """``TrainingScan`` on this machine: on ``cfg.num_proc`` forked processes over blocks of training rows
    (``tasks.leakage.forked``: the same scan), or in this process for one process or few rows."""
    from tasks.leakage import forked

    return forked.scan_forked(train_frame, evals, cfg, scan_in_process)


def scan_in_process(train_frame: pd.DataFrame, evals: Side, cfg: LeakageParams) -> TrainingScan:
    """``TrainingScan`` in this process."""
    trains = make_side([tokenize(x) for x in train_frame["text"]], minhash.WordHashes())
    pretrain = np.flatnonzero(train_frame["role"].to_numpy() == "pretrain")
    n = cfg.residual.ngram_words
    hits, whole = residual.scan_docs([trains.tokens[i] for i in pretrain], residual.eval_targets(evals.tokens, n), n)
    scan = residual.Scan(list(train_frame["doc_id"].iloc[pretrain]), hits, whole)
    return TrainingScan(detect(trains, evals, cfg), np.array([bool(t) for t in trains.tokens], bool), scan)


def scan_on_ray(paths, train_frame: pd.DataFrame, evals: Side, cfg: LeakageParams) -> TrainingScan:
    """``TrainingScan`` on Ray Data (``tasks/leakage/ray_engine.py``, imported only here: Ray is optional)."""
    from tasks.leakage import ray_engine

    files = sorted(paths.stage_data("split").glob("*.parquet"))
    return ray_engine.scan_on_ray(files, train_frame, evals, cfg)


def plant_copies(eval_frame: pd.DataFrame, evals: Side, train_frame: pd.DataFrame, scanned: TrainingScan,
                 table: pd.DataFrame, cfg: LeakageParams, cache: Path, log) -> tuple[list, list[str], list[set[str]]]:
    """The planted copies of every eval doc (``tasks.leakage.planted``), the variants not planted, and the
    lexical methods that find each copy (copies seen by an earlier run from ``cache``: ``plant_cache``).

    Filler for the planted copies is the text of pretraining docs (with words) that the lexical audit matched
    to no eval doc.
    """
    from tasks.leakage import plant_cache, synonyms

    pretrain = train_frame[train_frame["role"] == "pretrain"]  # train_frame has a 0..n-1 index, as has_words
    unrelated = ~pretrain["doc_id"].isin(set(table["train_doc"])) & scanned.has_words[pretrain.index]
    filler = pretrain[unrelated]
    wordnet = synonyms.load(cfg.planted.wordnet_dir)
    plants, not_planted = planted.make(eval_frame, list(filler["text"]), list(filler["doc_id"]), cfg.planted,
                                       wordnet.of)
    if not plants:
        return plants, not_planted, []
    return plants, not_planted, plant_cache.found_by(plants, eval_frame, evals, cfg, tokenize, cache, log)


def read_sources(folder: Path) -> dict[str, pd.DataFrame]:
    """``{source: frame}`` for every ``<folder>/*.parquet`` (sorted); checks the split columns."""
    return read_source_frames(folder, REQUIRED_COLUMNS, producer="split")


def eval_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """Kept dev/test rows of task sources: the documents evaluation scores are computed on."""
    part = rows[(rows["role"] == "task") & rows["split"].isin(EVAL_SPLITS) & ~rows["is_duplicate"]]
    return part.reset_index(drop=True)


def train_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """Every pretraining row and every task train row (duplicates too: they carry the same text)."""
    part = rows[(rows["role"] == "pretrain") | ((rows["role"] == "task") & (rows["split"] == "train"))]
    return part.reset_index(drop=True)


def audit_table(matches: list[tuple], trains: pd.DataFrame, evals: pd.DataFrame) -> pd.DataFrame:
    """The leakage table: pairs allowed by checks (a) and (b), with doc ids, sorted; scores rounded to 1e-6."""
    if not matches:
        return pd.DataFrame.from_records([], columns=TABLE_COLUMNS)
    i, j, method, score, span = (list(column) for column in zip(*matches))
    i, j = np.asarray(i, dtype=np.int64), np.asarray(j, dtype=np.int64)

    def train(column: str) -> np.ndarray:  # whole columns indexed at once: 300k row lookups took ~25 s at 16x
        return trains[column].to_numpy(dtype=object)[i]

    def ev(column: str) -> np.ndarray:
        return evals[column].to_numpy(dtype=object)[j]

    pretrain = train("role") == "pretrain"
    allowed = pretrain | (train("source") == ev("source"))  # (b) compares a task's train split with its own dev/test
    table = pd.DataFrame({
        "train_doc": train("doc_id"), "eval_doc": ev("doc_id"), "method": method,
        "score": [round(float(s), 6) for s in score], "span": span, "train_source": train("source"),
        "eval_source": ev("source"), "eval_split": ev("split"),
        "check": np.where(pretrain, "pretrain", "task_train").astype(object),
    })[allowed]  # fmt: skip
    return table.sort_values(["eval_doc", "train_doc", "method"], ignore_index=True)


def removed_docs(table: pd.DataFrame, cfg: LeakageParams) -> dict[str, dict]:
    """``{train doc_id: removal record}`` for matched docs one of whose matches has the action ``remove``: its
    check's (``pretrain_action``, ``task_train_action``) for a lexical match, ``semantic.action`` for a
    semantic one. ``reason``: ``leakage:<check>``, or ``leakage:semantic`` when only semantic matches remove it."""
    action = {"pretrain": cfg.pretrain_action, "task_train": cfg.task_train_action}
    docs: dict[str, dict] = {}
    columns = (table[c].tolist() for c in ("train_doc", "train_source", "method", "check", "eval_doc"))
    for doc_id, source, method, check, eval_doc in zip(*columns):
        doc = docs.setdefault(doc_id, {"source": source, "check": None, "eval_docs": set(), "methods": set()})
        if method != "semantic" and doc["check"] is None:
            doc["check"] = check  # the first lexical match's check, in table order
        doc["eval_docs"].add(eval_doc)
        doc["methods"].add(method)
    removed = {}
    for doc_id in sorted(docs):
        doc = docs[doc_id]
        if doc["check"] is not None and action[doc["check"]] == "remove":
            reason = "leakage:" + doc["check"]
        elif "semantic" in doc["methods"] and cfg.semantic.action == "remove":
            reason = "leakage:semantic"
        else:
            continue
        removed[doc_id] = {"doc_id": doc_id, "source": doc["source"], "reason": reason,
                           "eval_docs": sorted(doc["eval_docs"]), "methods": sorted(doc["methods"])}
    return removed


def write_outputs(frames: dict[str, pd.DataFrame], table: pd.DataFrame, removed: dict, out_dir: Path,
                  review: list[dict] | None = None, marked: set[str] = frozenset()) -> None:
    """Cleaned ``<source>.parquet`` (+ ``leak_flag``: a matched training doc, or an eval doc in ``marked``,
    found in the pretraining lineage and kept), ``removed.jsonl``, ``table.parquet`` and ``review.jsonl`` (the
    semantic detector's review sample; empty without it)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    matched = set(table["train_doc"]) | set(marked)
    for source, frame in frames.items():
        kept = frame[~frame["doc_id"].isin(list(removed))]
        kept.assign(leak_flag=kept["doc_id"].isin(list(matched))).to_parquet(out_dir / f"{source}.parquet", index=False)
    lines = [json.dumps(removed[d], sort_keys=True) + "\n" for d in sorted(removed)]
    (out_dir / "removed.jsonl").write_text("".join(lines), encoding="utf-8")
    table.to_parquet(out_dir / "table.parquet", index=False)
    lines = [json.dumps(r, sort_keys=True, ensure_ascii=False) + "\n" for r in review or []]
    (out_dir / "review.jsonl").write_text("".join(lines), encoding="utf-8")


def leakage_metrics(rows: pd.DataFrame, evals: pd.DataFrame, table: pd.DataFrame, removed: dict,
                    wordless: list[bool], marked: set[str] = frozenset()) -> dict:
    """Contamination rates per eval set before/after the action, and row accounting per source (``removed``
    also holds the eval docs the lineage audit removed; ``marked`` the ones it flagged and kept).

    ``docs_without_words`` counts the eval docs of a set that ``wordless`` marks (no words after normalization:
    no detector can check them, so they never count as contaminated; see ``tasks.leakage.detectors``).

    ``rate_before``/``rate_after`` are check (a), pretraining contamination (what the claim table reads as a
    confounder of pretraining gains); ``task_train_rate_*`` are check (b) and ``any_rate_*`` either check; all
    three count the lexical detectors only. ``semantic_rate_before``/``_after``: a semantic match in the
    pretraining docs kept after the lexical action, before/after the semantic action.
    A flagged document still counts after the action; only removal lowers a rate.
    """
    semantic_pairs = table[table["method"] == "semantic"]
    table = table[table["method"] != "semantic"]
    live = table[~table["train_doc"].isin(list(removed))]
    eval_sets = {}
    for (source, split), part in evals.groupby(["source", "split"], sort=True):
        ids = set(part["doc_id"])
        entry = {"docs": len(ids), "docs_without_words": int(np.asarray(wordless, dtype=bool)[part.index].sum())}
        for prefix, check in (("", "pretrain"), ("task_train_", "task_train"), ("any_", None)):
            before = table if check is None else table[table["check"] == check]
            after = live if check is None else live[live["check"] == check]
            entry[f"{prefix}rate_before"] = round(len(ids & set(before["eval_doc"])) / len(ids), 6)
            entry[f"{prefix}rate_after"] = round(len(ids & set(after["eval_doc"])) / len(ids), 6)
        if len(semantic_pairs):
            kept = semantic_pairs[~semantic_pairs["train_doc"].isin(list(removed))]
            entry["semantic_rate_before"] = round(len(ids & set(semantic_pairs["eval_doc"])) / len(ids), 6)
            entry["semantic_rate_after"] = round(len(ids & set(kept["eval_doc"])) / len(ids), 6)
        eval_sets[f"{source}/{split}"] = entry
    matched = set(table["train_doc"]) | set(semantic_pairs["train_doc"]) | set(marked)
    sources = {}
    for source, part in rows.groupby("source", sort=True):
        out = ~part["doc_id"].isin(list(removed))
        gone, flagged = int((~out).sum()), int((part["doc_id"].isin(list(matched)) & out).sum())
        sources[source] = {"docs_in": len(part), "docs_out": len(part) - gone, "removed": gone, "flagged": flagged}
    both = pd.concat([table, semantic_pairs])
    methods = {m: int(n) for m, n in both["method"].value_counts().sort_index().items()}
    return {"eval_sets": eval_sets, "sources": sources, "pairs_by_method": methods}
