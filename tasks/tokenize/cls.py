"""Classification datasets of ``tokenize``: ``data/tokenize/<task>/<tok>/{train,dev,test}``, whole documents.

Documents are stored uncut, with their text: the finetune stage cuts them to its own length (head, or head +
tail) and the bag-of-words baseline reads the full text. The truncation metrics say how many documents are
longer than ``max_seq_len``. A pair task's row is the pair ``meta.text_pair = [a, b]`` that ingest kept
(its ``text`` is ``a``, a blank line, ``b``: what dedup and leakage match), encoded ``[CLS] a [SEP] b [SEP]``
by the tokenizer's own pair template, with ``token_type_ids`` 0 up to the first [SEP] and 1 after it.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from tasks.common.files.parquet import read_clean_source
from tasks.common.matching.textnorm import words
from tasks.config import Paths
from tasks.config.corpus.split import TASK_SPLITS
from tasks.config.corpus.tokenize import TokenizeParams
from tasks.tokenize.tables import length_stats, save_table, write_labels


def read_cls_rows(paths: Paths, source: str, pair: bool = False) -> pd.DataFrame:
    """Rows of a classification source (doc_id, text, label, split, ``n_words``: its ``textnorm.words``, counted
    once for every tokenizer's table; with ``pair`` also ``text_pair``: the two texts), sorted by doc_id. Raises
    ``ValueError`` naming the file and doc_ids on a null label or, for a pair task, a row without
    ``meta.text_pair``."""
    rows = read_clean_source(paths.data, source)
    where = f"data/leakage/{source}.parquet"
    if "label" not in rows.columns or rows["label"].isna().any():
        bad = rows.loc[rows["label"].isna(), "doc_id"].head(5).tolist() if "label" in rows.columns else "column"
        raise ValueError(f"{where}: classification rows need a label (missing for {bad})")
    rows = rows.sort_values("doc_id", kind="stable").reset_index(drop=True)
    rows["n_words"] = np.array([len(words(x)) for x in rows["text"]], dtype=np.int64)
    if pair:
        rows["text_pair"] = [text_pair(meta, doc_id, where) for meta, doc_id in zip(rows["meta"], rows["doc_id"])]
    return rows


def text_pair(meta: str, doc_id: str, where: str) -> list[str]:
    """``[a, b]`` from a row's meta JSON; raises ``ValueError`` naming the doc when it holds no pair."""
    pair = json.loads(meta or "{}").get("text_pair")
    if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(x, str) and x for x in pair)):
        raise ValueError(
            f"{where}: doc_id {doc_id!r} has no text pair (meta.text_pair; a pair task's source needs text_pair_field)"
        )
    return pair


def build_cls(cfg: TokenizeParams, tok, rows: pd.DataFrame, overlap: set[str], out: Path, cache=None) -> dict:
    """Tokenize and save each split whole; write ``labels.json``; returns per-split metrics.

    ``overlap`` holds the eval doc ids that share text with the train split (``train_overlap`` column);
    ``cache``: see ``encode``.
    """
    names = sorted(rows["label"].unique().tolist())
    write_labels(names, out)
    label2id = {name: i for i, name in enumerate(names)}
    metrics: dict = {"labels": len(names)}
    all_full = []
    for split in TASK_SPLITS:
        part = rows[rows["split"] == split]
        encoded = encode(tok, part, cache)
        full = encoded["input_ids"]
        n_full = np.asarray([len(seq) for seq in full], dtype=np.int64)
        types = encoded.get("token_type_ids")
        pair_columns = {} if types is None else {"token_type_ids": pa.array(types, pa.list_(pa.int8()))}
        table = pa.table(
            {
                "doc_id": pa.array(part["doc_id"].tolist(), pa.string()),
                "text": pa.array(part["text"].tolist(), pa.string()),
                "n_words": pa.array(part["n_words"].to_numpy(), pa.int64()),
                "train_overlap": pa.array([d in overlap for d in part["doc_id"]], pa.bool_()),
                "input_ids": pa.array(full, pa.list_(pa.int32())),
                "attention_mask": pa.array([[1] * len(seq) for seq in full], pa.list_(pa.int8())),
                "label": pa.array([label2id[x] for x in part["label"]], pa.int64()),
                "n_tokens_full": pa.array(n_full, pa.int64()),
                **pair_columns,
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


def encode(tok, part: pd.DataFrame, cache=None) -> dict[str, list[list[int]]]:
    """``input_ids`` (and for pairs ``token_type_ids``) of each row, specials added, nothing cut. ``cache`` (a
    ``tasks.tokenize.task_cache.TaskCache`` for ``tok``) encodes only the rows it holds no encoding for."""
    pair = "text_pair" in part
    inputs = [["pair", *p] for p in part["text_pair"]] if pair else [["text", t] for t in part["text"]]
    rows = (
        encode_inputs(tok, inputs)
        if cache is None
        else cache.encodings(inputs, lambda todo: encode_inputs(tok, [inputs[p] for p in todo]))
    )
    return {"input_ids": [r[0] for r in rows], **({"token_type_ids": [r[1] for r in rows]} if pair else {})}


def encode_inputs(tok, inputs: list[list[str]]) -> list[tuple[list[int], list[int] | None, int]]:
    """``(input_ids, token_type_ids or None, 0)`` of each ``["text", t]`` or ``["pair", a, b]`` input (all of one
    kind), the tokenizer's own template (pair template for pairs)."""
    if not inputs:
        return []
    if inputs[0][0] == "text":
        return [
            (ids, None, 0) for ids in tok([x[1] for x in inputs], add_special_tokens=True, verbose=False)["input_ids"]
        ]
    encoded = tok(
        [x[1] for x in inputs],
        [x[2] for x in inputs],
        add_special_tokens=True,
        return_token_type_ids=True,
        verbose=False,
    )
    return [(ids, types, 0) for ids, types in zip(encoded["input_ids"], encoded["token_type_ids"])]


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
