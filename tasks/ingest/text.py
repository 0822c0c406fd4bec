"""Readers of text-shaped sources: plain text (a document per file or per blank-line block) and CoNLL IOB2.

A tag that is not IOB2 or a row with too few columns raises ``SourceError`` naming the file and line.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from tasks.config.ingest import ConllSource, TextSource
from tasks.ingest.records import Record, SourceError, bad_byte, match_files, read_text_file, split_lines, text_record

_IOB2_TAG = re.compile(r"^(O|[BI]-\S+)$")


def read_text(spec: TextSource) -> Iterator[Record]:
    """Plain text, one document per file (id = file name) or per blank-line block (id = ``file:line``)."""
    for path, name in match_files(spec.path):
        label = path.parent.name if spec.label_from_parent_dir else None
        content = read_text_file(path)
        if spec.unit == "file":
            yield text_record(name, str(path), content, label)
            continue
        for line_no, block in blank_line_blocks(content):
            yield text_record(f"{name}:{line_no}", f"{path}:{line_no}", block, label)


def blank_line_blocks(content: str) -> Iterator[tuple[int, str]]:
    """``(first line number, block)`` for each run of non-blank lines (blank = whitespace only)."""
    block: list[str] = []
    start = 0
    for line_no, line in enumerate(split_lines(content), start=1):
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
        yield from parse_conll(read_text_file(path), str(path), f"{name}:", spec.token_column, spec.tag_column, spec.separator)


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
    for line_no, line in enumerate(split_lines(content), start=1):
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
    bad = bad_byte(text)
    if bad:
        return Record(local_id, where, None, drop="undecodable", detail=bad)
    return Record(local_id, where, text, group=document, tokens=tokens, tags=tags, meta=meta)
