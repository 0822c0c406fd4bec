"""What every source reader yields (``Record``) and raises (``SourceError``), and the file helpers they share.

Bytes that are not UTF-8 are decoded with ``surrogateescape`` so a reader can drop exactly the documents that
contain them (reason ``undecodable``) and say where the first bad byte is.
"""

from __future__ import annotations

import glob
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_GLOB_CHARS = re.compile(r"[*?\[]")
_ESCAPED_BYTE = re.compile("[\udc80-\udcff]")  # what surrogateescape makes of a non-UTF-8 byte


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


def bad_byte(text: str) -> str | None:
    """``None`` if ``text`` decoded cleanly, else where its first non-UTF-8 byte is."""
    found = _ESCAPED_BYTE.search(text)
    if found is None:
        return None
    return f"byte 0x{ord(found.group()) - 0xDC00:02x} at character {found.start()} is not UTF-8"


def read_text_file(path: Path) -> str:
    return path.read_bytes().decode("utf-8", "surrogateescape")


def split_lines(content: str) -> list[str]:
    """Lines split at ``\n`` only (``str.splitlines`` also splits at U+2028, which is legal inside JSON)."""
    return [line.removesuffix("\r") for line in content.split("\n")]


def text_record(local_id: str, where: str, content: str, label: str | None) -> Record:
    """A ``Record`` for a piece of decoded text, dropped as ``undecodable`` if it holds non-UTF-8 bytes."""
    bad = bad_byte(content)
    if bad:
        return Record(local_id, where, None, label=label, drop="undecodable", detail=bad)
    return Record(local_id, where, content, label=label)
