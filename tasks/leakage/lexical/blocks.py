"""Training docs laid end to end and cut into blocks of whole docs: how the n-gram and substitution scans bound
their memory per process (``worker_memory_mib``), whatever the corpus size."""

from __future__ import annotations

import numpy as np

from tasks.config.corpus.leakage import LexicalParams

BYTES_PER_BLOCK_WORD = 100  # transient bytes per training word of a scan block (hashes, prefix, windows, masks)


def blocks_of_docs(lengths: np.ndarray, words_per_block: int) -> list[tuple[int, int]]:
    """``(first, stop)`` doc ranges of about ``words_per_block`` words each (at least one doc per block)."""
    ends = np.cumsum(lengths)
    blocks, first = [], 0
    while first < len(lengths):
        stop = max(int(np.searchsorted(ends, ends[first] - lengths[first] + words_per_block, side="right")), first + 1)
        blocks.append((first, stop))
        first = stop
    return blocks


def concatenate(docs: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """All docs' word hashes end to end, with the doc index and the position in its doc of every word."""
    lengths = np.array([len(x) for x in docs], dtype=np.int64)
    flat = np.concatenate(docs) if docs else np.zeros(0, dtype=np.uint64)
    doc = np.repeat(np.arange(len(docs)), lengths)
    pos = np.arange(len(flat)) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    return flat, doc, pos


def block_words(cfg: LexicalParams) -> int:
    """Training words per scan block: half of ``cfg.worker_memory_mib`` at ``BYTES_PER_BLOCK_WORD``."""
    return max((cfg.worker_memory_mib << 19) // BYTES_PER_BLOCK_WORD, 1)
