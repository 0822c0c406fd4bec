"""What every source reader yields (``Record``) and raises (``SourceError``), and the file helpers they share.

Bytes that are not UTF-8 are decoded with ``surrogateescape`` so a reader can drop exactly the documents that
contain them (reason ``undecodable``) and say where the first bad byte is.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
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
    text_pair: str | None = None  # the second text of a sentence pair (``text_pair_field``)
    meta: dict[str, Any] = field(default_factory=dict)
    drop: str | None = None
    detail: str | None = None


@dataclass
class FoundFiles:
    """What ``match_files`` found: ``(path, name)`` of each file to read, sorted by ``name``, and the paths it
    skipped as ``(path, reason)``: ``not_included``, ``repeated_file`` (a second path to a file already
    taken: a symlink or a hard link), ``repeated_folder`` (a folder already searched: a symlink loop),
    ``broken_link``."""

    files: list[tuple[Path, str]]
    skipped: list[tuple[str, str]]


def match_files(pattern: str, include: str = "*") -> FoundFiles:
    """The files named by ``pattern``: one file, every file below a folder, or a glob (``**`` = any folders).

    ``name`` is the path relative to the fixed (glob-free) part of the pattern, so ids do not depend on
    where the data lives. Files found in a folder or by a glob must also match ``include``
    (``PurePath.match``: ``*.txt`` matches at any depth); a file named directly is always read. Hidden
    files and folders (``.name``) are not searched. Symlinks are followed, but no file is read twice and no
    folder searched twice. Raises ``SourceError`` when nothing matches.
    """
    path = Path(pattern)
    skipped: list[tuple[str, str]] = []
    if _GLOB_CHARS.search(pattern):
        root = fixed_root(pattern)
        found = list(_search(root, path.parts[len(root.parts) :], set(), skipped))
    elif path.is_dir():
        root, found = path, list(_search(path, ("**", "*"), set(), skipped))
    elif path.is_file():
        return FoundFiles([(path, path.name)], [])
    else:
        raise SourceError(f"{pattern}: no such file or folder")
    named = [(p, p.relative_to(root).as_posix()) for p in found]
    included = [(p, name) for p, name in named if PurePosixPath(name).match(include)]
    skipped += [(str(p), "not_included") for p, name in named if not PurePosixPath(name).match(include)]
    files = _distinct_files(included, skipped)
    if not files:
        raise SourceError(f"{pattern}: no file matches (include {include!r})")
    return FoundFiles(files, skipped)


def _first_glob_part(path: Path) -> int:
    return next(i for i, part in enumerate(path.parts) if _GLOB_CHARS.search(part))


def fixed_root(pattern: str) -> Path:
    """The path itself, or for a glob the folder its glob-free leading part names (``.`` if none)."""
    path = Path(pattern)
    if not _GLOB_CHARS.search(pattern):
        return path
    first = _first_glob_part(path)
    return Path(*path.parts[:first]) if first else Path(".")


def _search(folder: Path, parts: tuple[str, ...], searched: set, skipped: list) -> Iterator[Path]:
    """Files below ``folder`` matching the glob ``parts`` (one per path level; ``**`` = zero or more folders).

    ``searched`` holds ``(device, inode, parts left)`` of each folder a ``**`` walked, so a symlink loop or
    two links to one folder end the walk there instead of repeating it.
    """
    head, rest = parts[0], parts[1:]
    if head == "**":
        key = (*_identity(folder), len(parts))
        if key in searched:
            skipped.append((str(folder), "repeated_folder"))
            return
        searched.add(key)
        yield from _search(folder, rest or ("*",), searched, skipped)
        # real folders first: of two paths to one folder the link is the one skipped
        for entry in sorted(_entries(folder, "*"), key=lambda e: (e.is_symlink(), e.name)):
            if entry.is_dir():
                yield from _search(Path(entry.path), parts, searched, skipped)
        return
    for entry in _entries(folder, head):
        if rest and entry.is_dir():
            yield from _search(Path(entry.path), rest, searched, skipped)
        elif not rest and entry.is_file():
            yield Path(entry.path)
        elif not rest and entry.is_symlink() and not os.path.exists(entry.path):
            skipped.append((entry.path, "broken_link"))


def _entries(folder: Path, pattern: str) -> list[os.DirEntry]:
    """Entries of ``folder`` whose name matches ``pattern`` (case-sensitive), hidden ones only if asked for."""
    try:
        with os.scandir(folder) as scan:
            entries = list(scan)
    except NotADirectoryError:
        return []
    except OSError as err:
        raise SourceError(f"{folder}: cannot list the folder ({err.strerror})") from None
    hidden_ok = pattern.startswith(".")
    entries.sort(key=lambda e: e.name)  # scandir order is the file system's
    return [e for e in entries if fnmatch.fnmatchcase(e.name, pattern) and (hidden_ok or not e.name.startswith("."))]


def _identity(path: Path) -> tuple[int, int]:
    stat = path.stat()  # follows symlinks: two paths to one file or folder share device and inode
    return stat.st_dev, stat.st_ino


def _distinct_files(named: list[tuple[Path, str]], skipped: list) -> list[tuple[Path, str]]:
    """One path per file, sorted by name; of several paths to one file the one without a symlink is kept
    (else the first by name), so adding a link never changes the id of a file already read."""
    chosen: dict[tuple[int, int], tuple[Path, str]] = {}
    for path, name in sorted(named, key=lambda item: (path_has_link(item[0]), item[1])):
        key = _identity(path)
        if key in chosen:
            skipped.append((str(path), "repeated_file"))
        else:
            chosen[key] = (path, name)
    return sorted(chosen.values(), key=lambda item: item[1])


def path_has_link(path: Path) -> bool:
    """Whether a symlink is on the way to ``path`` (its real path differs from its absolute path)."""
    return os.path.realpath(path) != os.path.abspath(path)


def bad_byte(text: str) -> str | None:
    """``None`` if ``text`` decoded cleanly, else where its first non-UTF-8 byte is."""
    if text.isascii():  # O(1) in CPython, and an escaped byte is never ASCII
        return None
    try:  # a text without any surrogate encodes at C speed, 10x the regex below
        text.encode("utf-8")
        return None
    except UnicodeEncodeError:
        pass
    found = _ESCAPED_BYTE.search(text)
    if found is None:
        return None
    return f"byte 0x{ord(found.group()) - 0xDC00:02x} at character {found.start()} is not UTF-8"


def read_text_file(path: Path) -> str:
    """The file decoded as UTF-8 (bad bytes kept as surrogates, see above), without a leading BOM (U+FEFF)."""
    return path.read_bytes().decode("utf-8", "surrogateescape").removeprefix("\ufeff")


def split_lines(content: str) -> list[str]:
    """Lines split at ``\n`` only (``str.splitlines`` also splits at U+2028, which is legal inside JSON)."""
    return [line.removesuffix("\r") for line in content.split("\n")]


def text_record(local_id: str, where: str, content: str, label: str | None) -> Record:
    """A ``Record`` for a piece of decoded text, dropped as ``undecodable`` if it holds non-UTF-8 bytes."""
    bad = bad_byte(content)
    if bad:
        return Record(local_id, where, None, label=label, drop="undecodable", detail=bad)
    return Record(local_id, where, content, label=label)
