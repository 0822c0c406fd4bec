"""leakage with ``engine: ray``: one pass over blocks of training docs on Ray, byte-identical to ``local``.

Every detector decides each (training doc, eval doc) pair on its own (n-gram hits, whole-doc equality, MinHash
LSH with exact Jaccard, the best passage window of one training doc), and the residual scan records per
pretraining doc what it holds of the eval docs, so running both on disjoint blocks of training docs against
the whole eval side and taking the union gives the ``local`` results exactly; the audit table sorts them.

Ray Data reads the split shards (``read_parquet``, split into blocks of ``cfg.batch_docs`` rows, kept in the
object store); the driver looks every block's ``doc_id``s up in its list of training rows at once (which
fixes each row's index; dev/test rows are skipped), and one Ray task per block takes its training rows' words
and returns the detectors' matches, which rows have words, and the sparse residual hits of its pretraining
rows, and how many whitespace-separated words each has. The eval side (words and hashes of the eval docs,
small) is put in the object store once. The driver never takes the training docs' texts or words; it checks
that every training row was scanned exactly once. The few texts it reads (the planted copies' filler) come
from Ray tasks that read the split shards (``texts_on_ray``).

The cleaned shards are written by Ray tasks too (``clean_on_ray``): once the audit knows which docs go and
which are flagged, one task per split shard streams it into ``<data>/leakage/<source>.parquet``
(``tasks.leakage.cleaned``); the driver sends only the two id sets. (The tasks that scan a block cannot write
its rows: which rows go depends on every block's matches, the semantic pass and the lineage audit.)
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tasks.common.matching import minhash
from tasks.common.runtime import raycluster
from tasks.config.corpus.leakage import LeakageParams
from tasks.leakage.cleaned import clean_shard
from tasks.leakage.lexical import residual
from tasks.leakage.lexical.detectors import detect
from tasks.leakage.lexical.words import Side, make_side, tokenize
from tasks.leakage.scan.local import TrainingScan

BATCH_ROWS = 4096  # rows of a split shard a text-reading task decodes at once (~8 MB of text at 2 KB a doc)


def scan_on_ray(files: list[Path], train_frame: pd.DataFrame, evals: Side, cfg: LeakageParams) -> TrainingScan:
    """``TrainingScan`` of the rows of ``train_frame`` (row ``i`` is ``train_frame.iloc[i]``) read from ``files``.

    Raises ``ImportError`` without Ray and ``ValueError`` when the shards do not hold each training row once.
    """
    ray = raycluster.connect(cfg.ray)
    roles = train_frame["role"].to_numpy()
    pretrain_position = np.cumsum(roles == "pretrain") - 1
    pretrain_position[roles != "pretrain"] = -1
    n = cfg.residual.ngram_words
    shared = [ray.put(x) for x in (evals, residual.eval_targets(evals.tokens, n))]
    shards = ray.data.read_parquet([str(f) for f in files], columns=["doc_id", "text"])
    blocks = shards.repartition(target_num_rows_per_block=cfg.batch_docs).materialize().to_arrow_refs()
    rows = _training_rows(ray, blocks, pa.array(list(train_frame["doc_id"]), pa.string()))
    positions = [np.where(r >= 0, pretrain_position[np.maximum(r, 0)], -1) for r in rows]
    pending = [_scan_block.remote(block, r, p, *shared, cfg) for block, r, p in zip(blocks, rows, positions)]
    parts = raycluster.gather(pending, "leakage (ray)")
    return _merged(parts, len(train_frame), list(train_frame["doc_id"].iloc[np.flatnonzero(roles == "pretrain")]))


def clean_on_ray(files: list[Path], out_dir: Path, removed: set[str], flagged: set[str], cfg: LeakageParams) -> int:
    """``tasks.leakage.cleaned.clean_shard`` of each split shard in ``files``, one Ray task each, into
    ``out_dir`` (a folder every node sees, as the split shards are); the id sets go through the object store
    once. Returns the rows written."""
    ray = raycluster.connect(cfg.ray)
    ids = [ray.put(sorted(x)) for x in (removed, flagged)]
    pending = [_clean_shard.remote(str(f), str(out_dir / f.name), *ids) for f in files]
    return sum(raycluster.gather(pending, "leakage outputs (ray)"))


def texts_on_ray(files: list[Path], doc_ids: list[str], cfg: LeakageParams) -> dict[str, str]:
    """``{doc_id: text}`` of the rows of ``files`` (split shards) whose ``doc_id`` is in ``doc_ids``, read by one
    Ray task a shard, a batch of rows at a time: the driver holds only the texts asked for."""
    ray = raycluster.connect(cfg.ray)
    wanted = ray.put(pa.array(doc_ids, pa.string()))
    found: dict[str, str] = {}
    for part in raycluster.gather([_texts_of.remote(str(f), wanted) for f in files], "leakage texts (ray)"):
        found.update(part)
    return found


def _training_rows(ray, blocks: list, doc_ids: pa.Array) -> list[np.ndarray]:
    """Per block, the training row of each of its rows (-1 for a dev/test row), from one lookup over all blocks."""
    ids = ray.get([_doc_ids.remote(block) for block in blocks])
    found = pc.index_in(pa.chunked_array(ids, pa.string()), value_set=doc_ids)
    rows = pc.fill_null(found, -1).to_numpy().astype(np.int64)
    return np.split(rows, np.cumsum([len(x) for x in ids])[:-1]) if ids else []


def _merged(parts: list[tuple], n_rows: int, pretrain_ids: list[str]) -> TrainingScan:
    """One ``TrainingScan`` from the blocks' results; raises ``ValueError`` unless each row came exactly once."""
    rows = np.concatenate([np.zeros(0, np.int64)] + [part[0] for part in parts])
    if len(rows) != n_rows or len(np.unique(rows)) != n_rows:
        raise ValueError(
            f"leakage (ray): the split shards gave {len(rows)} training rows ({len(np.unique(rows))} "
            f"distinct) for the {n_rows} training rows of data/split"
        )
    has_words, words = np.zeros(n_rows, bool), np.zeros(n_rows, np.int32)
    has_words[rows] = np.concatenate([np.zeros(0, bool)] + [part[1] for part in parts])
    words[rows] = np.concatenate([np.zeros(0, np.int32)] + [part[5] for part in parts])
    matches = [m for part in parts for m in part[2]]
    hits = {i: h for part in parts for i, h in part[3].items()}
    whole = {i: w for part in parts for i, w in part[4].items()}
    scan = residual.Scan(pretrain_ids, hits, whole)
    return TrainingScan(sorted(matches, key=lambda m: m[:3]), has_words, scan, words)


