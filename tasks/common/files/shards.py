"""A stage's per-source Parquet output as one file or a folder of shards, and how readers list them.

A source ``name`` under an output folder is either ``<folder>/<name>.parquet`` or ``<folder>/<name>/`` holding
``*.parquet`` shards whose rows follow one another in file-name order (ingest writes one shard per input unit,
``part-<position>.parquet``, so a scheduled run rewrites only the shards of new or changed files). Readers
take both forms through ``source_files``.

A stage that writes such a folder records what it wrote in ``<folder>/manifest.json`` (``write_manifest``), and
its readers check the files there against it (``check_manifest``): a deleted shard or source file would otherwise
be read as a smaller corpus, without an error. A folder without a manifest (written by hand, or by an older
version) is not checked.
"""

from __future__ import annotations

import json
import os
import shutil
import zlib
from pathlib import Path

import pyarrow as pa

from tasks.common.files.ioerrors import reading, writing
from tasks.common.files.stamped import read_table

SUFFIX = ".parquet"
#: What a stage wrote to a folder of sources: ``{"files": {source: [paths relative to the folder]}}``.
MANIFEST = "manifest.json"


def write_manifest(folder: Path, files: dict[str, list[Path]]) -> None:
    """``<folder>/manifest.json``: the ``files`` written for each source (paths under ``folder``), sorted. Out of
    room: ``ioerrors.NoRoom`` naming it."""
    listed = {name: sorted(Path(p).relative_to(folder).as_posix() for p in paths) for name, paths in files.items()}
    text = json.dumps({"files": dict(sorted(listed.items()))}, indent=1, sort_keys=True) + "\n"
    with writing(Path(folder) / MANIFEST):  # out of room: one line naming it, nothing partial left
        (Path(folder) / MANIFEST).write_text(text, encoding="utf-8")


def check_manifest(folder: Path, stage: str) -> None:
    """Raise ``ValueError`` in one line naming the files ``<folder>/manifest.json`` lists that are not there (a
    deleted shard, or a source's file), and that rerunning ``stage`` writes them again. No manifest: no check. A
    manifest that cannot be read is ``ioerrors.DamagedFile``."""
    path = Path(folder) / MANIFEST
    if not path.is_file():
        return
    with reading(path):
        listed = json.loads(path.read_text(encoding="utf-8"))["files"]
    written = [Path(folder) / name for names in listed.values() for name in names]
    missing = [file for file in written if not file.is_file()]
    if missing:
        shown = ", ".join(str(p) for p in missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise ValueError(
            f"{shown}: missing ({len(missing)} of the files {stage} wrote, listed in {path}); rerun "
            f"`dvc repro --single-item {stage}` to write them again"
        )


def source_files(folder: Path) -> dict[str, list[Path]]:
    """``{source: [Parquet files in row order]}`` for every ``<folder>/<source>.parquet`` and every
    ``<folder>/<source>/`` of shards (an empty folder is a source with no file), sorted by source. Raises
    ``ValueError`` naming both paths when a source is written both ways."""
    found: dict[str, list[Path]] = {}
    written_as: dict[str, Path] = {}
    for path in sorted(Path(folder).iterdir()) if Path(folder).is_dir() else []:
        if path.name.startswith("."):
            continue  # a stage's temporary folder
        if path.is_dir():
            name, files = path.name, sorted(p for p in path.iterdir() if p.suffix == SUFFIX and p.is_file())
        elif path.suffix == SUFFIX:
            name, files = path.stem, [path]
        else:
            continue
        if name in found:
            raise ValueError(f"{path}: source {name!r} is also written as {written_as[name]}")
        found[name], written_as[name] = files, path
    return dict(sorted(found.items()))


def read_source(files: list[Path], schema: pa.Schema | None = None) -> pa.Table:
    """The rows of one source's ``files`` (``source_files``) in order, as one table of one chunk per file and row
    group (no copy). ``schema``: the table of a source with no file. Raises ``ValueError`` naming the first
    shard whose columns differ from the first one's."""
    tables = [read_table(path) for path in files]
    for path, table in zip(files[1:], tables[1:]):
        if not table.schema.equals(tables[0].schema, check_metadata=False):
            raise ValueError(f"{path}: columns {table.schema.names} differ from {files[0]}'s {tables[0].schema.names}")
    if not tables:
        return pa.Table.from_batches([], schema or pa.schema([]))  # empty_table() would import pandas
    meta = tables[0].schema.metadata
    return pa.concat_tables([table.replace_schema_metadata(meta) for table in tables]) if len(tables) > 1 else tables[0]


def read_named(folder: Path, name: str) -> pa.Table:
    """Source ``name`` of ``folder`` (``source_files``, ``read_source``). Raises ``KeyError`` when it has none."""
    return read_source(source_files(folder)[name])


def linked_or_copied(source: Path, target: Path) -> None:
    """``target`` as a hard link to ``source`` (no bytes written), or a copy where the file system has no links."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)


def file_crc32(path: Path, block_bytes: int = 1 << 22) -> int:
    """CRC-32 (``zlib.crc32``) of the file's bytes, read in ``block_bytes`` blocks: the check that a persisted file is
    the one a cache recorded (~40 ms for 140 MB in the page cache). Raises ``OSError``."""
    crc = 0
    with open(path, "rb") as handle:
        while block := handle.read(block_bytes):
            crc = zlib.crc32(block, crc)
    return crc
