"""The local lexical scan on ``leakage.num_proc`` forked processes: contiguous blocks of training rows, each
scanned against the whole eval side, joined into the one-process ``TrainingScan``.

Why the join is the one-process scan: every detector decides a (training doc, eval doc) pair from the two texts
alone, and the residual scan of a pretraining doc depends on its words and the eval n-grams only (the premise
``tasks/leakage/scan/incremental.py`` and ``engine: ray`` rest on too), so the blocks' results are those rows' results.
Rows are renumbered to the frame's, the residual hits to the frame's pretraining positions, and the matches put
in the one-process order (detector, then training row, then eval doc). Blocks are balanced by characters.

Workers are forked, so they inherit the frame and the eval side instead of receiving pickles; each returns
its block's matches and sparse residual hits. Memory: each process holds its own eval n-gram index shards, so
the n-gram scan's arrays take up to ``num_proc x worker_memory_mib``. Only the first block's progress bars are
shown (the others would interleave with it).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor

import numpy as np
import pandas as pd

from tasks.config.corpus.leakage import LeakageParams
from tasks.leakage.lexical import residual
from tasks.leakage.lexical.detectors import DETECTORS
from tasks.leakage.lexical.words import Side
from tasks.leakage.scan.local import TrainingScan, scan_in_process

MIN_ROWS_PER_PROCESS = 500  # below this a fork costs more than the scan it shares out

_FORKED: tuple = ()  # (train_frame, evals, cfg, scan_rows), inherited by the forked workers, never pickled


def blocks_of(lengths: np.ndarray, num_proc: int) -> list[tuple[int, int]]:
    """Contiguous ``(start, stop)`` row ranges covering ``len(lengths)`` rows, at most ``num_proc`` of them and
    at most one per ``MIN_ROWS_PER_PROCESS`` rows; each block but the last ends with the row whose running
    character count first reaches the next equal share. One range (or none for no rows) means: scan in this process."""
    n = len(lengths)
    parts = max(1, min(num_proc, n // MIN_ROWS_PER_PROCESS))
    if n == 0:
        return []
    ends = np.cumsum(lengths, dtype=np.float64)
    cuts = np.searchsorted(ends, ends[-1] * np.arange(1, parts) / parts, side="left") + 1
    bounds = np.unique(np.clip(np.concatenate([[0], cuts, [n]]), 0, n))
    return [(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:]) if b > a]


def scan_locally(train_frame: pd.DataFrame, evals: Side, cfg: LeakageParams) -> TrainingScan:
    """``TrainingScan`` on this machine: on ``cfg.num_proc`` forked processes over blocks of training rows
    (``scan_forked``: the same scan), or in this process (``local.scan_in_process``) for one process or few
    rows."""
    return scan_forked(train_frame, evals, cfg, scan_in_process)


def scan_forked(train_frame: pd.DataFrame, evals: Side, cfg: LeakageParams, scan_rows) -> TrainingScan:
    """``scan_rows(train_frame, evals, cfg)`` (a ``TrainingScan``) computed over ``blocks_of`` the rows on forked
    processes and joined (see the module docstring). Raises what ``scan_rows`` raises in a worker."""
    global _FORKED
    lengths = train_frame["text"].astype(str).str.len().to_numpy()
    blocks = blocks_of(lengths, cfg.num_proc)
    if len(blocks) <= 1:
        return scan_rows(train_frame, evals, cfg)
    _FORKED = (train_frame, evals, cfg, scan_rows)
    try:
        with ProcessPoolExecutor(len(blocks), mp_context=multiprocessing.get_context("fork")) as pool:
            parts = list(pool.map(_scan_block, [(k, *block) for k, block in enumerate(blocks)]))
    finally:
        _FORKED = ()
    return joined(train_frame, blocks, parts)


def _scan_block(job: tuple[int, int, int]) -> TrainingScan:
    k, start, stop = job
    train_frame, evals, cfg, scan_rows = _FORKED
    rows = train_frame.iloc[start:stop].reset_index(drop=True)
    if k == 0:
        return scan_rows(rows, evals, cfg)
    with open(os.devnull, "w") as sink, contextlib.redirect_stderr(sink):  # the first block's bars stand for all
        return scan_rows(rows, evals, cfg)


def joined(train_frame: pd.DataFrame, blocks: list[tuple[int, int]], parts: list[TrainingScan]) -> TrainingScan:
    """The blocks' scans as one scan of ``train_frame``: rows and pretraining positions offset to the frame's."""
    is_pretrain = train_frame["role"].to_numpy() == "pretrain"
    before = np.concatenate([[0], np.cumsum(is_pretrain)])  # pretraining rows before each row
    order = {method: k for k, method in enumerate(DETECTORS)}
    matches, hits, whole = [], {}, {}
    for (start, _), part in zip(blocks, parts):
        matches += [(i + start, *rest) for i, *rest in part.matches]
        hits.update({p + int(before[start]): h for p, h in part.pretrain.hits.items()})
        whole.update({p + int(before[start]): w for p, w in part.pretrain.whole.items()})
    matches.sort(key=lambda m: (order[m[2]], m[0], m[1]))
    ids = list(train_frame["doc_id"].iloc[np.flatnonzero(is_pretrain)])
    has_words = np.concatenate([np.zeros(0, bool)] + [part.has_words for part in parts])
    return TrainingScan(matches, has_words, residual.Scan(ids, hits, whole))
