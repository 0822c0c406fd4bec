"""The semantic detector's nearest-window search (``method.pair_scores``), sharded by corpus window: each shard
of ``semantic.search_shard_windows`` corpus windows is searched on its own (``search_shard``) and the shards'
hits merge (``merge_shards``), in this process (``sharded_search``, ``engine: local``) or one Ray task a shard
(``tasks/leakage/semantic/cluster/ray_engine.py``), so both engines give the same pairs and no worker holds every
corpus vector. A shard is searched exactly (blocked matrix products) up to ``semantic.exact_max_windows``
corpus windows in all, else by a faiss HNSW index per shard (see ``tasks/leakage/semantic/method.py``).

Exact: a shard's hits are its (query window, corpus window) pairs scoring at least ``threshold``; a shard is a
whole number of ``search_block_windows`` blocks, so its matrix products are the unsharded search's, bit for
bit, and the union of the shards' pairs is the unsharded search's. faiss: a shard's hits are each query
window's ``ann_neighbours`` nearest windows of the shard, scored exactly; the merge keeps each query window's
``ann_neighbours`` best over all shards (``top_k``), then those at least ``threshold``.

Every search returns ``(best, q, i, score)``: ``best`` (n_queries,) float32, each query window's best score over
what it searched (-inf when nothing), and the (query window, corpus window) pairs kept with their float32
scores, as numpy arrays (at 16x the default corpus 14,000 query windows meet 28 blocks: a Python tuple per row
and block cost more than a second)."""

from __future__ import annotations

import numpy as np

from tasks.config.corpus.leakage import SemanticParams


def sharded_search(queries: np.ndarray, index: np.ndarray, threshold: float, cfg: SemanticParams):
    """``queries`` (n, dim) against ``index`` (m, dim) float32 unit rows, shard by shard in this process."""
    exact, starts, shard = plan(len(index), cfg)
    parts = [search_shard(queries, index[s : s + shard], threshold, cfg, exact) for s in starts]
    return merge_shards(parts, starts, len(queries), threshold, None if exact else cfg.ann_neighbours)


def plan(n_index: int, cfg: SemanticParams) -> tuple[bool, list[int], int]:
    """``(exact, shard starts, shard windows)`` for ``n_index`` corpus windows: exact up to
    ``exact_max_windows``; shards of ``search_shard_windows`` rounded up to whole ``search_block_windows``."""
    block = cfg.search_block_windows
    shard = -(-cfg.search_shard_windows // block) * block
    return n_index <= cfg.exact_max_windows, list(range(0, n_index, shard)), shard


def search_shard(queries: np.ndarray, shard: np.ndarray, threshold: float, cfg: SemanticParams, exact: bool):
    """One shard's hits (module docstring), with ``i`` counted from the shard's first window."""
    if exact:
        return exact_search(queries, shard, cfg.search_block_windows, threshold)
    return ann_search(queries, shard, cfg.ann_neighbours)


def merge_shards(parts: list[tuple], starts: list[int], n_queries: int, threshold: float, neighbours: int | None):
    """The shards' hits (``parts``, in the order of their first corpus windows ``starts``) as one search's:
    ``best`` the maximum over the shards; the pairs with ``i`` counted over the whole index, with
    ``neighbours`` (the faiss search) only each query window's ``neighbours`` best (``top_k``), and only those
    scoring at least ``threshold``."""
    best = np.full(n_queries, -np.inf, dtype=np.float32)
    found = [_no_pairs()]
    for (shard_best, q, i, score), start in zip(parts, starts):
        np.maximum(best, shard_best, out=best)
        found.append((q, i + start, score))
    q, i, score = (np.concatenate(column) for column in zip(*found))
    if neighbours is not None:
        keep = top_k(q, i, score, neighbours)
        q, i, score = q[keep], i[keep], score[keep]
    keep = score >= threshold
    return best, q[keep], i[keep], score[keep]


def top_k(q: np.ndarray, i: np.ndarray, score: np.ndarray, k: int) -> np.ndarray:
    """Positions of each query window's ``k`` highest-scoring pairs (on a tie the lowest corpus window), in
    (query, -score, corpus window) order."""
    order = np.lexsort((i, -score, q))
    ranked = q[order]
    first = np.searchsorted(ranked, ranked, "left")  # the position of each pair's query's best pair
    return order[np.arange(len(order)) - first < k]


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


def ann_search(queries: np.ndarray, index: np.ndarray, neighbours: int):
    """faiss HNSW (inner product): each query window's ``neighbours`` nearest index windows, scored exactly, all
    of them (no threshold: ``merge_shards`` keeps the best over the shards first). Raises ``ImportError`` saying
    how to install faiss."""
    try:
        import faiss
    except ImportError:
        raise ImportError(
            "leakage.semantic: the corpus windows exceed exact_max_windows; the HNSW index needs faiss: "
            "pip install -e '.[ann]'"
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
    return best, q, i, scores


def _no_pairs() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float32)
