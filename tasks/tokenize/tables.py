"""Helpers the tokenize datasets share: length statistics, label files, Arrow tables saved as datasets."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
from datasets import Dataset
from datasets.table import InMemoryTable


def length_stats(n_tokens: np.ndarray) -> dict:
    """``tokens_per_doc_mean`` and ``tokens_per_doc_p95`` (None for an empty split)."""
    if n_tokens.size == 0:
        return {"tokens_per_doc_mean": None, "tokens_per_doc_p95": None}
    return {
        "tokens_per_doc_mean": float(n_tokens.mean()),
        "tokens_per_doc_p95": float(np.percentile(n_tokens, 95)),
    }


def write_labels(names: list[str], out: Path) -> None:
    """``<out>/labels.json``: label names in id order."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "labels.json").write_text(json.dumps(names, indent=1) + "\n", encoding="utf-8")


def save_table(table: pa.Table, path: Path) -> None:
    """``save_to_disk`` with a content-hash fingerprint, so identical inputs give byte-identical folders."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    fingerprint = hashlib.md5(sink.getvalue().to_pybytes()).hexdigest()
    Dataset(InMemoryTable(table), fingerprint=fingerprint).save_to_disk(str(path))
