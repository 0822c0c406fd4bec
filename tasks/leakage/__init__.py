"""leakage: audit every evaluation set for contamination, remove or flag the leaking training docs, then
measure how well the audit works.

Reads ``data/split/<source>.parquet``. Evaluation documents are the kept (``is_duplicate == false``) dev/test
rows of task sources. Two lexical checks:

- (a) every pretraining row (train and heldout) against every task dev/test document;
- (b) every task train row against the dev/test documents of the same task source.

The detectors (word 13-gram overlap as in GPT-3 appendix C, whole-doc equality for short texts, MinHash
(Broder 1997) LSH over whole docs and over passage windows, and word 13-grams equal but for a few substituted
words, ``tasks.leakage.lexical.substitution``) live in ``tasks.leakage.lexical.detectors``; they read
``tokenize`` (``tasks.leakage.lexical.words``): ``textnorm.words`` with look-alike letters of other scripts
folded to their UTS #39 prototypes (``tasks.common.matching.confusables``). Then the semantic detector
(``tasks.leakage.semantic``, MiniLM window embeddings; its threshold chosen on dev data) checks every eval doc
against the pretraining docs kept after the lexical action, for paraphrases no n-gram sees; its matches are
flagged (``semantic.action: flag``, the default: sliced in the report as not semantically clean) or removed. Two
passes measure the audit itself, since ``rate_after`` counts only what the same detectors can no longer find:

- ``tasks.leakage.planted``: perturbed copies of every eval doc at growing edit strength (format, replaced
  words, synonyms, shuffled sentences, quoted fragments, look-alike letters), scored by every detector with the
  audit's params: each detector's recall and the audit's (``planted``);
- ``tasks.leakage.lexical.residual``: an independent, differently loose detector (pooled word 8-gram coverage) on
  the corpus after the action: the contamination left (``residual``).

Incremental (``leakage.incremental``, ``tasks.leakage.scan.incremental``: the rule): each training text's lexical
and residual results are kept per text md5 in ``<data>/leakage_cache`` (kept across runs), with the eval docs
they cover, so a run scans new training texts against every eval doc and the kept ones only against the eval docs
added since (all again when the detector params or the code changed); which lexical methods find each planted
copy is kept there too (``tasks.leakage.planted.cache``), so only new copies are scanned; the semantic
detector's window vectors are kept in ``<data>/leakage_embeddings`` (``tasks.leakage.semantic.store``), so it
embeds only windows it has not seen; the outputs equal a from-scratch run's byte for byte.

Across runs (``tasks.leakage.lineage_audit``): when pretraining continues a model folder (``pretrain.init_from``), the
eval docs are also checked, with the same lexical detectors, against the text that model and its ancestors
trained on (the files its ``pretraining.json`` records by md5); a matched eval doc is removed from its set or
flagged (``pretrain_action``), and a lineage that cannot be established is ``status: unknown`` (``lineage``).

Writes ``data/leakage/<source>.parquet`` (split columns + ``leak_flag``; removed rows absent; ``cleaned``),
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

Modules and subpackages:

- ``outputs``: the split rows read (eval and training rows), the leakage table, removals, metrics;
- ``cleaned``: the cleaned shards, streamed from the split shards (by Ray tasks with ``engine: ray``);
- ``lineage_audit``: the eval docs against the texts the ``init_from`` model and its ancestors trained on;
- ``lexical/``: the word-based detectors (``LexicalParams``), the residual check and the lexical caches' key;
- ``scan/``: one pass of the lexical detectors over the training docs: in process, forked, on Ray, or cached;
- ``semantic/``: the embedding detector (``SemanticParams``): windows, method, search, encoder, store, its pass;
- ``planted/``: perturbed copies of the eval docs (``PlantedParams``) and each detector's recall on them.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from tasks.common.matching import minhash
from tasks.common.pretraining_texts import NO_LINEAGE
from tasks.common.runtime import gcpause
from tasks.config.corpus.leakage import LeakageParams
from tasks.config.paths import Paths
from tasks.leakage import lineage_audit
from tasks.leakage.cleaned import clean_shard
from tasks.leakage.lexical import residual
from tasks.leakage.lexical.detectors import DETECTORS
from tasks.leakage.lexical.words import Side, make_side, tokenize
from tasks.leakage.outputs import (
    TABLE_COLUMNS,
    Fetched,
    Picked,
    SplitShards,
    audit_table,
    leakage_metrics,
    read_split,
    removed_docs,
    write_outputs,
)
from tasks.leakage.planted import cache as plant_cache
from tasks.leakage.planted import recall, synonyms
from tasks.leakage.planted.variants import make as make_plants
from tasks.leakage.scan import incremental, ray_engine
from tasks.leakage.scan.local import TrainingScan
from tasks.leakage.semantic import audit as semantic_audit

__all__ = ["audit", "plant_copies", "run"]


def run(cfg: LeakageParams, paths: Paths, log: Any) -> dict:
    """Audit ``<data>/split`` and write ``<data>/leakage``; returns the metrics dict (with ``planted``,
    ``residual`` and ``semantic``). Raises ``FileNotFoundError`` without input and ``ValueError`` naming a file
    with missing columns. The lexical scan's millions of n-gram tuples are kept out of the cyclic collector's
    walks (``tasks.common.runtime.gcpause``: paused while they are built, frozen after).
    """
    with gcpause.frozen_survivors():
        return audit(cfg, paths, log)


def audit(cfg: LeakageParams, paths: Paths, log: Any) -> dict:
    """The stage (``run``), collector state aside."""
    # rows: no text (the row accounting); the training texts only where this process reads them all
    rows, eval_frame, train_frame = read_split(paths.stage_data("split"), train_text=cfg.engine == "local")
    files = sorted(paths.stage_data("split").glob("*.parquet"))
    shards = SplitShards(files, functools.partial(ray_engine.texts_on_ray, files, cfg=cfg))
    evals = make_side([tokenize(x) for x in eval_frame["text"]], minhash.WordHashes())
    log.info(f"leakage: {len(train_frame)} training docs vs {len(evals.hashes)} eval docs, engine {cfg.engine}")
    with gcpause.paused_gc():
        scanned = scan_training(paths, train_frame, eval_frame, evals, cfg, log)
    gcpause.freeze()
    table = audit_table(scanned.matches, train_frame, eval_frame)
    lexical_removed = removed_docs(table, cfg)
    plants, not_planted, lexical_found = plant_copies(
        eval_frame, evals, train_frame, scanned, table, cfg, paths, shards, log
    )
    found = [set(m) for m in lexical_found]
    detectors: tuple[str, ...] = DETECTORS
    review: list[dict] = []
    semantic_metrics = {"enabled": False}
    scored = None
    paths.stage_data("leakage_embeddings").mkdir(parents=True, exist_ok=True)  # a DVC output, semantic or not
    if cfg.semantic.enabled:
        result = semantic_audit.audit(
            cfg,
            eval_frame,
            evals.tokens,
            train_frame,
            set(lexical_removed),
            plants,
            log,
            store_folder=paths.stage_data("leakage_embeddings"),
            shards=shards,
        )
        table = pd.concat([table, pd.DataFrame.from_records(result.rows, columns=TABLE_COLUMNS)], ignore_index=True)
        table = table.sort_values(["eval_doc", "train_doc", "method"], ignore_index=True)
        for m, hit in zip(found, result.found):
            if hit:
                m.add("semantic")
        detectors += ("semantic",)
        review, semantic_metrics, scored = result.review, {"enabled": True, **result.metrics}, result.scored
    cache = None if cfg.pretrain_init_from in NO_LINEAGE else lineage_audit.dvc_cache(Path.cwd())  # dvc: 0.5 s
    across = lineage_audit.audit(cfg, paths, eval_frame, evals, tokenize, cache)
    log.info(
        f"leakage: lineage of {cfg.pretrain_init_from}: {across.metrics['status']}, "
        f"{len(across.metrics['files_checked'])} files checked, {len(across.pairs)} matching pairs"
    )
    removed = removed_docs(table, cfg) | across.removed
    out_dir = paths.stage_data("leakage")
    write_outputs(table, removed, out_dir, review)
    write_shards(paths.stage_data("split"), out_dir, set(removed), set(table["train_doc"]) | across.marked, cfg)
    across.pairs.to_parquet(out_dir / "lineage.parquet", index=False)
    log.info(f"leakage: {len(table)} matching pairs, {len(removed)} docs removed -> {out_dir}")
    metrics = leakage_metrics(rows, eval_frame, table, removed, [not t for t in evals.tokens], across.marked)
    metrics["lineage"] = across.metrics
    metrics["planted"] = recall.summarize(
        plants, found, list(eval_frame["doc_id"]), not_planted, detectors, cfg.planted, cfg.max_examples, scored
    )
    metrics["residual"] = residual.residual(
        eval_frame, evals.tokens, scanned.pretrain, set(removed), cfg.residual, cfg.max_examples
    )
    metrics["semantic"] = semantic_metrics
    log.info(f"leakage: planted recall {metrics['planted']['recall']}, residual rate {metrics['residual']['rate']}")
    return metrics


def scan_training(
    paths: Paths, train_frame: pd.DataFrame, eval_frame: pd.DataFrame, evals: Side, cfg: LeakageParams, log: Any
) -> TrainingScan:
    """The ``TrainingScan`` of every training row: on this machine through the per-text cache
    (``scan.incremental``), or on Ray Data (``engine: ray``: ``scan.ray_engine``; Ray, an optional dependency, is
    imported only then)."""
    if cfg.engine == "local":
        return incremental.scan(train_frame, eval_frame, evals, cfg, paths.stage_data("leakage_cache"), log)
    files = sorted(paths.stage_data("split").glob("*.parquet"))
    return ray_engine.scan_on_ray(files, train_frame, evals, cfg)


def write_shards(split_dir: Path, out_dir: Path, removed: set[str], flagged: set[str], cfg: LeakageParams) -> None:
    """The cleaned ``<source>.parquet`` of every split shard (``tasks.leakage.cleaned``: ``removed`` doc ids
    dropped, ``leak_flag`` on the ``flagged`` ones), in this process or, with ``engine: ray``, one Ray task per
    shard (``scan.ray_engine.clean_on_ray``); the same bytes either way."""
    files = sorted(split_dir.glob("*.parquet"))
    if cfg.engine == "ray":
        ray_engine.clean_on_ray(files, out_dir, removed, flagged, cfg)
        return
    for file in files:
        clean_shard(file, out_dir / file.name, removed, flagged)


def plant_copies(
    eval_frame: pd.DataFrame,
    evals: Side,
    train_frame: pd.DataFrame,
    scanned: TrainingScan,
    table: pd.DataFrame,
    cfg: LeakageParams,
    paths: Paths,
    shards: SplitShards,
    log: Any,
) -> tuple[list, list[str], list[set[str]]]:
    """The planted copies of every eval doc (``tasks.leakage.planted``), the variants not planted, and the
    lexical methods that find each copy (copies seen by an earlier run from ``<data>/leakage_cache``:
    ``planted.cache``).

    Filler for the planted copies is the text of pretraining docs (with words) that the lexical audit matched
    to no eval doc, read from ``train_frame`` when a plant reaches it (``outputs.Picked``: no copy), or, when
    ``train_frame`` has no texts (``engine: ray``), from the split shards by Ray tasks (``shards``;
    ``outputs.Fetched``: only the texts the plants read).
    """
    pretrain = (train_frame["role"] == "pretrain").to_numpy()  # train_frame has a 0..n-1 index, as has_words
    unrelated = ~train_frame["doc_id"].isin(set(table["train_doc"])).to_numpy() & scanned.has_words
    at = np.flatnonzero(pretrain & unrelated)
    wordnet = synonyms.load(cfg.planted.wordnet_dir)
    ids = Picked(train_frame["doc_id"], at)
    if "text" in train_frame:
        plants, not_planted = make_plants(eval_frame, Picked(train_frame["text"], at), ids, cfg.planted, wordnet.of)
    else:
        assert scanned.words is not None  # a frame without texts is engine: ray's, whose scan counts the words
        texts = Fetched(ids, scanned.words[at], shards.fetch)
        plants, not_planted = texts.filled(
            lambda: make_plants(eval_frame, texts, ids, cfg.planted, wordnet.of, texts.words > 0)
        )
        log.info(f"leakage: planted filler: {len(texts.texts)} of {len(texts)} filler texts read from the split shards")
    if not plants:
        return plants, not_planted, []
    cache = paths.stage_data("leakage_cache")
    return plants, not_planted, plant_cache.found_by(plants, eval_frame, evals, cfg, tokenize, cache, log)
