"""The split as the tasks see it: per task of params.yaml ``tasks``, the kept documents of its source per split,
its train pool and, for a token classification task, the gold entities per split (IOB2 ``B-`` tags: every entity
starts with one); per source that ships its own split, the shipped train documents the study sizing moved to
test. Written to ``metrics/split.json`` (``tasks``, ``shipped_train_to_test``) and to the log."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tasks.config.corpus.split import TASK_SPLITS, SplitParams
from tasks.split.assign import own_splits
from tasks.split.outputs import read_tags


def entity_counts(files: dict[str, Path]) -> np.ndarray:
    """Per row, every source's rows one after another (``working_rows``' positions): the number of IOB2 ``B-``
    tags in its ``tags`` list (0 for a row without tags, a source without a list-typed ``tags`` column); each
    file's ``tags`` column read alone (``outputs.read_tags``)."""
    parts = []
    for file in files.values():
        column = read_tags(file)
        if column is None:
            parts.append(np.zeros(pq.ParquetFile(file).metadata.num_rows, dtype=np.int64))
            continue
        tags = column.combine_chunks()
        begins = pc.fill_null(pc.starts_with(pc.list_flatten(tags), "B-"), False).to_numpy(zero_copy_only=False)
        parents = pc.list_parent_indices(tags).to_numpy()
        parts.append(np.bincount(parents[begins], minlength=len(tags)))
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def task_metrics(kept: pd.DataFrame, entities: np.ndarray, cfg: SplitParams) -> dict:
    """``{task: {source, max_train_docs, train_pool_docs, docs: {split: kept docs}, gold_entities}}`` (sorted by
    task; ``train_pool_docs`` null where the source keeps ``task_fractions``; ``gold_entities`` ``{split: n}`` for
    token classification, else null). ``kept``: the written rows (index: position in ``entities``)."""
    pools = cfg.train_pools()
    out = {}
    for name, spec in sorted(cfg.tasks.items()):
        part = kept[(kept["source"] == spec.source) & ~kept["is_duplicate"].astype(bool)]
        by_split = {s: part.index[(part["split"] == s).to_numpy()] for s in TASK_SPLITS}
        tagged = spec.kind == "token_classification"
        out[name] = {
            "source": spec.source,
            "max_train_docs": cfg.max_train_docs.get(name),
            "train_pool_docs": pools.get(spec.source),
            "docs": {s: len(index) for s, index in by_split.items()},
            "gold_entities": {s: int(entities[index].sum()) for s, index in by_split.items()} if tagged else None,
        }
    return out


def shipped_train_to_test(kept: pd.DataFrame, cfg: SplitParams) -> dict[str, dict[str, int]]:
    """``{source: {shipped_train, to_test}}``: for each pooled task source that ships its own split, its kept
    documents shipped as train and how many of them the study sizing put in test (sorted by source)."""
    pools = cfg.train_pools()
    task = kept[(kept["role"] == "task") & kept["source"].isin(list(pools)) & ~kept["is_duplicate"].astype(bool)]
    shipped = own_splits(task, cfg.own_split_meta_key, TASK_SPLITS)
    out = {}
    for source, part in task[shipped.notna()].groupby("source", sort=True):
        was_train = (shipped[part.index] == "train").to_numpy()
        out[str(source)] = {
            "shipped_train": int(was_train.sum()),
            "to_test": int((was_train & (part["split"] == "test").to_numpy()).sum()),
        }
    return out


def study_lines(tasks: dict, moved: dict[str, dict[str, int]], cfg: SplitParams) -> list[str]:
    """The log lines: per task its pool and kept docs per split (and gold entities), per own-split source the
    shipped train docs moved to test."""
    lines = [f"split: task_sizing {cfg.task_sizing} (train_pool_factor {cfg.train_pool_factor})"]
    for name, counts in tasks.items():
        entities = f", gold entities {counts['gold_entities']}" if counts["gold_entities"] is not None else ""
        lines.append(
            f"split: task {name} ({counts['source']}): train pool {counts['train_pool_docs']} for max_train_docs "
            f"{counts['max_train_docs']}; kept docs {counts['docs']}{entities}"
        )
    for source, count in moved.items():
        lines.append(
            f"split: {source} ships its own split: {count['to_test']} of its {count['shipped_train']} shipped "
            "train docs moved to test (what the train pool does not take)"
        )
    return lines
