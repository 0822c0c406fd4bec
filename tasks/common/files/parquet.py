"""The per-source Parquet files that stages hand on (``<data>/<stage>/<source>.parquet``), read with the
column checks every reader needs, so a missing stage or column is a one-line error naming the file."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from tasks.common.files.ioerrors import reading

#: Columns every row of the leakage stage's cleaned corpora has (the tokenizer and tokenize contract).
CLEAN_COLUMNS = ("doc_id", "role", "text", "is_duplicate", "split")


def read_source_frames(folder: Path, required: tuple[str, ...], producer: str) -> dict[str, pd.DataFrame]:
    """``{source: frame}`` for every ``<folder>/<source>.parquet``, sorted by file name.

    Raises ``FileNotFoundError`` naming ``producer`` (the stage that writes the folder) when there is no file,
    and ``ValueError`` naming the file when a ``required`` column is missing or the file cannot be read
    (``ioerrors.DamagedFile``).
    """
    files = sorted(Path(folder).glob("*.parquet"))
    if not files:
        raise FileNotFoundError(f"{folder}: no <source>.parquet files (run the {producer} stage first)")
    frames = {}
    for file in files:
        with reading(file):
            frame = pd.read_parquet(file)
        missing = [c for c in required if c not in frame.columns]
        if missing:
            raise ValueError(f"{file}: missing column(s) {missing}")
        frames[file.stem] = frame
    return frames


#: The pretraining split a task source's split lends its text to: a corpus that is only a task set can still
#: train the vocab and the MLM on its own train text (task-adaptive pretraining, Gururangan et al. 2020), with
#: its dev text as held-out MLM text; its test split is never read.
TASK_TO_PRETRAIN_SPLIT = {"train": "train", "dev": "heldout"}


def read_pretraining_rows(data: Path, sources: list[str]) -> pd.DataFrame:
    """The clean rows of ``sources`` that are pretraining text, with ``split`` in ``train``/``heldout``, sorted
    by ``doc_id``: every role=pretrain row, and the train/dev rows of a role=task source (``TASK_TO_PRETRAIN_SPLIT``).
    Raises as ``read_clean_source``."""
    frames = []
    for source in sorted(sources):
        rows = read_clean_source(data, source)
        task = rows["role"] == "task"
        rows.loc[task, "split"] = rows.loc[task, "split"].map(TASK_TO_PRETRAIN_SPLIT)
        frames.append(rows[rows["split"].notna()])
    return pd.concat(frames, ignore_index=True).sort_values("doc_id", kind="stable").reset_index(drop=True)


def read_clean_source(data: Path, source: str) -> pd.DataFrame:
    """Rows of ``<data>/leakage/<source>.parquet`` with ``is_duplicate == false`` (index reset).

    Raises ``FileNotFoundError`` naming the file, and ``ValueError`` naming missing contract columns or a file that
    cannot be read (``ioerrors.DamagedFile``).
    """
    path = Path(data) / "leakage" / f"{source}.parquet"
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file (source {source!r} named in params.yaml)")
    with reading(path):
        frame = pd.read_parquet(path)
    missing = [col for col in CLEAN_COLUMNS if col not in frame.columns]
    if missing:
        raise ValueError(f"{path}: missing contract columns {missing}")
    return frame[~frame["is_duplicate"].astype(bool)].reset_index(drop=True)
