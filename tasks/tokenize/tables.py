"""Helpers the tokenize datasets share: length statistics, label files, Arrow tables saved as datasets, and the
eval docs that overlap their task's train split (the clean vs overlapping slice of the claim table)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
from datasets import Dataset
from datasets.table import InMemoryTable

from tasks.common.files.ioerrors import reading, writing


def length_stats(n_tokens: np.ndarray) -> dict:
    """``tokens_per_doc_mean`` and ``tokens_per_doc_p95`` (None for an empty split)."""
    if n_tokens.size == 0:
        return {"tokens_per_doc_mean": None, "tokens_per_doc_p95": None}
    return {
        "tokens_per_doc_mean": float(n_tokens.mean()),
        "tokens_per_doc_p95": float(np.percentile(n_tokens, 95)),
    }


def length_stats_of_counts(counts: np.ndarray) -> dict:
    """``length_stats`` of the lengths ``counts`` describes (``counts[k]``: the documents of ``k`` tokens),
    without the lengths themselves: the same floats, bit for bit. The p95 is numpy's default (``linear``,
    Hyndman and Fan's method 7) computed as ``np.percentile`` computes it, from the two order statistics around
    its virtual index; ``tests/tokenize`` checks it against ``np.percentile``."""
    n = int(counts.sum())
    if n == 0:
        return {"tokens_per_doc_mean": None, "tokens_per_doc_p95": None}
    virtual = (n - 1) * np.true_divide(95, 100)  # numpy's virtual index for the linear method
    below = int(np.floor(virtual))
    gamma = np.float64(virtual - below)
    ends = np.cumsum(counts)  # ends[k]: the documents of at most k tokens
    low, high = (np.int64(np.searchsorted(ends, min(max(i, 0), n - 1), side="right")) for i in (below, below + 1))
    diff = high - low
    p95 = high - diff * (1 - gamma) if gamma >= 0.5 else low + diff * gamma  # numpy's _lerp
    total = int(np.dot(np.arange(counts.size, dtype=np.int64), counts))
    return {"tokens_per_doc_mean": float(np.float64(total) / n), "tokens_per_doc_p95": float(p95)}


def write_labels(names: list[str], out: Path) -> None:
    """``<out>/labels.json``: label names in id order."""
    out.mkdir(parents=True, exist_ok=True)
    with writing(out / "labels.json"):
        (out / "labels.json").write_text(json.dumps(names, indent=1) + "\n", encoding="utf-8")


def save_table(table: pa.Table, path: Path) -> None:
    """``save_to_disk`` with a content-hash fingerprint, so identical inputs give byte-identical folders. Out of
    room: ``ioerrors.NoRoom`` naming the folder, removed."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    fingerprint = hashlib.md5(sink.getvalue().to_pybytes()).hexdigest()
    with writing(path):
        Dataset(InMemoryTable(table), fingerprint=fingerprint).save_to_disk(str(path))


def train_overlap_ids(data: Path, source: str) -> set[str]:
    """Dev/test doc ids of ``source`` that share a 13-gram or a near duplicate with its own train split.

    Read from ``<data>/leakage/table.parquet`` (check ``task_train``): the leakage audit flags such pairs and
    keeps both docs by default, so the claim table can score the clean and the overlapping eval docs apart
    (GPT-3's contamination analysis, Brown et al. 2020, sec. 4).
    A pair whose train doc the audit removed (``task_train_action: remove``, ``removed.jsonl``) no longer
    overlaps anything. Raises ``FileNotFoundError`` naming the file, ``ioerrors.DamagedFile`` naming one that cannot
    be read.
    """
    path = Path(data) / "leakage" / "table.parquet"
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file (run the leakage stage first)")
    with reading(path):
        table = pd.read_parquet(path, columns=["train_doc", "eval_doc", "eval_source", "check"])
    removed_file = path.with_name("removed.jsonl")
    with reading(removed_file):
        lines = removed_file.read_text(encoding="utf-8").splitlines() if removed_file.exists() else []
        removed = {json.loads(line)["doc_id"] for line in lines if line.strip()}
    live = ~table["train_doc"].isin(removed)
    hits = table[(table["check"] == "task_train") & (table["eval_source"] == source) & live]
    return set(hits["eval_doc"])
