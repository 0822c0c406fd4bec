"""Packed MLM blocks of ``tokenize``: ``data/tokenize/pretrain/<tok>/{train,heldout}`` (see the package docstring)."""

from __future__ import annotations

from collections import Counter
from itertools import chain
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
from datasets import Dataset
from datasets.fingerprint import generate_random_fingerprint
from tokenizers import Tokenizer

from tasks.common.files.parquet import read_pretraining_rows
from tasks.config import Paths
from tasks.config.corpus.split import PRETRAIN_SPLITS
from tasks.config.corpus.tokenize import TokenizeParams
from tasks.tokenize.tables import length_stats, save_table


def read_pretrain_rows(cfg: TokenizeParams, paths: Paths) -> pd.DataFrame:
    """The clean pretraining rows of ``cfg.pretrain_sources`` (role=pretrain rows, and the train/dev split of a
    task source as train/heldout: ``parquet.read_pretraining_rows``), sorted by ``doc_id``."""
    return read_pretraining_rows(paths.data, cfg.pretrain_sources)


def pack_pretrain(rows: pd.DataFrame, cfg: TokenizeParams, tok, out: Path, log, cache=None) -> dict:
    """Tokenize ``rows`` with ``tok`` and pack each split into ``out/<split>``; returns per-split metrics.

    Both tokenizers get their blocks: ``clozeline`` for pretraining from scratch, ``reference`` for continued
    pretraining of the MiniLM (``pretrain.init_from``). ``cache`` (a ``tasks.tokenize.cache.TokenCache`` for
    ``tok``) encodes only the texts it holds no ids for; None encodes every text (test fixtures)."""
    metrics = {}
    encoder = plain_encoder(tok)
    for split in PRETRAIN_SPLITS:
        part = rows.loc[rows["split"] == split, ["doc_id", "text", "source"]]
        texts = part["text"].tolist()
        ids, lengths = (
            cache.encode(texts)
            if cache is not None
            else tokenize_docs(texts, encoder, cfg.map_batch_size_docs, cfg.num_proc)
        )
        stream = join_with_sep(ids, lengths, tok.sep_token_id)
        blocks, dropped = pack_blocks(stream, cfg.max_seq_len_tokens, tok.cls_token_id, split)
        sources = block_sources(part["source"].to_numpy(), lengths, blocks.shape)
        save_blocks(blocks, np.asarray(tok.all_special_ids), out / split, sources)
        metrics[split] = {
            "docs": len(part),
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


def plain_encoder(tok) -> Tokenizer:
    """A copy of ``tok``'s Rust tokenizer that encodes as ``tok(texts, add_special_tokens=False)`` does.

    The HF wrapper resets truncation and padding on every call; the bare tokenizer keeps those of its
    ``tokenizer.json`` (the packaged MiniLM truncates and pads to 128), so the copy drops both. A copy, so
    ``tok`` itself is left as it was.
    """
    encoder = Tokenizer.from_str(tok.backend_tokenizer.to_str())
    encoder.no_truncation()
    encoder.no_padding()
    encoder.encode_special_tokens = tok.split_special_tokens
    return encoder


def encode_texts(texts: list[str], encoder: Tokenizer) -> tuple[np.ndarray, np.ndarray]:
    """``(ids, lengths)`` of ``texts`` without special tokens: ids concatenated in text order, int32, shape
    ``(total_tokens,)``, and tokens per text, int32, shape ``(len(texts),)``."""
    # the tokenizer's batch call without character offsets, which packing never reads (the HF wrapper
    # computes them, and builds a Python dict per text)
    ids = [enc.ids for enc in encoder.encode_batch_fast(texts, add_special_tokens=False)]
    lengths = np.fromiter(map(len, ids), dtype=np.int32, count=len(ids))
    flat = np.fromiter(chain.from_iterable(ids), dtype=np.int32, count=int(lengths.sum()))
    return flat, lengths


def _encode_column(batch: dict, encoder: Tokenizer) -> pa.Table:
    # datasets.map worker: one input_ids list column, built from numpy (no per-row Python lists to convert)
    flat, lengths = encode_texts(batch["text"], encoder)
    offsets = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)]).astype(np.int32)
    return pa.table({"input_ids": pa.ListArray.from_arrays(offsets, flat)})


def tokenize_docs(
    texts: list[str], encoder: Tokenizer, batch_size: int, num_proc: int
) -> tuple[np.ndarray, np.ndarray]:
    """Subword ids of every document, ``batch_size`` documents per tokenizer call, without special tokens.

    ``num_proc`` 1 encodes in this process; more spreads the batches over ``datasets.map`` workers.
    Returns ``(ids, lengths)``: all ids concatenated in document order (int64, shape ``(total_tokens,)``) and
    the tokens per document (int64, shape ``(docs,)``).
    """
    if num_proc > 1 and texts:
        return _tokenize_in_workers(texts, encoder, batch_size, num_proc)
    parts = [encode_texts(texts[start : start + batch_size], encoder) for start in range(0, len(texts), batch_size)]
    if not parts:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    ids, lengths = zip(*parts)
    return np.concatenate(ids).astype(np.int64), np.concatenate(lengths).astype(np.int64)


def _tokenize_in_workers(
    texts: list[str], encoder: Tokenizer, batch_size: int, num_proc: int
) -> tuple[np.ndarray, np.ndarray]:
    encoded = Dataset.from_dict({"text": texts}).map(
        _encode_column,
        fn_kwargs={"encoder": encoder},
        batched=True,
        batch_size=batch_size,
        num_proc=num_proc,
        remove_columns=["text"],
        # an in-memory dataset is never read from the cache, and hashing the tokenizer for a fingerprint
        # (pickling its 30,522-entry vocabulary) cost 0.8 s a call, a third of tokenizing 1,674 documents
        new_fingerprint=generate_random_fingerprint(),
        desc="tokenize pretrain",
    )
    column = encoded.data.column("input_ids").combine_chunks()
    lengths = np.diff(column.offsets.to_numpy())
    return column.flatten().to_numpy().astype(np.int64), lengths.astype(np.int64)


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
