"""Stage ``tokenize``: packed MLM blocks for pretraining, and cls/ner datasets for each tokenizer.

Reads ``data/leakage/<source>.parquet`` (``is_duplicate == false`` rows), ``models/tokenizer`` and the packaged
MiniLM tokenizer; writes (``datasets.save_to_disk``, contract in ``tasks/CONTRACTS.md``):

- ``data/tokenize/pretrain/{train,heldout}``: blocks of exactly ``max_seq_len`` tokens. Documents are joined
  as ``doc [SEP] doc [SEP] ...`` and cut every ``max_seq_len - 1`` tokens; each block starts with [CLS]
  (the "full-sentences" packing of RoBERTa, Liu et al. 2019, with BERT's [CLS]). One tail shorter than a
  block is dropped and reported.
- ``data/tokenize/cls/<tok>/{train,dev,test}``: truncated to ``max_seq_len``; ``truncated`` and
  ``n_tokens_full`` say what the model never sees.
- ``data/tokenize/ner/<tok>/{train,dev,test}``: one row per window, ``labels_first`` and ``labels_all``
  (see ``tasks/common/alignment.py``); long sentences become overlapping windows, so no gold word is lost.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
from datasets import Dataset
from datasets.table import InMemoryTable
from tqdm import tqdm

from tasks.common import alignment
from tasks.common.encoders import load_tokenizer, reference_model_dir, tokenizer_dir
from tasks.common.parquet import read_clean_source
from tasks.config import Paths
from tasks.config.split import PRETRAIN_SPLITS, TASK_SPLITS
from tasks.config.tokenize import TokenizeParams


def run(cfg: TokenizeParams, paths: Paths, log) -> dict:
    """Write every tokenized dataset under ``<data>/tokenize`` and return the metrics (per task and tokenizer)."""
    out = Path(paths.data) / "tokenize"
    shutil.rmtree(out, ignore_errors=True)
    tokenizers = {
        "clozeline": load_tokenizer(tokenizer_dir(paths)),
        "reference": load_tokenizer(reference_model_dir()),
    }
    metrics: dict = {"max_seq_len_tokens": cfg.max_seq_len_tokens}
    metrics["pretrain"] = pack_pretrain(cfg, paths, tokenizers["clozeline"], out / "pretrain", log)
    cls_rows = read_cls_rows(paths, cfg.tasks.cls)
    ner_rows, metrics["ner_input"] = read_ner_rows(paths, cfg.tasks.ner, cfg.ner_invalid_iob2)
    metrics["cls"] = {name: build_cls(cfg, tok, cls_rows, out / "cls" / name) for name, tok in tokenizers.items()}
    metrics["ner"] = {name: build_ner(cfg, tok, ner_rows, out / "ner" / name) for name, tok in tokenizers.items()}
    log.info(f"tokenize: wrote {out}")
    return metrics


# ---------------------------------------------------------------- pretraining blocks


def pack_pretrain(cfg: TokenizeParams, paths: Paths, tok, out: Path, log) -> dict:
    """Tokenize and pack the role=pretrain rows of each split; returns per-split packing metrics."""
    rows = pd.concat([read_clean_source(paths.data, src) for src in sorted(cfg.pretrain_sources)], ignore_index=True)
    rows = rows[rows["role"] == "pretrain"].sort_values("doc_id", kind="stable")
    metrics = {}
    for split in PRETRAIN_SPLITS:
        docs = Dataset.from_pandas(rows.loc[rows["split"] == split, ["doc_id", "text"]], preserve_index=False)
        ids, lengths = tokenize_docs(docs, tok, cfg.map_batch_size_docs, cfg.num_proc)
        stream = join_with_sep(ids, lengths, tok.sep_token_id)
        blocks, dropped = pack_blocks(stream, cfg.max_seq_len_tokens, tok.cls_token_id, split)
        save_blocks(blocks, np.asarray(tok.all_special_ids), out / split)
        metrics[split] = {
            "docs": len(docs),
            "empty_docs": int(np.sum(lengths == 0)),
            "tokens": int(stream.size),
            "blocks": int(blocks.shape[0]),
            "dropped_tail_tokens": dropped,
            "dropped_tail_fraction": dropped / stream.size,
            **length_stats(lengths),
        }
        log.info(f"tokenize: pretrain/{split}: {blocks.shape[0]} blocks, {dropped} tail tokens dropped")
    return metrics


def _encode_batch(batch: dict, tok) -> dict:
    # only input_ids: building attention_mask/token_type_ids lists too costs more than the tokenization
    enc = tok(
        batch["text"],
        add_special_tokens=False,
        return_attention_mask=False,
        return_token_type_ids=False,
        verbose=False,
    )
    return {"input_ids": enc["input_ids"]}


def tokenize_docs(docs: Dataset, tok, batch_size: int, num_proc: int) -> tuple[np.ndarray, np.ndarray]:
    """Subword ids of every document, via ``datasets.map(batched=True)``, without special tokens.

    Returns ``(ids, lengths)``: all ids concatenated in document order (shape ``(total_tokens,)``) and the
    tokens per document (shape ``(docs,)``).
    """
    if len(docs) == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    encoded = docs.map(
        _encode_batch,
        fn_kwargs={"tok": tok},
        batched=True,
        batch_size=batch_size,
        num_proc=num_proc if num_proc > 1 else None,
        remove_columns=docs.column_names,
        desc="tokenize pretrain",
    )
    column = encoded.data.column("input_ids").combine_chunks()
    lengths = np.diff(column.offsets.to_numpy())
    values = column.flatten().to_numpy()
    return values.astype(np.int64), lengths.astype(np.int64)


def join_with_sep(ids: np.ndarray, lengths: np.ndarray, sep_id: int) -> np.ndarray:
    """``doc_0 [SEP] doc_1 [SEP] ...``: the token stream, shape ``(total_tokens + docs,)``."""
    return np.insert(ids, np.cumsum(lengths), sep_id)


def pack_blocks(stream: np.ndarray, max_seq_len: int, cls_id: int, split: str) -> tuple[np.ndarray, int]:
    """Cut ``stream`` into blocks of ``max_seq_len - 1`` tokens and prepend [CLS] to each.

    Returns ``(blocks, dropped_tail_tokens)`` with ``blocks`` of shape ``(n_blocks, max_seq_len)``. Raises
    ``ValueError`` when the stream is shorter than one block (an empty dataset would fail much later).
    """
    body = max_seq_len - 1
    n_blocks = stream.size // body
    if n_blocks == 0:
        raise ValueError(
            f"tokenize: pretrain split {split!r} has {stream.size} tokens, fewer than one block of "
            f"{body} (+[CLS]); add pretraining text or lower tokenize.max_seq_len_tokens"
        )
    blocks = np.empty((n_blocks, max_seq_len), dtype=np.int64)
    blocks[:, 0] = cls_id
    blocks[:, 1:] = stream[: n_blocks * body].reshape(n_blocks, body)
    return blocks, int(stream.size - n_blocks * body)


def save_blocks(blocks: np.ndarray, special_ids: np.ndarray, path: Path) -> None:
    """Save blocks with ``input_ids``, ``attention_mask`` (all 1) and ``special_tokens_mask`` columns."""
    n_blocks, seq_len = blocks.shape
    offsets = pa.array(np.arange(0, (n_blocks + 1) * seq_len, seq_len, dtype=np.int32))

    def column(values: np.ndarray, dtype: pa.DataType) -> pa.ListArray:
        return pa.ListArray.from_arrays(offsets, pa.array(values.reshape(-1), type=dtype))

    table = pa.table(
        {
            "input_ids": column(blocks, pa.int32()),
            "attention_mask": column(np.ones_like(blocks), pa.int8()),
            "special_tokens_mask": column(np.isin(blocks, special_ids).astype(np.int8), pa.int8()),
        }
    )
    save_table(table, path)


# ---------------------------------------------------------------- classification


def read_cls_rows(paths: Paths, source: str) -> pd.DataFrame:
    """Rows of the cls source (doc_id, text, label, split), sorted by doc_id; raises on a null label."""
    rows = read_clean_source(paths.data, source)
    if "label" not in rows.columns or rows["label"].isna().any():
        bad = rows.loc[rows["label"].isna(), "doc_id"].head(5).tolist() if "label" in rows.columns else "column"
        raise ValueError(f"data/leakage/{source}.parquet: cls rows need a label (missing for {bad})")
    return rows.sort_values("doc_id", kind="stable").reset_index(drop=True)


def build_cls(cfg: TokenizeParams, tok, rows: pd.DataFrame, out: Path) -> dict:
    """Tokenize, truncate and save each split; write ``labels.json``; returns per-split metrics."""
    names = sorted(rows["label"].unique().tolist())
    write_labels(names, out)
    label2id = {name: i for i, name in enumerate(names)}
    metrics: dict = {"labels": len(names)}
    all_full = []
    for split in TASK_SPLITS:
        part = rows[rows["split"] == split]
        full = tok(part["text"].tolist(), add_special_tokens=True, verbose=False)["input_ids"]
        ids = [truncate(seq, cfg.max_seq_len_tokens, tok.sep_token_id) for seq in full]
        n_full = np.asarray([len(seq) for seq in full], dtype=np.int64)
        table = pa.table(
            {
                "doc_id": pa.array(part["doc_id"].tolist(), pa.string()),
                "input_ids": pa.array(ids, pa.list_(pa.int32())),
                "attention_mask": pa.array([[1] * len(seq) for seq in ids], pa.list_(pa.int8())),
                "label": pa.array([label2id[x] for x in part["label"]], pa.int64()),
                "truncated": pa.array((n_full > cfg.max_seq_len_tokens).tolist(), pa.bool_()),
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


def truncate(ids: list[int], max_seq_len: int, sep_id: int) -> list[int]:
    """Keep the first ``max_seq_len - 1`` tokens and end with [SEP], as HF ``truncation=True`` does."""
    return ids if len(ids) <= max_seq_len else [*ids[: max_seq_len - 1], sep_id]


def truncation_stats(n_full: np.ndarray, max_seq_len: int) -> dict:
    """How many documents lost tokens and how many tokens the model never sees (counts include specials)."""
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


# ---------------------------------------------------------------- NER


def read_ner_rows(paths: Paths, source: str, policy: str) -> tuple[pd.DataFrame, dict]:
    """NER rows (doc_id, tokens, tags, split) after IOB2 validation, sorted by doc_id, plus a report.

    Invalid IOB2 (``I-X`` not continuing an X chunk) is repaired (``alignment.repair_iob2``), or the sentence
    dropped, or a ``ValueError`` raised, per ``policy``. Empty sentences are dropped. Rows in = kept + dropped.
    Raises ``ValueError`` naming the doc_id for null or length-mismatched tokens/tags, or non-IOB2 tags.
    """
    rows = read_clean_source(paths.data, source).sort_values("doc_id", kind="stable").reset_index(drop=True)
    where = f"data/leakage/{source}.parquet"
    kept, dropped = [], Counter()
    invalid_tags = repaired = 0
    for row in rows.itertuples(index=False):
        if row.tokens is None or row.tags is None or len(row.tokens) != len(row.tags):
            raise ValueError(f"{where}: doc_id {row.doc_id!r}: tokens and tags must be lists of equal length")
        tags = [str(t) for t in row.tags]
        try:
            bad = alignment.iob2_violations(tags)
        except ValueError as err:
            raise ValueError(f"{where}: doc_id {row.doc_id!r}: {err}") from None
        if len(tags) == 0:
            dropped["empty_sentence"] += 1
            continue
        if bad:
            invalid_tags += len(bad)
            if policy == "error":
                raise ValueError(f"{where}: doc_id {row.doc_id!r}: invalid IOB2 at word(s) {bad}: {tags}")
            if policy == "drop":
                dropped["invalid_iob2"] += 1
                continue
            tags = alignment.repair_iob2(tags)
            repaired += 1
        kept.append({"doc_id": row.doc_id, "split": row.split, "words": [str(w) for w in row.tokens], "tags": tags})
    report = {
        "sentences_in": len(rows),
        "sentences_kept": len(kept),
        "dropped": dict(sorted(dropped.items())),
        "invalid_iob2_tags": invalid_tags,
        "invalid_iob2_sentences_repaired": repaired,
        "policy": policy,
    }
    return pd.DataFrame(kept, columns=["doc_id", "split", "words", "tags"]), report


def build_ner(cfg: TokenizeParams, tok, rows: pd.DataFrame, out: Path) -> dict:
    """Tokenize words, window long sentences, align both label schemes, save each split; returns metrics."""
    names = alignment.label_names(tag for tags in rows["tags"] for tag in tags)
    write_labels(names, out)
    label2id = {name: i for i, name in enumerate(names)}
    metrics: dict = {"labels": len(names)}
    for split in TASK_SPLITS:
        part = rows[rows["split"] == split]
        columns, stats = ner_windows(cfg, tok, part, label2id)
        save_table(pa.table(columns, schema=NER_SCHEMA), out / split)
        id2label = dict(enumerate(names))
        stats["label_distribution_first"] = label_counts(columns["labels_first"], id2label)
        stats["label_distribution_all"] = label_counts(columns["labels_all"], id2label)
        stats["word_tag_distribution"] = dict(sorted(Counter(t for tags in part["tags"] for t in tags).items()))
        metrics[split] = stats
    # windows replace truncation: every gold word is kept (the report reads these two keys per task/tokenizer)
    metrics["truncated_docs"], metrics["truncation_rate"] = 0, 0.0
    metrics["windowed_docs"] = sum(metrics[split]["windowed_sentences"] for split in TASK_SPLITS)
    return metrics


NER_SCHEMA = pa.schema(
    [
        ("doc_id", pa.string()),
        ("window_index", pa.int32()),
        ("input_ids", pa.list_(pa.int32())),
        ("attention_mask", pa.list_(pa.int8())),
        ("word_ids", pa.list_(pa.int32())),
        ("labels_first", pa.list_(pa.int32())),
        ("labels_all", pa.list_(pa.int32())),
        ("words", pa.list_(pa.string())),
        ("word_tags", pa.list_(pa.string())),
    ]
)


def ner_windows(cfg: TokenizeParams, tok, part: pd.DataFrame, label2id: dict[str, int]) -> tuple[dict, dict]:
    """Column lists (one entry per window) for ``NER_SCHEMA`` and the split's alignment metrics."""
    columns: dict[str, list] = {name: [] for name in NER_SCHEMA.names}
    encodings, zero_subword = encode_words(tok, part["words"].tolist())
    n_full, n_windowed = [], 0
    for row, (ids, word_ids) in zip(part.itertuples(index=False), tqdm(encodings, desc="ner windows", leave=False)):
        counts = np.bincount(word_ids, minlength=len(row.words)).tolist()
        windows = alignment.plan_windows(counts, cfg.max_seq_len_tokens - 2, cfg.ner_window_overlap_tokens)
        n_full.append(len(ids) + 2)
        n_windowed += len(windows) > 1
        for index, (w_ids, w_words) in enumerate(
            alignment.window_encodings(ids, word_ids, windows, tok.cls_token_id, tok.sep_token_id)
        ):
            columns["doc_id"].append(row.doc_id)
            columns["window_index"].append(index)
            columns["input_ids"].append(w_ids)
            columns["attention_mask"].append([1] * len(w_ids))
            columns["word_ids"].append(w_words)
            columns["labels_first"].append(alignment.align_labels(w_words, row.tags, label2id, "first"))
            columns["labels_all"].append(alignment.align_labels(w_words, row.tags, label2id, "all"))
            columns["words"].append(row.words)
            columns["word_tags"].append(row.tags)
    n_full_arr = np.asarray(n_full, dtype=np.int64)
    stats = {
        "sentences": len(part),
        "windows": len(columns["doc_id"]),
        "windowed_sentences": n_windowed,
        "truncated_sentences": 0,  # by construction: long sentences are windowed, never cut
        "longer_than_max_seq_len": int(np.sum(n_full_arr > cfg.max_seq_len_tokens)),
        "zero_subword_words": zero_subword,
        "words": int(sum(len(w) for w in part["words"])),
        **length_stats(n_full_arr),
    }
    return columns, stats


