"""leakage with ``engine: ray``: the detectors over blocks of training docs on Ray Data, byte-identical to ``local``.

Every detector decides each (training doc, eval doc) pair on its own (n-gram hits, whole-doc equality,
MinHash LSH with exact Jaccard, the best passage window of one training doc), so running ``detect`` on
disjoint blocks of training docs against the whole eval side and taking the union gives the ``local``
matches exactly; the audit table sorts them. Ray Data reads the split shards, keeps the training rows
(looked up by ``doc_id`` in the driver's list, which fixes each row's index), and runs one block of
``cfg.batch_docs`` docs per task. The eval side (words and hashes of the eval docs, small) is put in the
object store once. The planted-recall and residual passes run on the driver, as with ``local``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tasks.common import minhash, raycluster
from tasks.common.textnorm import words
from tasks.config.leakage import LeakageParams
from tasks.leakage.detectors import Side, detect, make_side

MATCH_SCHEMA = pa.schema([("i", pa.int64()), ("j", pa.int64()), ("method", pa.string()), ("score", pa.float64()),
                          ("span", pa.string())])  # fmt: skip


def detect_on_ray(files: list[Path], train_ids: list[str], evals: Side, cfg: LeakageParams) -> list[tuple]:
    """``detect(trains, evals, cfg)`` for the training rows ``train_ids`` (row ``i`` is ``train_ids[i]``) read
    from ``files``; returns the same ``(train_i, eval_j, method, score, span)`` matches (in ``(i, j, method)``
    order). Raises ``ImportError`` without Ray."""
    ray = raycluster.connect(cfg.ray)
    kwargs = {"ids": ray.put(pa.array(train_ids, pa.string())), "evals": ray.put(evals), "cfg": cfg}
    shards = ray.data.read_parquet([str(f) for f in files], columns=["doc_id", "text"])
    found = shards.repartition(target_num_rows_per_block=cfg.batch_docs).map_batches(
        _detect_batch, batch_format="pyarrow", batch_size=cfg.batch_docs, fn_kwargs=kwargs
    )
    blocks = ray.get(found.to_arrow_refs())
    table = pa.concat_tables([MATCH_SCHEMA.empty_table()] + [b.cast(MATCH_SCHEMA) for b in blocks if b.num_rows])
    columns = [table.column(name).to_numpy(zero_copy_only=False) for name in ("method", "j", "i")]
    order = np.lexsort(columns)
    return [(r["i"], r["j"], r["method"], r["score"], r["span"]) for r in table.take(order).to_pylist()]


def _detect_batch(batch: pa.Table, ids, evals, cfg: LeakageParams) -> pa.Table:
    """One Ray Data batch: ``detect`` on its training rows (dev/test rows are skipped), with global row indices."""
    import ray

    ids, evals = (ray.get(x) if isinstance(x, ray.ObjectRef) else x for x in (ids, evals))
    row = pc.index_in(batch.column("doc_id"), value_set=ids)
    train = pc.is_valid(row)
    rows = pc.filter(row, train).to_numpy().astype(np.int64)
    texts = pc.filter(batch.column("text"), train).to_pylist()
    matches = detect(make_side([words(t) for t in texts], minhash.WordHashes()), evals, cfg)
    columns = list(zip(*matches)) or [[]] * 5
    table = pa.table({"i": pa.array(rows[list(columns[0])] if matches else [], pa.int64()),
                      "j": pa.array(columns[1], pa.int64()), "method": pa.array(columns[2], pa.string()),
                      "score": pa.array(columns[3], pa.float64()),
                      "span": pa.array(columns[4], pa.string())})  # fmt: skip
    return table
