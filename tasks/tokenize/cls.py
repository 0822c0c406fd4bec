"""Classification datasets of ``tokenize``: ``data/tokenize/cls/<tok>/{train,dev,test}``, whole documents.

Documents are stored uncut, with their text: the finetune stage cuts them to its own length (head, or head +
tail) and the bag-of-words baseline reads the full text. The truncation metrics say how many documents are
longer than ``max_seq_len``.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from tasks.common.parquet import read_clean_source
from tasks.common.textnorm import words
from tasks.config import Paths
from tasks.config.split import TASK_SPLITS
from tasks.config.tokenize import TokenizeParams
from tasks.tokenize.tables import length_stats, save_table, write_labels


def read_cls_rows(paths: Paths, source: str) -> pd.DataFrame:
    """Rows of the cls source (doc_id, text, label, split), sorted by doc_id; raises on a null label."""
    rows = read_clean_source(paths.data, source)
    if "label" not in rows.columns or rows["label"].isna().any():
        bad = rows.loc[rows["label"].isna(), "doc_id"].head(5).tolist() if "label" in rows.columns else "column"
        raise ValueError(f"data/leakage/{source}.parquet: cls rows need a label (missing for {bad})")
    return rows.sort_values("doc_id", kind="stable").reset_index(drop=True)


def build_cls(cfg: TokenizeParams, tok, rows: pd.DataFrame, overlap: set[str], out: Path) -> dict:
    """Tokenize and save each split whole; write ``labels.json``; returns per-split metrics.

    ``overlap`` holds the eval doc ids that share text with the train split (``train_overlap`` column).
    """
    names = sorted(rows["label"].unique().tolist())
    write_labels(names, out)
    label2id = {name: i for i, name in enumerate(names)}
    metrics: dict = {"labels": len(names)}
    all_full = []
    for split in TASK_SPLITS:
        part = rows[rows["split"] == split]
        full = tok(part["text"].tolist(), add_special_tokens=True, verbose=False)["input_ids"]
        n_full = np.asarray([len(seq) for seq in full], dtype=np.int64)
        table = pa.table(
            {
                "doc_id": pa.array(part["doc_id"].tolist(), pa.string()),
                "text": pa.array(part["text"].tolist(), pa.string()),
                "n_words": pa.array([len(words(x)) for x in part["text"]], pa.int64()),
                "train_overlap": pa.array([d in overlap for d in part["doc_id"]], pa.bool_()),
                "input_ids": pa.array(full, pa.list_(pa.int32())),
                "attention_mask": pa.array([[1] * len(seq) for seq in full], pa.list_(pa.int8())),
                "label": pa.array([label2id[x] for x in part["label"]], pa.int64()),
                "n_tokens_full": pa.array(n_full, pa.int64()),
            }
        )
        save_table(table, out / split)
        metrics[split] = {
            **truncation_stats(n_full, cfg.max_seq_len_tokens),
            "label_distribution": dict(sorted(Counter(part["label"]).items())),
        }
        all_full.append(n_full)
    overall = truncation_stats(np.concatenate(all_full), cfg.max_seq_len_tokens)
    return {**metrics, **{key: overall[key] for key in ("docs", "truncated_docs", "truncation_rate", "tokens_cut")}}


def truncation_stats(n_full: np.ndarray, max_seq_len: int) -> dict:
    """How many documents are longer than ``max_seq_len`` and by how many tokens (counts include specials)."""
    cut = np.clip(n_full - max_seq_len, 0, None)
    truncated = cut > 0
    return {
        "docs": int(n_full.size),
        "truncated_docs": int(truncated.sum()),
        "truncation_rate": float(truncated.mean()) if n_full.size else None,
        "tokens_cut": int(cut.sum()),
        "tokens_cut_fraction": float(cut.sum() / n_full.sum()) if n_full.size else None,
        "tokens_cut_mean_per_truncated_doc": float(cut[truncated].mean()) if truncated.any() else 0.0,
        **length_stats(n_full),
    }
