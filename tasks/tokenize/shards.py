"""Packed MLM blocks written shard by shard: a ``datasets.save_to_disk`` folder built as the blocks arrive.

The folder is what ``Dataset.save_to_disk(folder, num_shards=n)`` writes (``load_from_disk`` reads it, memory
mapping every shard): ``data-<i>-of-<n>.arrow`` (Arrow IPC streams, rows in block order, ``shard_blocks`` rows
each, the last one fewer), ``state.json`` and ``dataset_info.json``. So the writer holds at most
``shard_blocks`` blocks, never the split. The fingerprint in ``state.json`` is the md5 of the shards' bytes in
order: the same blocks and ``shard_blocks`` give byte-identical folders.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections import Counter
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pyarrow as pa
from datasets import DatasetInfo, Features
from datasets.arrow_writer import ArrowWriter

from tasks.common.files.ioerrors import writing

SCHEMA = pa.schema(
    {
        "input_ids": pa.list_(pa.int32()),
        "attention_mask": pa.list_(pa.int8()),
        "special_tokens_mask": pa.list_(pa.int8()),
        "source": pa.string(),
    }
)
FEATURES = Features.from_arrow_schema(SCHEMA)


class ShardWriter:
    """Collects blocks and writes a shard each time ``shard_blocks`` are held; ``close`` writes the last and the
    folder's ``state.json``/``dataset_info.json``. ``most_held``: the most blocks held at once (tests bound it
    by ``shard_blocks``); ``blocks`` and ``by_source``: what was written."""

    def __init__(self, folder: Path, shard_blocks: int, special_ids: np.ndarray) -> None:
        self.folder, self.shard_blocks, self.special_ids = Path(folder), shard_blocks, special_ids
        shutil.rmtree(self.folder, ignore_errors=True)
        self.folder.mkdir(parents=True)
        self.held: list[tuple[np.ndarray, np.ndarray]] = []
        self.n_held = self.most_held = self.blocks = 0
        self.by_source: Counter = Counter()
        self.shards: list[Path] = []
        self.md5 = hashlib.md5()

    def add(self, blocks: np.ndarray, sources: np.ndarray) -> None:
        """Queue ``blocks`` ``(n, seq_len)`` with their ``sources`` ``(n,)``, writing every full shard."""
        while len(blocks):
            take = self.shard_blocks - self.n_held
            self.held.append((blocks[:take], sources[:take]))
            self.n_held += len(blocks[:take])
            self.most_held = max(self.most_held, self.n_held)
            blocks, sources = blocks[take:], sources[take:]
            if self.n_held == self.shard_blocks:
                self._write_shard()

    def close(self) -> None:
        """Write the held blocks as the last shard, name the shards ``data-<i>-of-<n>.arrow``, and write the
        folder's ``state.json`` and ``dataset_info.json``."""
        if self.n_held:
            self._write_shard()
        names = [f"data-{i:05d}-of-{len(self.shards):05d}.arrow" for i in range(len(self.shards))]
        for shard, name in zip(self.shards, names):
            shard.rename(self.folder / name)
        state = {
            "_data_files": [{"filename": name} for name in names],
            "_fingerprint": self.md5.hexdigest(),
            "_format_columns": None,
            "_format_kwargs": {},
            "_format_type": None,
            "_output_all_columns": False,
            "_split": None,
        }
        info = asdict(DatasetInfo(features=FEATURES))
        with writing(self.folder):
            (self.folder / "state.json").write_text(json.dumps(state, indent=2, sort_keys=True), encoding="utf-8")
            text = json.dumps({key: info[key] for key in sorted(info)}, indent=2)
            (self.folder / "dataset_info.json").write_text(text, encoding="utf-8")

    def _write_shard(self) -> None:
        # int32, the column's type: half the bytes of the packer's int64 (a vocabulary's ids fit)
        blocks = np.concatenate([b for b, _ in self.held], dtype=np.int32, casting="same_kind")
        sources = np.concatenate([s for _, s in self.held])
        self.held, self.n_held = [], 0
        path = self.folder / f"shard-{len(self.shards):05d}.arrow"
        with writing(path):
            writer = ArrowWriter(features=FEATURES, path=str(path))
            writer.write_table(block_table(blocks, sources, self.special_ids))
            writer.finalize()
            writer.close()
        with open(path, "rb") as shard:  # hashed a MiB at a time, not read whole
            for chunk in iter(lambda: shard.read(1 << 20), b""):
                self.md5.update(chunk)
        self.shards.append(path)
        self.blocks += len(blocks)
        self.by_source.update(sources.tolist())


def block_table(blocks: np.ndarray, sources: np.ndarray, special_ids: np.ndarray) -> pa.Table:
    """``blocks`` ``(n, seq_len)`` as the columns ``input_ids``, ``attention_mask`` (all 1),
    ``special_tokens_mask`` (1 on the ids in ``special_ids``) and ``source`` (the ingest source of each block)."""
    n_blocks, seq_len = blocks.shape
    offsets = pa.array(np.arange(0, (n_blocks + 1) * seq_len, seq_len, dtype=np.int32))

    def column(values: np.ndarray, dtype: pa.DataType) -> pa.ListArray:
        return pa.ListArray.from_arrays(offsets, pa.array(values.reshape(-1), type=dtype))

    arrays = [  # each built in its column's type (no int64 copies to cast)
        column(blocks.astype(np.int32, copy=False), pa.int32()),
        column(np.ones(blocks.shape, dtype=np.int8), pa.int8()),
        column(np.isin(blocks, special_ids).view(np.int8), pa.int8()),
        pa.array(sources, type=pa.string()),
    ]
    return pa.Table.from_arrays(arrays, schema=SCHEMA)
