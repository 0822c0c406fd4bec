"""Packed MLM blocks of ``tokenize``: ``data/tokenize/pretrain/<tok>/{train,heldout}`` (see the package docstring)."""

from __future__ import annotations

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
from tasks.tokenize.shards import ShardWriter
from tasks.tokenize.tables import length_stats


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

    def encode(texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        if cache is not None:
            return cache.encode(texts)
        return tokenize_docs(texts, encoder, cfg.map_batch_size_docs, cfg.num_proc)

    for split in PRETRAIN_SPLITS:
        part = rows.loc[rows["split"] == split, ["text", "source"]]
        metrics[split] = pack_split(part, cfg, tok, encode, out / split)
        log.info(
            f"tokenize: {out.name} pretrain/{split}: {metrics[split]['blocks']} blocks, "
            f"{metrics[split]['dropped_tail_tokens']} tail tokens dropped"
        )
    return metrics


def pack_split(part: pd.DataFrame, cfg: TokenizeParams, tok, encode, path: Path) -> dict:
    """Encode ``part``'s texts (columns ``text``, ``source``) with ``encode`` in chunks of ``map_batch_size_docs *
    num_proc`` documents, pack them as they come and write the blocks to ``path`` in shards of
    ``cfg.shard_blocks`` (``shards.ShardWriter``): at most a chunk's ids and a shard's blocks are held, besides
    the tokens per document (for the length statistics). Returns the split's metrics. Raises ``ValueError``
    when the split is shorter than one block (an empty dataset would fail much later)."""
    packer = Packer(cfg.max_seq_len_tokens, tok.cls_token_id, tok.sep_token_id)
    writer = ShardWriter(path, cfg.shard_blocks, np.asarray(tok.all_special_ids))
    chunk = cfg.map_batch_size_docs * cfg.num_proc
    all_lengths = []
    for start in range(0, len(part), chunk):
        piece = part.iloc[start : start + chunk]
        ids, lengths = encode(piece["text"].tolist())
        writer.add(*packer.add(ids, lengths, piece["source"].to_numpy()))
        all_lengths.append(lengths.astype(np.int64))
    writer.close()
    if writer.blocks == 0:
        raise ValueError(
            f"tokenize: pretrain split {path.name!r} has {packer.tokens} tokens, fewer than one block of "
            f"{packer.body} (+[CLS]); add pretraining text or lower tokenize.max_seq_len_tokens"
        )
    lengths = np.concatenate([np.zeros(0, np.int64), *all_lengths])
    dropped = int(packer.rest.size)
    return {
        "docs": len(part),
        "empty_docs": int(np.sum(lengths == 0)),
        "tokens": packer.tokens,
        "blocks": writer.blocks,
        "dropped_tail_tokens": dropped,
        "dropped_tail_fraction": dropped / packer.tokens,
        "blocks_by_source": dict(sorted(writer.by_source.items())),
        **length_stats(lengths),
    }


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


class Packer:
    """Packs a token stream that arrives in pieces: ``doc_0 [SEP] doc_1 [SEP] ...`` cut every ``max_seq_len - 1``
    tokens, [CLS] before each block. The tokens past the last full block wait in ``rest`` (and their sources
    in ``rest_sources``) for the next piece; after the last piece ``rest`` is the dropped tail. The blocks
    equal those of cutting the whole stream at once. ``tokens``: the stream's length so far."""

    def __init__(self, max_seq_len: int, cls_id: int, sep_id: int) -> None:
        self.body, self.cls_id, self.sep_id = max_seq_len - 1, cls_id, sep_id
        self.rest = np.zeros(0, dtype=np.int64)
        self.rest_sources = np.zeros(0, dtype=object)
        self.tokens = 0

    def add(self, ids: np.ndarray, lengths: np.ndarray, sources: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The blocks completed by the next documents: ``ids`` (their tokens concatenated), ``lengths`` (tokens
        per document) and ``sources`` (per document). Returns ``(blocks, block_sources)`` of shapes ``(n,
        max_seq_len)`` (int64) and ``(n,)``: the source of a block is that of its first body token (after
        [CLS]); each document owns its tokens and the [SEP] after them, so a block straddling two documents is
        named after the first, and only one block per source boundary is mixed."""
        new = join_with_sep(np.asarray(ids, dtype=np.int64), lengths, self.sep_id)
        self.tokens += int(new.size)
        stream = np.concatenate([self.rest, new])
        token_sources = np.concatenate([self.rest_sources, np.repeat(np.asarray(sources, dtype=object), lengths + 1)])
        blocks = cut_blocks(stream, self.body + 1, self.cls_id)
        cut = blocks.shape[0] * self.body
        self.rest, self.rest_sources = stream[cut:], token_sources[cut:]
        return blocks, token_sources[: cut : self.body].astype(str)


def cut_blocks(stream: np.ndarray, max_seq_len: int, cls_id: int) -> np.ndarray:
    """The full blocks of ``stream``: cut every ``max_seq_len - 1`` tokens, [CLS] prepended; shape ``(stream.size
    // (max_seq_len - 1), max_seq_len)``, int64 (the tail shorter than a block is left out)."""
    body = max_seq_len - 1
    n_blocks = stream.size // body
    blocks = np.empty((n_blocks, max_seq_len), dtype=np.int64)
    blocks[:, 0] = cls_id
    blocks[:, 1:] = stream[: n_blocks * body].reshape(n_blocks, body)
    return blocks
