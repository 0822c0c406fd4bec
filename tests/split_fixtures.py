"""The split stage's params as the repo ships them, with changes, and dedup-shaped inputs it is run on."""

from __future__ import annotations

import json

import pandas as pd

from tasks import split
from tasks.config import Paths, read_yaml
from tasks.config.corpus.split import SplitParams
from tasks.config.tasks import TaskSpec
from tasks.tracking import NullLog


def params(**changes) -> SplitParams:
    """The repo's ``split:`` params with ``changes`` applied (so tests exercise the shipped defaults). No task is
    copied in, so every source keeps ``task_fractions`` whatever ``task_sizing`` says (``study_params``: tasks)."""
    return SplitParams(**{**read_yaml("params.yaml")["split"], **changes})


def study_params(caps: dict[str, int | None], kinds: dict[str, str] | None = None, **changes) -> SplitParams:
    """``params`` under ``task_sizing: study`` with one task per source of ``caps`` (``{source: max_train_docs}``;
    the task is named after its source, of kind ``kinds[source]``, default classification)."""
    kinds = kinds or {}
    metric = {"classification": "macro_f1", "token_classification": "entity_f1"}
    tasks = {
        source: TaskSpec(
            kind=kinds.get(source, "classification"),
            source=source,
            metric=metric[kinds.get(source, "classification")],
            recipe="r",
        )
        for source in caps
    }
    return params(**{"task_sizing": "study", "tasks": tasks, "max_train_docs": dict(caps), **changes})


def rows_of(source, role, groups, labels=None, clusters=None, metas=None, tags=None) -> pd.DataFrame:
    """A dedup-contract frame: one row per entry of ``groups``; cluster = own doc id unless given."""
    n = len(groups)
    ids = [f"{source}-{i:04d}" for i in range(n)]
    return pd.DataFrame(
        {
            "doc_id": ids,
            "source": source,
            "role": role,
            "text": [f"text {i}" for i in range(n)],
            "label": labels if labels is not None else [None] * n,
            "group": [None if g is None else str(g) for g in groups],
            "tokens": [None] * n,
            "tags": tags if tags is not None else [None] * n,
            "meta": [json.dumps(m) for m in (metas or [{}] * n)],
            "cluster_id": clusters if clusters is not None else ids,
            "is_duplicate": [False] * n,
        }
    )


def run_split(tmp_path, frames, cfg=None):
    """Write ``frames`` as ``data/dedup/<source>.parquet`` under ``tmp_path`` and run the stage; returns its metrics,
    every output row (sources in file-name order) and the manifest's path."""
    paths = Paths(data=tmp_path / "data", models=tmp_path / "m", metrics=tmp_path / "x", reports=tmp_path / "r")
    folder = paths.stage_data("dedup")
    folder.mkdir(parents=True, exist_ok=True)
    for frame in frames:
        frame.to_parquet(folder / f"{frame['source'].iloc[0]}.parquet", index=False)
    metrics = split.run(cfg or params(stratify_by_label=False), paths, NullLog())
    out = pd.concat([pd.read_parquet(p) for p in sorted(paths.stage_data("split").glob("*.parquet"))])
    return metrics, out, paths.stage_data("split") / "manifest.tsv"
