"""A record as ingest writes it: the document row contract (``ROW_SCHEMA``), its row (``build_row``; ``outcome``,
what ingest makes of the record), its text in Unicode NFC with whitespace normalized (``normalize_text``) and each
word of token-labelled data checked (``normalize_tokens``)."""

from __future__ import annotations

import json
import re
import unicodedata
from typing import Any

import pyarrow as pa

from tasks.config.corpus.ingest import SourceSpec
from tasks.ingest.cache import Outcome
from tasks.ingest.records import Record, SourceError

ROW_SCHEMA = pa.schema(
    [
        ("doc_id", pa.string()),
        ("source", pa.string()),
        ("role", pa.string()),
        ("text", pa.string()),
        ("label", pa.string()),
        ("group", pa.string()),
        ("tokens", pa.list_(pa.string())),
        ("tags", pa.list_(pa.string())),
        ("meta", pa.string()),
    ]
)


def no_rows() -> pa.Table:
    """An empty ``ROW_SCHEMA`` table (``Schema.empty_table`` builds it from Python lists, which imports pandas)."""
    return pa.Table.from_batches([], ROW_SCHEMA)


_BLANK_LINES = re.compile(r"\n{3,}")


def normalize_text(raw: str) -> tuple[str, bool, bool]:
    """``(text, nfc_changed, whitespace_changed)``: Unicode NFC, then whitespace normalized.

    Whitespace: CR/CRLF -> LF; any run of other whitespace (tabs, no-break spaces...) -> one space;
    no space at line ends; at most one blank line in a row (paragraph breaks survive); stripped.
    ``whitespace_changed`` ignores the stripping of the ends alone.
    """
    nfc = unicodedata.normalize("NFC", raw)
    lines = nfc.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    # str.split() cuts at the characters str.isspace() names, the same as re's \s, and drops the ends: each
    # line's runs of whitespace become one space and it loses its end spaces (3x faster than three regexes)
    text = "\n".join([" ".join(line.split()) for line in lines])
    text = (_BLANK_LINES.sub("\n\n", text) if "\n\n\n" in text else text).strip()
    return text, nfc != raw, text != nfc.strip()  # a file's final newline is not worth counting


def normalize_tokens(tokens: list[str] | None, where: str) -> list[str] | None:
    """NFC of each word; raises ``SourceError`` for an empty word or one holding whitespace."""
    if tokens is None:
        return None
    words = [unicodedata.normalize("NFC", token) for token in tokens]
    bad = next((word for word in words if not word or len(word.split()) != 1 or word != word.strip()), None)
    if bad is not None:
        raise SourceError(f"{where}: word {bad!r} is empty or holds whitespace")
    return words


def outcome(spec: SourceSpec, record: Record) -> Outcome:
    """What ingest makes of one record (``build_row``)."""
    reason, row, nfc_changed, whitespace_changed = build_row(spec, f"{spec.name}:{record.local_id}", record)
    return Outcome(
        record.local_id, record.where, reason, record.detail if reason else None, row, nfc_changed, whitespace_changed
    )


def build_row(spec: SourceSpec, doc_id: str, record: Record) -> tuple[str | None, dict[str, Any] | None, bool, bool]:
    """``(drop reason, None, False, False)`` or ``(None, row, nfc_changed, whitespace_changed)``."""
    if record.drop:
        return record.drop, None, False, False
    if record.text is None:
        return "missing_text", None, False, False
    text, nfc_changed, whitespace_changed = normalize_text(record.text)
    meta = dict(record.meta)
    if record.text_pair is not None:  # a pair's text is both texts, so dedup and leakage match the whole pair
        second, nfc_pair, space_pair = normalize_text(record.text_pair)
        meta["text_pair"] = [text, second]
        text = f"{text}\n\n{second}" if text and second else ""  # a pair with an empty side is dropped as empty
        nfc_changed, whitespace_changed = nfc_changed or nfc_pair, whitespace_changed or space_pair
    if not text:
        return "empty", None, False, False
    if nfc_changed:
        meta["raw_text"] = record.text  # kept only when normalization changed more than whitespace
    tokens = normalize_tokens(record.tokens, record.where)
    if tokens is not None:
        text = " ".join(tokens)  # token-labelled text is its (NFC) words joined by one space
    row = {
        "doc_id": doc_id,
        "source": spec.name,
        "role": spec.role,
        "text": text,
        "label": record.label,
        "group": record.group if record.group is not None else doc_id,
        "tokens": tokens,
        "tags": record.tags,
        "meta": json.dumps(meta, sort_keys=True, ensure_ascii=False, default=str),
    }
    return None, row, nfc_changed, whitespace_changed
