"""I/O failures as one-line errors naming the file (``tasks/CONTRACTS.md``, bad input).

- ``reading(path)``: a file that exists but cannot be read (a truncated or damaged Parquet, JSONL or Arrow file:
  pyarrow's ``ArrowInvalid``, ``OSError``, a JSON or UTF-8 decode error) raises ``DamagedFile``, a ``ValueError``
  that names the file and how to get it back: rerun the stage that writes it, found from the path's folder
  (``<data>/ingest/...`` -> ``dvc repro --single-item ingest``). A missing file stays ``FileNotFoundError``.
- ``writing(path)``: a write that runs out of room (a full disk ``ENOSPC``, a size limit ``EFBIG``, such as
  ``RLIMIT_FSIZE``, a quota ``EDQUOT``) raises ``NoRoom`` naming the path being written, after removing what was
  written of it; any other error is left as it is.

Both are ``ValueError``\\ s, which the runner (``tasks/__main__.py``, ``DATA_ERRORS``) prints as one line.
"""

from __future__ import annotations

import errno
import os
import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

#: errno of a write that ran out of room: a full disk, a file size limit (RLIMIT_FSIZE, the file system's), a quota.
NO_ROOM = frozenset({errno.ENOSPC, errno.EFBIG, errno.EDQUOT})
#: Errors that say something other than "this file is damaged": they keep their own type and message.
NOT_DAMAGE = (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError, MemoryError)
#: Folders of a stage's persisted state beside its output folder: ``<data>/<stage><suffix>``.
STATE_SUFFIXES = ("_cache", "_index")
TASKS = Path(__file__).resolve().parents[1]
#: The project's data and models folders (params.yaml ``paths``): a stage is read from a path below one of them only.
DATA_FOLDER, MODELS_FOLDER = "data", "models"
#: ``<models>/<folder>`` -> the stage that writes it (dvc.yaml outs).
MODEL_FOLDERS = {"tokenizer": "tokenizer", "pretrained": "pretrain", "checkpoints": "pretrain", "export": "release"}
NOT_STAGES = {"common", "config", "tracking", "__init__", "__main__"}


class DamagedFile(ValueError):
    """A file that exists but cannot be read; ``path`` is the file, the message says how to recover."""

    def __init__(self, path: Path | str, err: BaseException) -> None:
        self.path = Path(path)
        super().__init__(f"{path}: cannot be read (damaged or truncated? {one_line(err)}); {recovery(path)}")

    def __reduce__(self):  # from a worker process: the message as it was
        return _damaged_file, (str(self), self.path)


class NoRoom(OSError, ValueError):
    """A write that ran out of room (``errno`` kept); ``filename`` is the path being written."""

    def __str__(self) -> str:
        return str(self.strerror)


def one_line(err: BaseException) -> str:
    """The error's message on one line (an empty message gives the exception's type)."""
    return " ".join(str(err).split()) or type(err).__name__


def producing_stage(path: Path | str) -> str | None:
    """The stage that writes ``path``, from the path below the project's data or models folder only: a folder
    named ``data`` (``paths.data``) followed by a stage's output or state folder (``<data>/<stage>``,
    ``<data>/<stage>_cache`` / ``_index``), or one named ``models`` followed by a model folder (``MODEL_FOLDERS``:
    ``<models>/tokenizer``, ``pretrained``, ``checkpoints``, ``export``). A folder named after a stage anywhere else
    in an absolute path (``/srv/pretrain/raw/x.parquet``, ``/home/me/report/corpora/x.jsonl``) is a user's source:
    None. The innermost such ``data`` / ``models`` folder that gives a stage counts (a source named ``data``,
    ``<data>/ingest/data/``, is ingest's). A data folder configured under another name is not recognised (None:
    "replace it")."""
    parts = Path(path).parts[:-1]
    for i in reversed(range(len(parts) - 1)):
        if parts[i] == DATA_FOLDER:
            stage = _stage_named(parts[i + 1])
        elif parts[i] == MODELS_FOLDER:
            stage = MODEL_FOLDERS.get(parts[i + 1])
        else:
            continue
        if stage is not None:
            return stage
    return None


def recovery(path: Path | str) -> str:
    """How to get a readable ``path`` back, in words."""
    stage = producing_stage(path)
    if stage is None:
        return "replace it with a readable copy and rerun"
    return f"rerun `dvc repro --single-item {stage}` to write it again"


@contextmanager
def reading(path: Path | str) -> Iterator[None]:
    """Turn a failure to read ``path`` in the block into ``DamagedFile`` (but ``NOT_DAMAGE`` errors)."""
    try:
        yield
    except (DamagedFile, *NOT_DAMAGE):
        raise
    except Exception as err:
        if isinstance(err, (OSError, ValueError)) or _is_arrow_error(err):
            raise DamagedFile(path, err) from err
        raise


@contextmanager
def writing(path: Path | str, named: Path | str | None = None) -> Iterator[None]:
    """Turn a write of ``path`` in the block that runs out of room (``NO_ROOM``) into ``NoRoom`` naming it (or
    ``named``; by default a temporary ``.<name>.tmp``, file or folder, anywhere in ``path`` is named as the
    ``<name>`` it is renamed to), and remove what the block wrote at ``path`` (a file, or a folder written whole),
    so nothing partial is left."""
    try:
        yield
    except NoRoom:
        _remove(Path(path))
        raise
    except OSError as err:
        if err.errno not in NO_ROOM:
            raise
        _remove(Path(path))
        named = final_path(path) if named is None else named
        raise NoRoom(err.errno, f"{named}: cannot be written: {os.strerror(err.errno)} (free space on its file "
                                f"system or raise the file size limit, then rerun)", str(named)) from err


def _damaged_file(message: str, path: Path) -> DamagedFile:
    err = DamagedFile.__new__(DamagedFile)
    ValueError.__init__(err, message)
    err.path = path
    return err


def final_path(path: Path | str) -> Path:
    """``path`` with each temporary ``.<name>.tmp`` part (a file or folder written, then renamed) as ``<name>``."""
    return Path(*(part[1:-4] if part.startswith(".") and part.endswith(".tmp") and len(part) > 5 else part
                  for part in Path(path).parts))


def _stage_named(folder: str) -> str | None:
    for name in (folder, *(folder.removesuffix(s) for s in STATE_SUFFIXES if folder.endswith(s))):
        if name not in NOT_STAGES and ((TASKS / f"{name}.py").is_file() or (TASKS / name / "__init__.py").is_file()):
            return name
    return None


def _is_arrow_error(err: BaseException) -> bool:
    lib = sys.modules.get("pyarrow.lib")
    return lib is not None and isinstance(err, lib.ArrowException)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    elif path.exists() or path.is_symlink():
        path.unlink(missing_ok=True)
