"""The semantic detector's nearest-window search (``semantic.pair_scores``): exact blocked matrix products, or a
faiss HNSW index above ``semantic.exact_max_windows`` corpus windows (see ``tasks/leakage/semantic.py``)."""

from __future__ import annotations

import numpy as np


def exact_search(queries: np.ndarray, index: np.ndarray, block: int, threshold: float):
    """``(query window, index window, score)``: for every block of ``block`` index windows, each query window's
    best window in it and every pair scoring at least ``threshold`` (one matrix product per block)."""
    rows = np.arange(len(queries))
    for first in range(0, len(index), block):
        scores = queries @ index[first : first + block].T
        top = scores.argmax(axis=1)
        yield from zip(rows.tolist(), (top + first).tolist(), scores[rows, top].astype(float).tolist())
        q, i = np.nonzero(scores >= threshold)
        yield from zip(q.tolist(), (i + first).tolist(), scores[q, i].astype(float).tolist())


def ann_search(queries: np.ndarray, index: np.ndarray, neighbours: int):
    """faiss HNSW (inner product): ``(query window, index window, exact score)`` of each query window's
    ``neighbours`` nearest index windows. Raises ``ImportError`` saying how to install faiss."""
    try:
        import faiss
    except ImportError:
        raise ImportError(f"leakage.semantic: {len(index)} corpus windows exceed exact_max_windows; the HNSW "
                          "index needs faiss: pip install -e '.[ann]'") from None
    hnsw = faiss.IndexHNSWFlat(index.shape[1], 32, faiss.METRIC_INNER_PRODUCT)
    hnsw.hnsw.efSearch = max(64, 2 * neighbours)
    hnsw.add(np.ascontiguousarray(index, dtype=np.float32))
    _, found = hnsw.search(np.ascontiguousarray(queries, dtype=np.float32), neighbours)
    for q, row in enumerate(found):
        row = row[row >= 0]
        for i, score in zip(row.tolist(), (index[row] @ queries[q]).astype(float).tolist()):
            yield q, i, score
