"""The semantic detector's nearest-window search (``method.pair_scores``): exact blocked matrix products, or a
faiss HNSW index above ``semantic.exact_max_windows`` corpus windows (see ``tasks/leakage/semantic/method.py``).

Both return ``(best, q, i, score)``: ``best`` (n_queries,) float32, each query window's best score over what it
searched (-inf when nothing), and the (query window, index window) pairs scoring at least ``threshold`` with
their float32 scores, as numpy arrays (at 16x the default corpus 14,000 query windows meet 28 blocks: a Python
tuple per row and block cost more than a second)."""

from __future__ import annotations

import numpy as np


def exact_search(queries: np.ndarray, index: np.ndarray, block: int, threshold: float):
    """Every query window against every block of ``block`` index windows, one matrix product per block
    (``products``)."""
    best = np.full(len(queries), -np.inf, dtype=np.float32)
    found = [_no_pairs()]
    queries_t, index_t = aligned(queries), aligned(index)
    for first in range(0, len(index), block):
        scores = products(queries_t, index_t[first : first + block])
        top = scores.max(axis=1)
        np.maximum(best, top, out=best)
        rows = np.flatnonzero(top >= threshold)  # few rows reach it: comparing the whole block cost more than its GEMM
        q, i = np.nonzero(scores[rows] >= threshold)
        found.append((rows[q], i + first, scores[rows[q], i]))
    return (best, *(np.concatenate(column) for column in zip(*found)))


def aligned(x: np.ndarray):
    """``x`` (n, dim) as a float32 CPU torch tensor in memory torch allocated (64-byte aligned). MKL (torch's
    BLAS) documents that its results can differ with the alignment of the input arrays unless its conditional
    numerical reproducibility mode is on, and a scheduled run must repeat a from-scratch run's scores bit for
    bit; a copy costs about 50 ms for 100,000 windows."""
    import torch

    return torch.from_numpy(np.require(x, np.float32, ["C"])).clone()


def products(a, b) -> np.ndarray:
    """``a @ b.T`` as float32 numpy (torch tensors from ``aligned`` or their row slices): torch's CPU matrix
    product (MKL) ran 2.7x numpy's OpenBLAS build on this project's machine (14,055 x 8,192 x 384: 0.33
    against 0.90 s, 2 cores, the same values)."""
    import torch

    with torch.inference_mode():
        return (a @ b.T).numpy()


def ann_search(queries: np.ndarray, index: np.ndarray, neighbours: int, threshold: float):
    """faiss HNSW (inner product): each query window's ``neighbours`` nearest index windows, scored exactly.
    Raises ``ImportError`` saying how to install faiss."""
    try:
        import faiss
    except ImportError:
        raise ImportError(
            f"leakage.semantic: {len(index)} corpus windows exceed exact_max_windows; the HNSW "
            "index needs faiss: pip install -e '.[ann]'"
        ) from None
    hnsw = faiss.IndexHNSWFlat(index.shape[1], 32, faiss.METRIC_INNER_PRODUCT)
    hnsw.hnsw.efSearch = max(64, 2 * neighbours)
    hnsw.add(np.ascontiguousarray(index, dtype=np.float32))
    _, found = hnsw.search(np.ascontiguousarray(queries, dtype=np.float32), neighbours)
    q, k = np.nonzero(found >= 0)
    i = found[q, k]
    scores = np.einsum("ij,ij->i", index[i], queries[q]).astype(np.float32)
    best = np.full(len(queries), -np.inf, dtype=np.float32)
    np.maximum.at(best, q, scores)
    keep = scores >= threshold
    return best, q[keep], i[keep], scores[keep]


def _no_pairs() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float32)
