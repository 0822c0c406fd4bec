"""Packed MLM blocks of ``tokenize``: ``data/tokenize/pretrain/<tok>/{train,heldout}`` (see the package docstring)."""

from __future__ import annotations

from collections.abc import Iterable
from itertools import chain
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
from datasets import Dataset
from datasets.fingerprint import generate_random_fingerprint
from tokenizers import Tokenizer

from tasks.config.corpus.split import PRETRAIN_SPLITS
from tasks.config.corpus.tokenize import TokenizeParams
from tasks.tokenize.pretrain_rows import Batch, FrameRows
from tasks.tokenize.shards import ShardWriter
from tasks.tokenize.tables import length_stats_of_counts


def pack_pretrain(rows, cfg: TokenizeParams, tok, out: Path, log, cache=None) -> dict:
    """Tokenize the pretraining rows with ``tok`` and pack each split into ``out/<split>``; returns per-split
    metrics. ``rows``: a ``pretrain_rows.PretrainRows`` (the stage: the leakage outputs streamed) or a frame with
    columns ``doc_id``, ``text``, ``source``, ``split`` (test fixtures; ``pretrain_rows.FrameRows``).

    Both tokenizers get their blocks: ``clozeline`` for pretraining from scratch, ``reference`` for continued
    pretraining of the MiniLM (``pretrain.init_from``). ``cache`` (a ``tasks.tokenize.cache.TokenCache`` for
    ``tok``) encodes only the texts it holds no ids for; None encodes every text (test fixtures)."""
    rows = FrameRows(rows) if isinstance(rows, pd.DataFrame) else rows
    metrics = {}
    encoder = plain_encoder(tok)
    chunk = cfg.map_batch_size_docs * cfg.num_proc
    for split in PRETRAIN_SPLITS:

        def encode(batch: Batch, split: str = split) -> tuple[np.ndarray, np.ndarray]:
            if cache is not None:
                return cache.encode(split, batch.doc_ids, batch.texts)
            return tokenize_docs(batch.texts, encoder, cfg.map_batch_size_docs, cfg.num_proc)

        metrics[split] = pack_split(rows.batches(split, chunk), cfg, tok, encode, out / split)
        log.info(
            f"tokenize: {out.name} pretrain/{split}: {metrics[split]['blocks']} blocks, "
            f"{metrics[split]['dropped_tail_tokens']} tail tokens dropped"
        )
    return metrics


def pack_split(batches: Iterable[Batch], cfg: TokenizeParams, tok, encode, path: Path) -> dict:
    """Encode each of ``batches`` (``pretrain_rows.Batch``: a split's documents in order) with ``encode``, pack
    them as they come and write the blocks to ``path`` in shards of ``cfg.shard_blocks``
    (``shards.ShardWriter``): at most a batch's ids and a shard's blocks are held, and the number of documents
    of each length in tokens (for the length statistics, ``tables.length_stats_of_counts``). Returns the split's
    metrics. Raises ``ValueError`` when the split is shorter than one block (an empty dataset would fail much
    later)."""
    packer = Packer(cfg.max_seq_len_tokens, tok.cls_token_id, tok.sep_token_id)
    writer = ShardWriter(path, cfg.shard_blocks, np.asarray(tok.all_special_ids))
    counts = np.zeros(0, np.int64)  # documents by their length in tokens
    for batch in batches:
        ids, lengths = encode(batch)
        writer.add(*packer.add(ids, lengths, np.asarray(batch.sources, dtype=object)))
        new = np.bincount(lengths.astype(np.int64), minlength=counts.size)
        counts = np.pad(counts, (0, new.size - counts.size)) + new
    writer.close()
    if writer.blocks == 0:
        raise ValueError(
            f"tokenize: pretrain split {path.name!r} has {packer.tokens} tokens, fewer than one block of "
            f"{packer.body} (+[CLS]); add pretraining text or lower tokenize.max_seq_len_tokens"
        )
    dropped = int(packer.rest.size)
    return {
        "docs": int(counts.sum()),
        "empty_docs": int(counts[0]) if counts.size else 0,
        "tokens": packer.tokens,
        "blocks": writer.blocks,
        "dropped_tail_tokens": dropped,
        "dropped_tail_fraction": dropped / packer.tokens,
        "blocks_by_source": dict(sorted(writer.by_source.items())),
        **length_stats_of_counts(counts),
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
