"""Reading a previous stage's per-source Parquet files, with the column checks every stage needs."""

from __future__ import annotations

from pathlib import Path

import pandas as pd


def read_source_frames(folder: Path, required: tuple[str, ...], producer: str) -> dict[str, pd.DataFrame]:
    """``{source: frame}`` for every ``<folder>/<source>.parquet``, sorted by file name.

    Raises ``FileNotFoundError`` naming ``producer`` (the stage that writes the folder) when there is no file,
    and ``ValueError`` naming the file when a ``required`` column is missing.
    """
    files = sorted(Path(folder).glob("*.parquet"))
    if not files:
        raise FileNotFoundError(f"{folder}: no <source>.parquet files (run the {producer} stage first)")
    frames = {}
    for file in files:
        frame = pd.read_parquet(file)
        missing = [c for c in required if c not in frame.columns]
        if missing:
            raise ValueError(f"{file}: missing column(s) {missing}")
        frames[file.stem] = frame
    return frames
