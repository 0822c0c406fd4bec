"""Packed MLM blocks of ``tokenize``: ``data/tokenize/pretrain/<tok>/{train,heldout}`` (see the package docstring)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
from datasets import Dataset

from tasks.common.parquet import read_pretraining_rows
from tasks.config import Paths
from tasks.config.split import PRETRAIN_SPLITS
from tasks.config.tokenize import TokenizeParams
from tasks.tokenize.tables import length_stats, save_table


def read_pretrain_rows(cfg: TokenizeParams, paths: Paths) -> pd.DataFrame:
    """The clean pretraining rows of ``cfg.pretrain_sources`` (role=pretrain rows, and the train/dev split of a
    task source as train/heldout: ``parquet.read_pretraining_rows``), sorted by ``doc_id``."""
    return read_pretraining_rows(paths.data, cfg.pretrain_sources)


def pack_pretrain(rows: pd.DataFrame, cfg: TokenizeParams, tok, out: Path, log) -> dict:
    """Tokenize ``rows`` with ``tok`` and pack each split into ``out/<split>``; returns per-split metrics.

    Both tokenizers get their blocks: ``clozeline`` for pretraining from scratch, ``reference`` for continued
    pretraining of the MiniLM (``pretrain.init_from``)."""
    metrics = {}
    for split in PRETRAIN_SPLITS:
        part = rows.loc[rows["split"] == split, ["doc_id", "text", "source"]]
        docs = Dataset.from_pandas(part[["doc_id", "text"]], preserve_index=False)
        ids, lengths = tokenize_docs(docs, tok, cfg.map_batch_size_docs, cfg.num_proc)
        stream = join_with_sep(ids, lengths, tok.sep_token_id)
        blocks, dropped = pack_blocks(stream, cfg.max_seq_len_tokens, tok.cls_token_id, split)
        sources = block_sources(part["source"].to_numpy(), lengths, blocks.shape)
        save_blocks(blocks, np.asarray(tok.all_special_ids), out / split, sources)
        metrics[split] = {
            "docs": len(docs),
            "empty_docs": int(np.sum(lengths == 0)),
            "tokens": int(stream.size),
            "blocks": int(blocks.shape[0]),
            "dropped_tail_tokens": dropped,
            "dropped_tail_fraction": dropped / stream.size,
            "blocks_by_source": dict(sorted(Counter(sources.tolist()).items())),
            **length_stats(lengths),
        }
        log.info(f"tokenize: {out.name} pretrain/{split}: {blocks.shape[0]} blocks, {dropped} tail tokens dropped")
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


def block_sources(doc_sources: np.ndarray, lengths: np.ndarray, blocks_shape: tuple[int, int]) -> np.ndarray:
    """The source of each packed block: that of its first body token (after [CLS]); shape ``(n_blocks,)``.

    ``doc_sources`` and ``lengths`` are per document, in stream order; each document owns its tokens and the
    [SEP] after them. A block that straddles two documents is named after the first, so only one block per
    source boundary is mixed.
    """
    n_blocks, seq_len = blocks_shape
    token_source = np.repeat(np.arange(len(doc_sources)), lengths + 1)
    starts = np.arange(n_blocks) * (seq_len - 1)
    return np.asarray(doc_sources, dtype=object)[token_source[starts]].astype(str)


def save_blocks(blocks: np.ndarray, special_ids: np.ndarray, path: Path, sources: np.ndarray) -> None:
    """Save blocks with ``input_ids``, ``attention_mask`` (all 1), ``special_tokens_mask`` and ``source`` (the
    ingest source name of the block, see ``block_sources``) columns."""
    n_blocks, seq_len = blocks.shape
    offsets = pa.array(np.arange(0, (n_blocks + 1) * seq_len, seq_len, dtype=np.int32))

    def column(values: np.ndarray, dtype: pa.DataType) -> pa.ListArray:
        return pa.ListArray.from_arrays(offsets, pa.array(values.reshape(-1), type=dtype))

    table = pa.table(
        {
            "input_ids": column(blocks, pa.int32()),
            "attention_mask": column(np.ones_like(blocks), pa.int8()),
            "special_tokens_mask": column(np.isin(blocks, special_ids).astype(np.int8), pa.int8()),
            "source": pa.array(sources, type=pa.string()),
        }
    )
    save_table(table, path)
