"""Readers of text-shaped sources: plain text (a document per file, blank-line block or record) and CoNLL IOB2.

A tag that is not IOB2 or a row with too few columns raises ``SourceError`` naming the file and line.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tasks.config.corpus.ingest import ConllSource, TextSource
from tasks.ingest.records import Record, SourceError, bad_byte, read_text_file, split_lines, text_record

_IOB2_TAG = re.compile(r"^(O|[BI]-\S+)$")


def read_text(spec: TextSource, files: list[tuple[Path, str]]) -> Iterator[Record]:
    """Plain text, one document per file (id = file name), per blank-line block or per record (both
    id = ``file:line`` of their first non-blank line)."""
    for path, name in files:
        label = path.parent.name if spec.label_from_parent_dir else None
        content = read_text_file(path)
        if spec.unit == "file":
            yield text_record(name, str(path), content, label)
            continue
        pieces = blank_line_blocks(content) if spec.unit == "block" else records(content, spec.record_separator)
        for line_no, piece in pieces:
            yield text_record(f"{name}:{line_no}", f"{path}:{line_no}", piece, label)


def blank_line_blocks(content: str) -> Iterator[tuple[int, str]]:
    """``(first line number, block)`` for each run of non-blank lines (blank = whitespace only)."""
    return _pieces(content, lambda line: not line.strip(), keep_blank=False)


def records(content: str, separator: str) -> Iterator[tuple[int, str]]:
    """``(first non-blank line number, record)`` for each run of lines between lines equal to ``separator``
    after stripping whitespace (the fortune file format: ``%``). Blank lines inside a record are kept; a
    record of blank lines only (e.g. after the final separator) holds no text and is no document."""
    return _pieces(content, lambda line: line.strip() == separator, keep_blank=True)


def _pieces(content: str, ends, keep_blank: bool) -> Iterator[tuple[int, str]]:
    piece: list[str] = []
    start = 0
    for line_no, line in enumerate(split_lines(content), start=1):
        if ends(line):
            if piece:
                yield start, "\n".join(piece).strip("\n")
            piece = []
        elif line.strip():
            start = start if piece else line_no
            piece.append(line)
        elif piece and keep_blank:
            piece.append(line)
    if piece:
        yield start, "\n".join(piece).strip("\n")


@dataclass(frozen=True)
class ConllLayout:
    """Columns of a CoNLL file (0-based) and where a sentence's group comes from (see ``ConllSource``)."""

    token_column: int
    tag_column: int
    separator: str = "tab"
    group_comment: str | None = "newdoc id"
    group_column: int | None = None


def read_conll(spec: ConllSource, files: list[tuple[Path, str]]) -> Iterator[Record]:
    """CoNLL files: one ``Record`` per sentence (see ``parse_conll``)."""
    layout = ConllLayout(spec.token_column, spec.tag_column, spec.separator, spec.group_comment, spec.group_column)
    for path, name in files:
        yield from parse_conll(read_text_file(path), str(path), f"{name}:", layout)


def parse_conll(content: str, where: str, id_prefix: str, layout: ConllLayout) -> Iterator[Record]:
    """Sentences of a token-per-line IOB2 file; a blank (whitespace-only) line ends a sentence.

    A ``#`` line before a sentence's first token that does not parse as a token line is a comment:
    ``# key = value`` goes to ``meta`` (CoNLL-U ``# sent_id``, ``# newdoc id``), other comments to
    ``meta["comments"]``; no comment becomes a token. Tweets start with hashtags, so ``#tag<TAB>O`` is a
    token. ``sent_id`` becomes the id (default ``<file>:<sentence number>``). The group: the value of the
    last ``# <group_comment> = X`` comment (or ``<file>:<line>`` of the last ``-DOCSTART-`` line) seen so
    far, or with ``group_column`` that column of the sentence's tokens. Raises ``SourceError`` naming the
    line for a short row, a tag that is not IOB2 (``O``, ``B-TYPE``, ``I-TYPE``), or a token whose group
    column differs from its sentence's first token's.
    """
    split = (lambda line: line.split("\t")) if layout.separator == "tab" else str.split
    need = max(c for c in (layout.token_column, layout.tag_column, layout.group_column) if c is not None) + 1
    tokens, tags, meta, start, count, document = [], [], {}, 0, 0, None
    for line_no, line in enumerate(split_lines(content), start=1):
        columns = split(line)
        is_token = len(columns) >= need and _IOB2_TAG.match(columns[layout.tag_column].strip())
        if not line.strip() or line.startswith("-DOCSTART-"):
            if tokens:
                count += 1
                yield _sentence(tokens, tags, meta, f"{where}:{start}", f"{id_prefix}{count:06d}", document)
                tokens, tags, meta = [], [], {}
            if line.startswith("-DOCSTART-") and layout.group_column is None:
                document = f"{where}:{line_no}"
            continue
        if line.startswith("#") and not tokens and not is_token:
            key, eq, value = line[1:].partition("=")
            if eq:
                meta[key.strip()] = value.strip()
            else:
                meta.setdefault("comments", []).append(line[1:].strip())
            document = value.strip() if eq and key.strip() == layout.group_comment else document
            continue
        if len(columns) < need:
            raise SourceError(f"{where}:{line_no}: {len(columns)} column(s), need column {need - 1} (0-based)")
        if not is_token:
            raise SourceError(f"{where}:{line_no}: tag {columns[layout.tag_column]!r} is not IOB2 (O, B-TYPE, I-TYPE)")
        if layout.group_column is not None:
            document = _column_group(
                columns[layout.group_column].strip(),
                document if tokens else None,
                f"{where}:{line_no}",
                f"{where}:{start}",
            )
        start = start if tokens else line_no
        tokens.append(columns[layout.token_column].strip())
        tags.append(columns[layout.tag_column].strip())
    if tokens:
        count += 1
        yield _sentence(tokens, tags, meta, f"{where}:{start}", f"{id_prefix}{count:06d}", document)


def _column_group(value: str, sentence_group: str | None, where: str, sentence_where: str) -> str:
    """The group a token's column gives, which must equal that of its sentence's first token (if any yet)."""
    if sentence_group is not None and value != sentence_group:
        raise SourceError(
            f"{where}: group column value {value!r} differs from {sentence_group!r} of the "
            f"sentence's first token at {sentence_where}"
        )
    return value


def _sentence(tokens, tags, meta, where, default_id, document) -> Record:
    text = " ".join(tokens)
    local_id = meta.get("sent_id", default_id)
    bad = bad_byte(text)
    if bad:
        return Record(local_id, where, None, drop="undecodable", detail=bad)
    return Record(local_id, where, text, group=document, tokens=tokens, tags=tags, meta=meta)
