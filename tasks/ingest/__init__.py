"""Stage ``ingest``: read every source in ``params.yaml: ingest.sources`` into the document row contract.

Writes ``data/ingest/<source>/part-<position>.parquet``, one shard per input unit in input order (columns
``doc_id, source, role, text, label, group, tokens, tags, meta``; see tasks/CONTRACTS.md; readers list them with
``tasks.common.files.shards``; the shards written listed in ``data/ingest/manifest.json``, which dedup checks) and
``data/ingest/dropped.jsonl`` (one line per dropped document: ``source, doc_id,
reason, where, detail``). Every source is read completely before anything is written, and the output folder is
swapped in by rename, so bad input never leaves a half-written output.

Per source: ``docs_in == docs_out + dropped`` (checked here; a mismatch raises ``RuntimeError``), and at least one
document out (a source of none raises ``SourceError`` naming it and its drop counts, before anything is written).
The metrics and log lines are ``tasks/ingest/metrics.py``; a record's document row, with the NFC and whitespace
rules of its text and words, ``tasks/ingest/normalize.py``.

Incremental (``ingest.incremental``, ``tasks/ingest/cache.py``): each file (a builtin or ``hf_disk`` source as
a whole) is read only when ``<data>/ingest_cache`` holds no entry for its content, spec and code; the steps
across files (ids never repeated, jsonl / parquet column types, ``max_docs``) run over all of them on every
run, so the outputs equal a from-scratch run byte for byte. A unit's shard is kept in the cache too and
hard-linked into the output, so a scheduled run writes only the shards of new or changed files. Files read and
taken from the cache are logged.

- ``records``: what every reader yields (``Record``) and raises (``SourceError``), and the file helpers they share;
- ``tabular``: readers of record-shaped sources (JSON Lines, CSV, Parquet, a ``save_to_disk`` folder);
- ``text``: readers of text-shaped sources (plain text, CoNLL IOB2);
- ``builtin``: the corpora that ship inside registry packages, read offline;
- ``normalize``: a record as ingest writes it: its document row, its text and words normalized;
- ``cache``: incremental ingest, a per-unit cache so a run re-reads only new or changed files;
- ``deps``: the check that every file source is a DVC dependency of the stage;
- ``metrics``: what one source produced (``SourceResult``), and the stage's metrics and log lines.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from tqdm import tqdm

from tasks.common.files.shards import linked_or_copied, write_manifest
from tasks.common.files.stamped import swapped_in
from tasks.config.corpus.ingest import (
    BuiltinSource,
    ConllSource,
    CsvSource,
    HfDiskSource,
    IngestParams,
    JsonlSource,
    ParquetSource,
    SourceSpec,
    TextSource,
)
from tasks.config.paths import Paths
from tasks.ingest import tabular, text
from tasks.ingest.builtin import BUILTINS
from tasks.ingest.cache import Outcome, UnitCache, builtin_facts, file_facts, folder_facts, shard_key, spec_facts
from tasks.ingest.deps import check_declared_deps
from tasks.ingest.metrics import SourceResult, log_drops, summarize
from tasks.ingest.normalize import ROW_SCHEMA, no_rows, outcome
from tasks.ingest.records import Record, SourceError, match_files

#: Readers of the kinds read file by file: ``reader(spec, [(path, name), ...])``.
FILE_READERS: dict[type, Callable[[Any, list[tuple[Path, str]]], Iterator[Record]]] = {
    JsonlSource: tabular.read_jsonl,
    CsvSource: tabular.read_csv,
    ParquetSource: tabular.read_parquet,
    TextSource: text.read_text,
    ConllSource: text.read_conll,
}
DROPPED_FILE = "dropped.jsonl"
DROP_COLUMNS = ("local_id", "where", "drop", "detail")  # of an outcome table, as drop_entry takes them


def run(cfg: IngestParams, paths: Paths, log: Any) -> dict[str, Any]:
    """Ingest all sources; returns ``{"sources": {name: {...}}, "totals": {...}}`` (see ``source_metrics``).

    Raises ``ValueError`` first if a file source is not a dvc.yaml dep of the stage (``deps.check_declared_deps``).
    """
    check_declared_deps(cfg.sources, paths.stage_data("ingest"), Path.cwd())
    cache = UnitCache(paths.stage_data("ingest_cache"), cfg.incremental, ROW_SCHEMA)
    results = [ingest_source(spec, cache) for spec in cfg.sources]
    for result in results:
        log_drops(result, log)
    check_every_source_yields(cfg.sources, results)
    write_outputs(paths.stage_data("ingest"), results)
    cache.prune()
    if cache.unusable:
        log.info(
            f"ingest: {len(cache.unusable)} cache entr(ies) or shard(s) damaged or not matching their key, "
            f"read or written again, "
            f"e.g. {cache.unusable[0]}"
        )
    mode = "incremental" if cfg.incremental else "full (ingest.incremental: false)"
    log.info(
        f"ingest: {mode}: {cache.units_read} file(s) read, {cache.units_cached} taken from the cache, "
        f"{cache.shards_written} output shard(s) written"
    )
    log.metrics(
        {
            "incremental": {
                "units_read": cache.units_read,
                "units_cached": cache.units_cached,
                "shards_written": cache.shards_written,
            }
        }
    )
    return summarize(results)


def read_source(spec: SourceSpec, result: SourceResult) -> Iterator[Record]:
    """All records of one source (a model from ``tasks.config.corpus.ingest``), in a deterministic order, read whole
    (what ``source_outcomes`` falls back on to raise a from-scratch run's error); the paths its file search
    skipped go to ``result.skipped_paths``."""
    if isinstance(spec, BuiltinSource):
        return BUILTINS[spec.corpus]()
    if isinstance(spec, HfDiskSource):
        return tabular.read_hf_disk(spec)
    found = match_files(spec.path, spec.include)
    result.skipped_paths = found.skipped
    return FILE_READERS[type(spec)](spec, found.files)


def source_units(spec: SourceSpec, result: SourceResult, cache: UnitCache) -> Iterator[tuple[str, pa.Table]]:
    """Every unit's ``(cache key, outcomes)``, the outcomes a table (``cache.outcome_schema``), unit by unit through
    ``cache`` (a file, or a builtin / ``hf_disk`` source whole), with the column-type checks across files run over
    all units. Raises ``SourceError``."""
    if isinstance(spec, BuiltinSource | HfDiskSource):
        facts = builtin_facts(spec.corpus) if isinstance(spec, BuiltinSource) else folder_facts(Path(spec.path))

        def whole() -> tuple[list[Outcome], dict[str, Any]]:
            return [outcome(spec, r) for r in read_source(spec, result)], {}

        table, _, key = cache.through(spec.name, spec_facts(spec) | facts, whole)
        yield key, table
        return
    found = match_files(spec.path, spec.include)
    result.skipped_paths = found.skipped
    if isinstance(spec, ParquetSource):
        tabular.check_parquet_types(found.files)  # footers only: the check spans all shards
    types = tabular.ColumnTypes()
    for path, name in found.files:
        outcomes, facts, key = cache.through(
            spec.name, spec_facts(spec) | file_facts(path, name), partial(read_unit, spec, path, name)
        )
        for column, (value_type, where) in facts.get("types", {}).items():
            types.check(column, value_type, where)  # jsonl: a column's type must agree across files
        yield key, outcomes


def read_unit(spec: SourceSpec, path: Path, name: str) -> tuple[list[Outcome], dict[str, Any]]:
    """One file's outcomes and, for jsonl, ``{"types": {column: [type, where first seen]}}`` in the file."""
    if not isinstance(spec, JsonlSource):
        return [outcome(spec, record) for record in FILE_READERS[type(spec)](spec, [(path, name)])], {}
    types = tabular.ColumnTypes()
    outcomes = [outcome(spec, record) for record in tabular.read_jsonl(spec, [(path, name)], types)]
    return outcomes, {"types": types.first}


def ingest_source(spec: SourceSpec, cache: UnitCache) -> SourceResult:
    """Read, normalize and sample one source. Raises ``SourceError`` for bad input or a repeated id: the
    error of a whole from-scratch read (a unit read alone can meet a different error first)."""
    try:
        result = SourceResult(spec.name)
        return collect(spec, source_units(spec, result, cache), result, cache)
    except SourceError:
        first_seen: dict[str, str] = {}
        for record in read_source(spec, SourceResult(spec.name)):  # record by record, as a whole read meets them
            item = outcome(spec, record)  # build_row raises for a bad word
            check_new_id(first_seen, spec.name, item.local_id, item.where)
        raise


def check_new_id(first_seen: dict[str, str], name: str, local_id: str, where: str) -> None:
    """Record where ``name:local_id`` was first seen; raises ``SourceError`` naming both places when it repeats."""
    doc_id = f"{name}:{local_id}"
    if doc_id in first_seen:
        raise SourceError(f"{where}: id {local_id!r} repeats the one at {first_seen[doc_id]}")
    first_seen[doc_id] = where


def collect(
    spec: SourceSpec, units: Iterator[tuple[str, pa.Table]], result: SourceResult, cache: UnitCache
) -> SourceResult:
    """Fill ``result`` in two passes over the source's units. First, unit by unit: ``docs_in``, the drops from
    each unit's outcome table in input order and the local ids; then the id check across units and ``max_docs``.
    Then each unit's kept rows, read again memory-mapped from its cache entry, are counted and written to their
    output shard in the cache (``finish``). So the driver holds one unit's rows at a time, and of the source only
    its ids (Arrow strings) and drops: only the drops become Python values, and the ids only when one repeats
    (``check_unique_ids``) or ``max_docs`` samples."""
    ids: list[pa.ChunkedArray] = []
    kept_ids: list[pa.ChunkedArray] = []
    keys: list[str] = []
    for key, table in tqdm(units, desc=f"ingest {spec.name}", unit="file", mininterval=2):
        result.counts["docs_in"] += table.num_rows
        ids.append(table.column("local_id"))
        dropped = table.filter(pc.is_valid(table.column("drop")))
        for local_id, where, drop, detail in zip(*(dropped.column(c).to_pylist() for c in DROP_COLUMNS)):
            result.dropped.append(drop_entry(spec.name, f"{spec.name}:{local_id}", drop, where, detail))
        kept = table.filter(pc.is_null(table.column("drop"))) if len(dropped) else table
        kept_ids.append(kept.column("local_id"))
        keys.append(key)
        for counter, column in (("nfc_changed", "nfc_changed"), ("whitespace_normalized", "whitespace_changed")):
            result.counts[counter] += pc.sum(kept.column(column)).as_py() or 0
    check_unique_ids(spec.name, ids, [partial(cache.entry_column, spec.name, key, "where") for key in keys])
    chosen = sample(kept_ids, spec.max_docs, result, spec.name)
    result.shards = [finish(result, cache, key, kept) for key, kept in zip(keys, chosen)]
    if not keys:  # still one shard
        result.shards = [cache.shard(spec.name, shard_key("no unit", None), no_rows())]
    check_identity(result)
    return result


def finish(result: SourceResult, cache: UnitCache, key: str, kept: np.ndarray | None) -> Path:
    """The output shard of one unit (``cache.shard``): its kept rows (the ``kept`` positions of them, None: all),
    from its cache entry, memory-mapped; their docs, characters, words and labels counted into ``result``."""
    table = cache.entry(result.name, key)
    drops = table.column("drop")
    rows = document_rows(table.filter(pc.is_null(drops)) if drops.null_count < len(drops) else table)
    rows = rows if kept is None else rows.take(pa.array(kept, pa.int64()))
    result.counts["docs_out"] += rows.num_rows
    result.counts["chars_out"] += pc.sum(pc.utf8_length(rows.column("text"))).as_py() or 0  # code points, as len()
    result.counts["tokens_out"] += pc.sum(pc.list_value_length(rows.column("tokens"))).as_py() or 0
    for count in pc.value_counts(rows.column("label")).to_pylist():
        if count["values"] is not None:
            result.labels[count["values"]] += count["counts"]
    return cache.shard(result.name, shard_key(key, kept), rows)


def document_rows(kept: pa.Table) -> pa.Table:
    """The ``row`` structs of a unit's kept outcomes as a ``ROW_SCHEMA`` table, sharing their buffers."""
    if not kept.num_rows:
        return no_rows()  # a table of no chunks has no struct to unpack
    return pa.Table.from_struct_array(kept.column("row")).cast(ROW_SCHEMA)


def check_unique_ids(name: str, ids: list[pa.ChunkedArray], places: list[Callable[[], pa.ChunkedArray]]) -> None:
    """Raise ``SourceError`` naming both places of the first local id that repeats in input order: one Arrow
    distinct count when none does; only when one does, the ids as Python strings and each unit's places
    (``places``: per unit, a function that reads its ``where`` column)."""
    every = pa.chunked_array([chunk for column in ids for chunk in column.chunks], pa.string())
    if pc.count_distinct(every, mode="all").as_py() == len(every):
        return
    first_seen: dict[str, str] = {}
    for unit_ids, unit_places in zip(ids, places):
        for local_id, where in zip(unit_ids.to_pylist(), unit_places().to_pylist()):
            check_new_id(first_seen, name, local_id, where)


def sample(
    kept_ids: list[pa.ChunkedArray], max_docs: int | None, result: SourceResult, name: str
) -> list[np.ndarray | None]:
    """Per unit, the positions among its kept rows that ``max_docs`` keeps (``(rows,)`` int64; None: all, as for
    every unit when the source has at most ``max_docs`` rows): those whose own id (``kept_ids``: the rows' local
    ids, unit by unit) has the smallest md5, in input order.

    Hashing the source's own id (not the doc_id) picks the same documents for two sources built on the
    same corpus (``bbc_news`` and ``bbc_news_pretrain``), with no RNG and independent of input order.
    Rows left out are dropped with reason ``max_docs``.
    """
    if max_docs is None or sum(len(unit) for unit in kept_ids) <= max_docs:
        return [None] * len(kept_ids)
    local_ids = [local_id for unit in kept_ids for local_id in unit.to_pylist()]
    ranked = sorted(range(len(local_ids)), key=lambda i: hashlib.md5(local_ids[i].encode("utf-8")).hexdigest())
    chosen = np.zeros(len(local_ids), bool)
    chosen[ranked[:max_docs]] = True
    for i in np.flatnonzero(~chosen).tolist():
        result.dropped.append(drop_entry(name, f"{name}:{local_ids[i]}", "max_docs", None, f"max_docs={max_docs}"))
    bounds = np.cumsum([0] + [len(unit) for unit in kept_ids])
    return [np.flatnonzero(chosen[start:stop]) for start, stop in zip(bounds[:-1], bounds[1:])]


def drop_entry(source: str, doc_id: str, reason: str, where: str | None, detail: str | None) -> dict[str, Any]:
    """One line of ``dropped.jsonl``."""
    return {"source": source, "doc_id": doc_id, "reason": reason, "where": where, "detail": detail}


def check_identity(result: SourceResult) -> None:
    """Raise ``RuntimeError`` unless ``docs_in == docs_out + dropped`` for this source."""
    docs_in, docs_out, dropped = result.counts["docs_in"], result.counts["docs_out"], len(result.dropped)
    if docs_in != docs_out + dropped:
        raise RuntimeError(f"{result.name}: docs_in {docs_in} != docs_out {docs_out} + dropped {dropped}")


def check_every_source_yields(specs: list, results: list[SourceResult]) -> None:
    """Raise ``SourceError`` (one line) naming every source that yields no document, with its counts and its first
    drop: a source of 0 documents is a mistake (a ``text_field`` its records lack, a folder of empty files), never a
    silent gap in the corpus. Nothing has been written when it raises."""
    empty = [(spec, result) for spec, result in zip(specs, results) if not result.counts["docs_out"]]
    if not empty:
        return
    said = "; ".join(zero_documents(spec, result) for spec, result in empty)
    raise SourceError(
        f"ingest.sources: {len(empty)} source(s) yield 0 documents: {said}; fix the source's fields or "
        "files, or remove it from ingest.sources"
    )


def zero_documents(spec: SourceSpec, result: SourceResult) -> str:
    """``'<name>' (<kind>[ <path>]): <n> in, dropped {reason: n}[, first: <where> (<reason>: <detail>)]``."""
    where = f" {spec.path}" if hasattr(spec, "path") else ""
    reasons = dict(sorted(Counter(entry["reason"] for entry in result.dropped).items()))
    said = f"{spec.name!r} ({spec.kind}{where}): {result.counts['docs_in']} in, dropped {reasons}"
    if not result.dropped:
        return said
    first = result.dropped[0]
    detail = first["detail"] or MISSING_FIELD.get(first["reason"], "").format(
        field=getattr(spec, "text_field", None) or getattr(spec, "tokens_field", None)
    )
    return f"{said}, first: {first['where']} ({first['reason']}{': ' + detail if detail else ''})"


#: What a drop reason without a detail means, said for a source whose documents all were dropped for it.
MISSING_FIELD = {
    "missing_text": "no value in field {field!r}",
    "empty": "the text is empty after whitespace normalization",
}


def write_outputs(out_dir: Path, results: list[SourceResult]) -> None:
    """Link ``<source>/part-<position>.parquet`` per unit (the cache's shard, ``collect``: a shard a run before
    wrote is not written again) and write ``dropped.jsonl`` in a temporary folder, then swap it in by rename."""
    with swapped_in(out_dir) as tmp:
        for result in results:
            (tmp / result.name).mkdir()
            width = max(5, len(str(len(result.shards) - 1)))
            for position, shard in enumerate(result.shards):
                linked_or_copied(shard, tmp / result.name / f"part-{position:0{width}d}.parquet")
        write_manifest(tmp, {result.name: sorted((tmp / result.name).glob("*.parquet")) for result in results})
        with (tmp / DROPPED_FILE).open("w", encoding="utf-8") as handle:
            for result in results:
                for entry in result.dropped:
                    handle.write(json.dumps(entry, ensure_ascii=False, sort_keys=True) + "\n")
