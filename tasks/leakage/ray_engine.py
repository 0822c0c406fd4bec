"""leakage with ``engine: ray``: one pass over blocks of training docs on Ray, byte-identical to ``local``.

Every detector decides each (training doc, eval doc) pair on its own (n-gram hits, whole-doc equality, MinHash
LSH with exact Jaccard, the best passage window of one training doc), and the residual scan records per
pretraining doc what it holds of the eval docs, so running both on disjoint blocks of training docs against
the whole eval side and taking the union gives the ``local`` results exactly; the audit table sorts them.

Ray Data reads the split shards (``read_parquet``, split into blocks of ``cfg.batch_docs`` rows, kept in the
object store); one Ray task per block looks its rows up by ``doc_id`` in the driver's list of training rows
(which fixes each row's index; dev/test rows are skipped), takes their words, and returns the detectors'
matches, which rows have words, and the sparse residual hits of its pretraining rows. The eval side (words
and hashes of the eval docs, small) is put in the object store once. The driver never takes the training
docs' words; it checks that every training row was scanned exactly once.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from tqdm import tqdm

from tasks.common import minhash, raycluster
from tasks.common.textnorm import words
from tasks.config.leakage import LeakageParams
from tasks.leakage import TrainingScan, residual
from tasks.leakage.detectors import Side, detect, make_side


def scan_on_ray(files: list[Path], train_frame: pd.DataFrame, evals: Side, cfg: LeakageParams) -> TrainingScan:
    """``TrainingScan`` of the rows of ``train_frame`` (row ``i`` is ``train_frame.iloc[i]``) read from ``files``.

    Raises ``ImportError`` without Ray and ``ValueError`` when the shards do not hold each training row once.
    """
    ray = raycluster.connect(cfg.ray)
    roles = train_frame["role"].to_numpy()
    pretrain_position = np.cumsum(roles == "pretrain") - 1
    pretrain_position[roles != "pretrain"] = -1
    n = cfg.residual.ngram_words
    shared = [ray.put(x) for x in (pa.array(list(train_frame["doc_id"]), pa.string()), pretrain_position, evals,
                                   residual.eval_targets(evals.tokens, n))]  # fmt: skip
    shards = ray.data.read_parquet([str(f) for f in files], columns=["doc_id", "text"])
    blocks = shards.repartition(target_num_rows_per_block=cfg.batch_docs).materialize().to_arrow_refs()
    pending = [_scan_block.remote(block, *shared, cfg) for block in blocks]
    parts = [ray.get(ref) for ref in tqdm(pending, desc="leakage (ray)", unit="block")]
    return _merged(parts, len(train_frame), list(train_frame["doc_id"].iloc[np.flatnonzero(roles == "pretrain")]))


def _merged(parts: list[tuple], n_rows: int, pretrain_ids: list[str]) -> TrainingScan:
    """One ``TrainingScan`` from the blocks' results; raises ``ValueError`` unless each row came exactly once."""
    rows = np.concatenate([np.zeros(0, np.int64)] + [part[0] for part in parts])
    if len(rows) != n_rows or len(np.unique(rows)) != n_rows:
        raise ValueError(f"leakage (ray): the split shards gave {len(rows)} training rows ({len(np.unique(rows))} "
                         f"distinct) for the {n_rows} training rows of data/split")
    has_words = np.zeros(n_rows, bool)
    has_words[rows] = np.concatenate([np.zeros(0, bool)] + [part[1] for part in parts])
    matches = [m for part in parts for m in part[2]]
    hits = {i: h for part in parts for i, h in part[3].items()}
    whole = {i: w for part in parts for i, w in part[4].items()}
    return TrainingScan(sorted(matches, key=lambda m: m[:3]), has_words, residual.Scan(pretrain_ids, hits, whole))


def _remote(func):
    import ray

    return ray.remote(func)


@_remote
def _scan_block(block: pa.Table, ids: pa.Array, pretrain_position: np.ndarray, evals: Side, targets: tuple,
                cfg: LeakageParams) -> tuple:
    """One block: ``(rows, has_words, matches, hits, whole)`` of its training rows, with global numbering."""
    row = pc.index_in(block.column("doc_id"), value_set=ids)
    train = pc.is_valid(row)
    rows = pc.filter(row, train).to_numpy().astype(np.int64)
    tokens = [words(t) for t in pc.filter(block.column("text"), train).to_pylist()]
    matches = [(int(rows[i]), *rest) for i, *rest in detect(make_side(tokens, minhash.WordHashes()), evals, cfg)]
    mine = np.flatnonzero(pretrain_position[rows] >= 0)
    hits, whole = residual.scan_docs([tokens[k] for k in mine], targets, cfg.residual.ngram_words)
    at = pretrain_position[rows[mine]]
    has_words = np.array([bool(t) for t in tokens], bool)
    return rows, has_words, matches, {int(at[k]): h for k, h in hits.items()}, {int(at[k]): w for k, w in whole.items()}