def encode_words(tok, sentences: list[list[str]]) -> tuple[list[tuple[list[int], list[int]]], int]:
    """Special-free ``(ids, word_ids)`` per sentence, tokenized with ``is_split_into_words=True``.

    A word that yields no subword (a lone U+200B, a control character) is replaced by the tokenizer's
    ``unk_token`` and the sentence re-encoded, so every word keeps a position, a label and a prediction.
    Returns the encodings and the number of replaced words. Raises ``ValueError`` if a word is still missing.
    """
    if not sentences:
        return [], 0
    batch = tok(sentences, is_split_into_words=True, add_special_tokens=False)
    out, replaced = [], 0
    for i, words in enumerate(sentences):
        ids, word_ids = batch["input_ids"][i], batch.word_ids(i)
        missing = alignment.missing_words(word_ids, len(words))
        if missing:
            replaced += len(missing)
            fixed = [tok.unk_token if w in missing else word for w, word in enumerate(words)]
            enc = tok(fixed, is_split_into_words=True, add_special_tokens=False)
            ids, word_ids = enc["input_ids"], enc.word_ids()
            if alignment.missing_words(word_ids, len(words)):
                raise ValueError(f"words {missing} of {words!r} still have no subword after [UNK] replacement")
        out.append((list(ids), list(word_ids)))
    return out, replaced


def label_counts(label_rows: list[list[int]], id2label: dict[int, str]) -> dict[str, int]:
    """Counts of each label name over non-ignored subword positions."""
    counts = Counter(id2label[x] for labels in label_rows for x in labels if x != alignment.IGNORE)
    return dict(sorted(counts.items()))


# ---------------------------------------------------------------- shared helpers


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
