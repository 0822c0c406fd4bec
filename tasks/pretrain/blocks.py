"""The packed blocks pretraining reads (``data/tokenize/pretrain/<tok>/<split>``), as tensors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from datasets import load_from_disk

from tasks.common.files.ioerrors import reading


def blocks_dir(data: Path, tokenization: str, split: str) -> Path:
    """``<data>/tokenize/pretrain/<tokenization>/<split>``: the blocks the tokenize stage wrote."""
    return Path(data) / "tokenize" / "pretrain" / tokenization / split


def load_blocks(folder: Path, max_blocks: int | None = None) -> dict[str, Any]:
    """Packed blocks as tensors ``input_ids``, ``attention_mask``, ``maskable`` (not special, not pad), each
    ``(n_blocks, seq_len)``, and ``source_id`` ``(n_blocks,)`` indexing ``source_names`` (sorted).

    ``max_blocks`` keeps at most that many, taking the sources in turn (see ``stratified_rows``), so a small
    held-out set still covers every pretraining source. Raises ``FileNotFoundError``/``ValueError`` naming
    ``folder`` if it is missing, empty, ragged or has no ``source`` column.
    """
    if not folder.exists():
        raise FileNotFoundError(f"{folder}: no tokenized blocks (run the tokenize stage)")
    with reading(folder):  # a damaged Arrow file: one line naming the folder and the stage that writes it
        data = load_from_disk(str(folder))
    if "source" not in data.column_names:
        raise ValueError(f"{folder}: no 'source' column (written by the tokenize stage; rerun it)")
    names, source_id = np.unique(np.asarray(data["source"], dtype=str), return_inverse=True)
    if max_blocks is not None:
        keep = stratified_rows(source_id, max_blocks)
        data, source_id = data.select(keep), source_id[keep]
    if len(data) == 0:
        raise ValueError(f"{folder}: no blocks")
    data = data.with_format("torch", columns=["input_ids", "attention_mask", "special_tokens_mask"])
    try:
        input_ids = data["input_ids"][:].long()
        attention_mask = data["attention_mask"][:].long()
        maskable = (attention_mask == 1) & (data["special_tokens_mask"][:] == 0)
    except (RuntimeError, ValueError) as err:  # rows of different lengths cannot stack
        raise ValueError(f"{folder}: rows must all have the same length (packed blocks): {err}") from err
    return {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "maskable": maskable,
        "source_id": torch.from_numpy(source_id),
        "source_names": names.tolist(),
    }


def stratified_rows(source_id: np.ndarray, max_blocks: int) -> np.ndarray:
    """Row indices (ascending) of at most ``max_blocks`` rows: the first row of each source, then the second
    of each, and so on (round robin in row order), so every source is in, and small ones whole."""
    rows = np.arange(len(source_id))
    order = np.argsort(source_id, kind="stable")
    rank = np.empty_like(rows)
    starts = np.searchsorted(source_id[order], source_id[order])
    rank[order] = rows - starts
    return np.sort(np.lexsort((rows, rank))[:max_blocks])
