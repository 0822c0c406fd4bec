"""The lineage fields of ``pretraining.json`` (``tasks.common.pretraining_texts``): which text files this run
trained on, and the ancestry of the model it started from, so a later run that continues this model
(``pretrain.init_from``) can audit its evaluation sets against everything the model has seen (the leakage stage's
``lineage`` section).
"""

from __future__ import annotations

from pathlib import Path

from tasks.common import pretraining_texts

#: The split of a pretraining source whose rows the MLM trained on: role=pretrain rows of ``train``, and a task
#: source's ``train`` rows (``parquet.TASK_TO_PRETRAIN_SPLIT``); heldout rows are only evaluated.
TRAINED_SPLIT = "train"


def data_files(data: Path, sources: list[str]) -> list[dict]:
    """``[{path, md5, split: "train"}]``, one per source in ``sources`` (the ``source`` column of the packed
    blocks: the sources tokenize read), for ``<data>/leakage/<source>.parquet``, the file whose train rows
    tokenize packed (``parquet.read_pretraining_rows``). Sorted by path. A file that is not there (blocks made
    without the leakage stage, as the pretrain benchmark does) gets ``md5: null``: a later audit of a model
    continued from this one cannot find that text, so its lineage is unknown, never silently clean.
    """
    out = []
    for source in sorted(set(sources)):
        path = Path(data) / "leakage" / f"{source}.parquet"
        md5 = pretraining_texts.file_md5(path) if path.is_file() else None
        out.append({"path": path.as_posix(), "md5": md5, "split": TRAINED_SPLIT})
    return out


def record_fields(data: Path, sources: list[str], init_from: str) -> dict:
    """``{"data": data_files(...), "lineage": pretraining_texts.inherited(init_from)}``: the lineage fields of the
    record of a model trained on ``sources`` starting from ``init_from``."""
    return {"data": data_files(data, sources), "lineage": pretraining_texts.inherited(init_from)}
