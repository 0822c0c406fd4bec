"""The memory-mapped train blocks (``tasks.pretrain.blocks.open_blocks``) against the same blocks read whole
(``load_blocks``): the same rows, masks, hash and unigram counts, over several shards."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
import torch
from datasets import Dataset

from tasks.pretrain.blocks import BlockRows, blocks_sha256, load_blocks, open_blocks
from tasks.pretrain.feed import needs_attention_mask
from tasks.pretrain.mlm import unigram_log_probs
from tasks.tokenize.shards import ShardWriter

SPECIAL = np.array([0, 1, 2])


def write_blocks(folder, n_blocks=23, seq_len=6, shard_blocks=5):
    """Random blocks (ids 0-49, [CLS] = 1 first) in shards of ``shard_blocks``: 5 shards for 23 blocks."""
    rng = np.random.default_rng(0)
    blocks = rng.integers(0, 50, size=(n_blocks, seq_len))
    blocks[:, 0] = 1
    sources = np.array(["b" if i % 3 else "a" for i in range(n_blocks)])
    writer = ShardWriter(folder, shard_blocks, SPECIAL)
    writer.add(blocks, sources)
    writer.close()
    return blocks


def test_gathered_rows_equal_the_whole_tensors_across_shards(tmp_path):
    blocks = write_blocks(tmp_path / "train")
    whole, lazy = load_blocks(tmp_path / "train"), open_blocks(tmp_path / "train")
    assert isinstance(lazy["input_ids"], BlockRows) and lazy["input_ids"].shape == (23, 6) == whole["input_ids"].shape
    assert lazy["source_names"] == whole["source_names"] == ["a", "b"]
    rows = torch.tensor([22, 0, 4, 5, 17, 4])  # across shard edges, unsorted, repeated
    for key in ("input_ids", "attention_mask", "maskable"):
        got, expected = lazy[key][rows], whole[key][rows]
        assert got.dtype == expected.dtype and torch.equal(got, expected), key
        assert torch.equal(lazy[key][3:21], whole[key][3:21]), key
    assert torch.equal(lazy["input_ids"][rows], torch.from_numpy(blocks[rows.numpy()]))  # the written ids
    assert torch.equal(lazy["maskable"][rows], torch.from_numpy(~np.isin(blocks[rows.numpy()], SPECIAL)))
    assert needs_attention_mask(lazy) is needs_attention_mask(whole) is False


def test_hash_and_unigram_counts_equal_those_of_the_whole_tensors(tmp_path, monkeypatch):
    write_blocks(tmp_path / "train")
    whole, lazy = load_blocks(tmp_path / "train"), open_blocks(tmp_path / "train")
    monkeypatch.setattr("tasks.pretrain.blocks.CHUNK_ROWS", 4)  # several chunks, the last ragged
    monkeypatch.setattr("tasks.pretrain.mlm.COUNT_ROWS", 4)
    digest = hashlib.sha256(whole["input_ids"].numpy().tobytes()).hexdigest()  # the trainer's hash before
    assert blocks_sha256(lazy["input_ids"]) == blocks_sha256(whole["input_ids"]) == digest

    class Vocab:
        continuation = torch.zeros(50, dtype=torch.bool)
        special_ids = torch.tensor(SPECIAL)

    counts = torch.bincount(whole["input_ids"][whole["maskable"]], minlength=50).double() + 1.0  # by hand
    counts[SPECIAL] = 0.0
    expected = (counts / counts.sum()).log()
    assert torch.equal(unigram_log_probs(lazy["input_ids"], lazy["maskable"], Vocab()), expected)
    assert torch.equal(unigram_log_probs(whole["input_ids"], whole["maskable"], Vocab()), expected)


def test_a_missing_folder_or_a_source_less_one_is_a_one_line_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="run the tokenize stage"):
        open_blocks(tmp_path / "absent")
    Dataset.from_dict(
        {"input_ids": [[1, 2]], "attention_mask": [[1, 1]], "special_tokens_mask": [[1, 0]]}
    ).save_to_disk(str(tmp_path / "old"))
    with pytest.raises(ValueError, match="no 'source' column"):
        open_blocks(tmp_path / "old")
