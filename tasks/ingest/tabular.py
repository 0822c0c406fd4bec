"""Readers of record-shaped sources: JSON Lines, CSV, Parquet and a ``datasets.save_to_disk`` folder.

Each yields ``Record``s in a fixed order. Bad input that cannot be dropped row by row (malformed JSON, a
missing CSV column, a column of mixed types) raises ``SourceError`` naming the file and line.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from tasks.common.files.ioerrors import reading
from tasks.config.corpus.ingest import CsvSource, HfDiskSource, JsonlSource, ParquetSource
from tasks.ingest.records import Record, SourceError, bad_byte, read_text_file, split_lines


class ColumnTypes:
    """The JSON type of each column, first seen where; a later different type raises ``SourceError``.

    Mixed types are reported, never coerced (a label column of ints and strings is a data bug).
    ``null`` is compatible with every type (an optional field), and ints and floats are both numbers.
    """

    def __init__(self) -> None:
        self.first: dict[str, tuple[str, str]] = {}

    def check(self, column: str, value_type: str, where: str) -> None:
        """Record ``value_type`` for ``column`` at ``where``; raise if it differs from the first seen."""
        if value_type == "null":
            return
        seen_type, seen_where = self.first.setdefault(column, (value_type, where))
        if seen_type != value_type:
            raise SourceError(
                f"{where}: column {column!r} is {value_type} here but {seen_type} at {seen_where}; "
                "mixed types are not coerced"
            )

    def check_row(self, row: Mapping[str, Any], where: str) -> None:
        """Check every column of a JSON-like row."""
        for column, value in row.items():
            self.check(column, _json_type(value), where)


def _json_type(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):  # NaN: pandas' and JSON's missing value
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list | tuple):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def record_from_row(spec, row: Mapping[str, Any], default_id: str, where: str) -> Record:
    """Map a row (JSON object, Parquet/HF row, CSV row) to a ``Record`` using the spec's field names.

    Unmapped columns go to ``meta``. Raises ``SourceError`` for a missing id, a non-string text, or
    tokens/tags that are not equal-length lists of strings, and for a missing label (``missing_label``)
    unless the spec says ``missing_label: drop``.
    """
    tokens_field = getattr(spec, "tokens_field", None)
    tags_field = getattr(spec, "tags_field", None)
    pair_field = getattr(spec, "text_pair_field", None)
    mapped = {spec.text_field, spec.label_field, spec.group_field, spec.id_field, tokens_field, tags_field, pair_field}
    text = row.get(spec.text_field) if spec.text_field else None
    text = None if _json_type(text) == "null" else text  # a NaN text is a missing text, as null is
    if text is not None and not isinstance(text, str):
        raise SourceError(f"{where}: text field {spec.text_field!r} is {_json_type(text)}, expected a string")
    tokens = _string_list(row, tokens_field, where)
    tags = _string_list(row, tags_field, where)
    if tokens is not None and (tags is None or len(tags) != len(tokens)):
        raise SourceError(f"{where}: {tokens_field!r} and {tags_field!r} must be lists of equal length")
    if text is None and tokens is not None:
        text = " ".join(tokens)
    label, missing = _label(spec, row, where)
    pair = row.get(pair_field) if pair_field else None
    if pair_field and not isinstance(pair, str):
        raise SourceError(f"{where}: text pair field {pair_field!r} is {_json_type(pair)}, expected a string")
    return Record(
        local_id=_own_id(spec, row, default_id, where),
        where=where,
        text=text,
        label=label,
        group=_scalar(row, spec.group_field, where),
        tokens=tokens,
        tags=tags,
        text_pair=pair,
        meta={key: value for key, value in row.items() if key not in mapped},
        drop="missing_label" if missing else None,
        detail=missing,
    )


def _label(spec, row: Mapping[str, Any], where: str) -> tuple[str | None, str | None]:
    """``(label, None)``, or ``(None, why)`` for a missing label with ``missing_label: drop``.

    Missing: no such field, null, float NaN, or a string that is empty, whitespace or ``nan`` in any case
    (what ``str(float("nan"))`` and pandas' ``astype(str)`` write), so no class is ever named ``""`` or
    ``nan``. Raises ``SourceError`` naming ``where`` for a missing label under ``missing_label: error``.
    """
    name = spec.label_field
    if name is None:
        return None, None
    value = row.get(name)
    if not is_missing(value):
        return _scalar(row, name, where), None
    why = f"label field {name!r} is {value!r}" if name in row else f"no label field {name!r}"
    if spec.missing_label == "error":
        raise SourceError(f"{where}: {why}: a missing label (set missing_label: drop to drop such records)")
    return None, why


def is_missing(value: Any) -> bool:
    """Whether a label value means "no label": None, NaN, or a blank or ``nan`` string."""
    if isinstance(value, str):
        return value.strip().lower() in ("", "nan")
    return value is None or (isinstance(value, float) and math.isnan(value))


def _own_id(spec, row: Mapping[str, Any], default_id: str, where: str) -> str:
    if spec.id_field is None:
        return default_id
    value = _scalar(row, spec.id_field, where)
    if value is None:
        raise SourceError(f"{where}: id field {spec.id_field!r} is missing or null")
    return value


def _scalar(row: Mapping[str, Any], name: str | None, where: str) -> str | None:
    value = row.get(name) if name else None
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, float) and value.is_integer():  # pandas stores an int column with gaps as float
        return str(int(value))
    raise SourceError(f"{where}: field {name!r} is {_json_type(value)}, expected a string or an integer")


def _string_list(row: Mapping[str, Any], name: str | None, where: str) -> list[str] | None:
    value = row.get(name) if name else None
    if value is None:
        return None
    if not isinstance(value, list | tuple) or not all(isinstance(item, str) for item in value):
        raise SourceError(f"{where}: field {name!r} must be a list of strings")
    return list(value)


def read_jsonl(spec: JsonlSource, files: list[tuple[Path, str]], types: ColumnTypes | None = None) -> Iterator[Record]:
    """One JSON object per non-blank line (CRLF or LF). Ids default to ``<file>:<line>``. ``types``: the column
    types seen so far (a fresh ``ColumnTypes`` if None); the incremental cache passes one per file."""
    types = ColumnTypes() if types is None else types
    for path, name in files:
        for line_no, line in enumerate(split_lines(read_text_file(path)), start=1):
            if not line.strip():
                continue
            where = f"{path}:{line_no}"
            bad = bad_byte(line)
            if bad:
                yield Record(f"{name}:{line_no}", where, None, drop="undecodable", detail=bad)
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise SourceError(f"{where}: malformed JSON ({err.msg}: column {err.colno})") from None
            if not isinstance(row, dict):
                raise SourceError(f"{where}: expected a JSON object, got {_json_type(row)}")
            types.check_row(row, where)
            yield record_from_row(spec, row, f"{name}:{line_no}", where)


def read_csv(spec: CsvSource, files: list[tuple[Path, str]]) -> Iterator[Record]:
    """CSV with a header row (CRLF or LF); every mapped column must be in the header. Ids default to
    ``<file>:<line>``; an empty cell is an empty string (so an empty label cell is a missing label)."""
    wanted = [c for c in (spec.text_field, spec.label_field, spec.group_field, spec.id_field) if c]
    for path, name in files:
        reader = csv.DictReader(io.StringIO(read_text_file(path), newline=""), strict=True)
        header = reader.fieldnames or []
        missing = [column for column in wanted if column not in header]
        if missing:
            raise SourceError(f"{path}:1: missing column(s) {missing}; the header has {header}")
        start = reader.line_num + 1
        try:
            for row in reader:
                where = f"{path}:{start}"
                if None in row or None in row.values():
                    raise SourceError(
                        f"{where}: the row has a different number of fields than the header ({len(header)})"
                    )
                bad = next(filter(None, map(bad_byte, row.values())), None)
                if bad:
                    yield Record(f"{name}:{start}", where, None, drop="undecodable", detail=bad)
                else:
                    yield record_from_row(spec, row, f"{name}:{start}", where)
                start = reader.line_num + 1
        except csv.Error as err:
            raise SourceError(f"{path}:{reader.line_num}: malformed CSV ({err})") from None


def read_parquet(spec: ParquetSource, files: list[tuple[Path, str]]) -> Iterator[Record]:
    """Parquet shards; the schema is the union of the shards'. Ids default to ``<file>:<row>`` (0-based).

    Raises ``SourceError`` naming both files when one column has different Arrow types in two shards, and
    ``ioerrors.DamagedFile`` naming a file that cannot be read (truncated, damaged, not Parquet).
    """
    check_parquet_types(files)
    for path, name in files:
        with reading(path):
            rows = pq.read_table(path).to_pylist()
        for row_no, row in enumerate(rows):
            yield record_from_row(spec, row, f"{name}:{row_no}", f"{path}:row {row_no}")


def check_parquet_types(files: list[tuple[Path, str]]) -> None:
    """Raise ``SourceError`` naming both files when one column has different Arrow types in two shards (read
    from the footers only)."""
    types = ColumnTypes()
    for path, _ in files:
        with reading(path):
            schema = pq.read_schema(path)
        for column in schema:
            if str(column.type) != "null":
                types.check(column.name, str(column.type), f"{path}")


def read_hf_disk(spec: HfDiskSource) -> Iterator[Record]:
    """A ``save_to_disk`` folder; a DatasetDict is read split by split (sorted). ClassLabel ids -> names
    (a label id of -1 is ``datasets``' "no label": a missing label).

    Ids default to ``<split>:<row>`` (0-based; just ``<row>`` for a single Dataset).
    """
    import datasets

    loaded = datasets.load_from_disk(spec.path)
    splits = sorted(loaded.items()) if isinstance(loaded, datasets.DatasetDict) else [("", loaded)]
    for split, dataset in splits:
        decoders = _class_label_names(dataset.features, spec)
        for row_no, row in enumerate(dataset):
            for column, names in decoders.items():
                row[column] = _decode_labels(row[column], names)
            local_id = f"{split}:{row_no}" if split else str(row_no)
            record = record_from_row(spec, row, local_id, f"{spec.path}[{split or 'all'}] row {row_no}")
            if split:
                record.meta["hf_split"] = split
            yield record


def _class_label_names(features, spec) -> dict[str, list[str]]:
    import datasets

    names = {}
    for column in (spec.label_field, spec.tags_field):
        feature = features.get(column) if column else None
        inner = getattr(feature, "feature", feature)
        if isinstance(inner, datasets.ClassLabel):
            names[column] = inner.names
    return names


def _decode_labels(value, names: list[str]):
    if isinstance(value, list):
        return [names[v] for v in value]
    return None if value is None or value < 0 else names[value]
