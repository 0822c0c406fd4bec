"""NER datasets of ``tokenize``: ``data/tokenize/ner/<tok>/{train,dev,test}``, one row per window."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
from tqdm import tqdm

from clozeline import alignment
from tasks.common.files.parquet import read_clean_source
from tasks.config import Paths
from tasks.config.corpus.split import TASK_SPLITS
from tasks.config.corpus.tokenize import TokenizeParams
from tasks.tokenize.tables import length_stats, save_table, write_labels


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


def build_ner(cfg: TokenizeParams, tok, rows: pd.DataFrame, overlap: set[str], out: Path, cache=None) -> dict:
    """Tokenize words, window long sentences, align both label schemes, save each split; returns metrics.

    ``overlap`` holds the eval sentence ids that share text with the train split (``train_overlap`` column);
    ``cache``: see ``encode_words``.
    """
    names = alignment.label_names(tag for tags in rows["tags"] for tag in tags)
    write_labels(names, out)
    label2id = {name: i for i, name in enumerate(names)}
    metrics: dict = {"labels": len(names)}
    for split in TASK_SPLITS:
        part = rows[rows["split"] == split]
        columns, stats = ner_windows(cfg, tok, part, label2id, cache)
        columns["train_overlap"] = [d in overlap for d in columns["doc_id"]]
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
        ("train_overlap", pa.bool_()),
    ]
)


def ner_windows(
    cfg: TokenizeParams, tok, part: pd.DataFrame, label2id: dict[str, int], cache=None
) -> tuple[dict, dict]:
    """Column lists (one entry per window) for ``NER_SCHEMA`` and the split's alignment metrics (``cache``:
    see ``encode_words``)."""
    columns: dict[str, list] = {name: [] for name in NER_SCHEMA.names if name != "train_overlap"}
    encodings, zero_subword = encode_words(tok, part["words"].tolist(), part["doc_id"].tolist(), cache)
    n_full, n_windowed = [], 0
    capacity, cut_words, cut_subwords = cfg.ner_max_seq_len_tokens - 2, [], 0
    for row, (ids, word_ids) in zip(part.itertuples(index=False), tqdm(encodings, desc="ner windows", leave=False)):
        n_full.append(len(ids) + 2)
        n_subwords = len(ids)
        ids, word_ids, cut = alignment.cap_word_subwords(ids, word_ids, capacity)
        cut_words += [f"{row.doc_id}: {row.words[w][:40]!r}" for w in cut]
        cut_subwords += n_subwords - len(ids)
        counts = np.bincount(word_ids, minlength=len(row.words)).tolist()
        windows = alignment.plan_windows(counts, capacity, cfg.ner_window_overlap_tokens)
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
        "longer_than_max_seq_len": int(np.sum(n_full_arr > cfg.ner_max_seq_len_tokens)),
        "zero_subword_words": zero_subword,
        # a word longer than a window alone keeps its first subwords (its label and prediction live there)
        "words_cut_to_window": len(cut_words),
        "subwords_cut": cut_subwords,
        "words_cut_examples": cut_words[:5],
        "words": int(sum(len(w) for w in part["words"])),
        **length_stats(n_full_arr),
    }
    return columns, stats


def encode_words(
    tok, sentences: list[list[str]], doc_ids: list[str], cache=None
) -> tuple[list[tuple[list[int], list[int]]], int]:
    """Special-free ``(ids, word_ids)`` per sentence, tokenized with ``is_split_into_words=True``, and the number
    of words replaced by ``unk_token`` (``encode_sentences``). ``cache`` (a ``tasks.tokenize.task_cache.TaskCache``
    for ``tok``) encodes only the sentences it holds no encoding for."""
    inputs = [["words", list(words)] for words in sentences]
    rows = (
        encode_sentences(tok, sentences, doc_ids)
        if cache is None
        else cache.encodings(
            inputs, lambda todo: encode_sentences(tok, [sentences[p] for p in todo], [doc_ids[p] for p in todo])
        )
    )
    return [(ids, word_ids) for ids, word_ids, _ in rows], sum(replaced for *_, replaced in rows)


def encode_sentences(tok, sentences: list[list[str]], doc_ids: list[str]) -> list[tuple[list[int], list[int], int]]:
    """``(ids, word_ids, replaced)`` per sentence (special-free).

    A word that yields no subword (a lone U+200B, a control character) is replaced by the tokenizer's
    ``unk_token`` and the sentence re-encoded, so every word keeps a position, a label and a prediction;
    ``replaced`` counts those words. Raises ``ValueError`` naming the doc_id and the word if a word is still
    missing.
    """
    if not sentences:
        return []
    batch = tok(sentences, is_split_into_words=True, add_special_tokens=False)
    out = []
    for i, words in enumerate(sentences):
        ids, word_ids = batch["input_ids"][i], batch.word_ids(i)
        missing = alignment.missing_words(word_ids, len(words))
        if missing:
            fixed = [tok.unk_token if w in missing else word for w, word in enumerate(words)]
            enc = tok(fixed, is_split_into_words=True, add_special_tokens=False)
            ids, word_ids = enc["input_ids"], enc.word_ids()
            still = alignment.missing_words(word_ids, len(words))
            if still:
                raise ValueError(
                    f"doc_id {doc_ids[i]!r}: word {words[still[0]]!r} (word {still[0]}) still has no "
                    "subword after [UNK] replacement"
                )
        out.append((list(ids), list(word_ids), len(missing)))
    return out


def label_counts(label_rows: list[list[int]], id2label: dict[int, str]) -> dict[str, int]:
    """Counts of each label name over non-ignored subword positions."""
    counts = Counter(id2label[x] for labels in label_rows for x in labels if x != alignment.IGNORE)
    return dict(sorted(counts.items()))