@raycluster.remote
def _doc_ids(block: pa.Table) -> pa.Array:
    return block.column("doc_id").combine_chunks().cast(pa.string())  # Ray may hand over large_string


@raycluster.remote
def _scan_block(
    block: pa.Table, row: np.ndarray, pretrain_position: np.ndarray, evals: Side, targets: tuple, cfg: LeakageParams
) -> tuple:
    """One block: ``(rows, has_words, matches, hits, whole, words)`` of its training rows, with global numbering
    (``row``: each block row's training row or -1; ``pretrain_position``: its position among the pretraining rows
    or -1; ``words``: whitespace-separated words a row)."""
    train = np.flatnonzero(row >= 0)
    rows, pretrain_position = row[train], pretrain_position[train]
    texts = block.column("text").take(pa.array(train)).to_pylist()
    words = np.array([len(t.split()) for t in texts], np.int32)
    tokens = [tokenize(t) for t in texts]
    del texts
    found = detect(make_side(tokens, minhash.WordHashes()), evals, cfg.lexical)
    matches = [(int(rows[i]), *rest) for i, *rest in found]
    mine = np.flatnonzero(pretrain_position >= 0)
    hits, whole = residual.scan_docs([tokens[k] for k in mine], targets, cfg.residual.ngram_words)
    at = pretrain_position[mine]
    has_words = np.array([bool(t) for t in tokens], bool)
    hits, whole = {int(at[k]): h for k, h in hits.items()}, {int(at[k]): w for k, w in whole.items()}
    return rows, has_words, matches, hits, whole, words


@raycluster.remote
def _texts_of(split_file: str, wanted: pa.Array) -> dict[str, str]:
    found: dict[str, str] = {}
    for batch in pq.ParquetFile(split_file).iter_batches(batch_size=BATCH_ROWS, columns=["doc_id", "text"]):
        hit = pc.is_in(batch.column("doc_id").cast(pa.string()), value_set=wanted)
        kept = batch.filter(hit)
        found.update(zip(kept.column("doc_id").to_pylist(), kept.column("text").to_pylist()))
    return found


@raycluster.remote
def _clean_shard(split_file: str, out_file: str, removed: list[str], flagged: list[str]) -> int:
    return clean_shard(Path(split_file), Path(out_file), removed, flagged)
