"""I/O failures as one-line errors naming the file (``tasks/CONTRACTS.md``, bad input).

- ``reading(path)``: a file that exists but cannot be read (a truncated or damaged Parquet, JSONL, JSON or Arrow
  file: pyarrow's ``ArrowInvalid``, ``OSError``, a JSON or UTF-8 decode error; a safetensors or ``torch.save``
  file: ``SafetensorError``, ``torch.load``'s ``RuntimeError`` or a truncated pickle; ``reading_folder`` for a model
  or tokenizer folder names the file in it that is damaged) raises ``DamagedFile``, a ``ValueError``
  that names the file and how to get it back: rerun the stage that writes it, found from the path's folder
  (``<data>/ingest/...`` -> ``dvc repro --single-item ingest``). A missing file stays ``FileNotFoundError``.
- ``writing(path)``: a write that runs out of room (a full disk ``ENOSPC``, a size limit ``EFBIG``, such as
  ``RLIMIT_FSIZE``, a quota ``EDQUOT``) raises ``NoRoom`` naming the path being written, after removing what was
  written of it; any other error is left as it is.

Both are ``ValueError``\\ s, which the runner (``tasks/__main__.py``, ``DATA_ERRORS``) prints as one line.
"""

from __future__ import annotations

import errno
import json
import os
import pickle
import shutil
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

#: errno of a write that ran out of room: a full disk, a file size limit (RLIMIT_FSIZE, the file system's), a quota.
NO_ROOM = frozenset({errno.ENOSPC, errno.EFBIG, errno.EDQUOT})
#: Errors that say something other than "this file is damaged": they keep their own type and message.
NOT_DAMAGE = (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError, MemoryError)
#: Folders of a stage's persisted state beside its output folder: ``<data>/<stage><suffix>``.
STATE_SUFFIXES = ("_cache", "_index")
TASKS = Path(__file__).resolve().parents[2]
#: The project's data and models folders (params.yaml ``paths``): a stage is read from a path below one of them only.
DATA_FOLDER, MODELS_FOLDER = "data", "models"
#: ``<models>/<folder>`` -> the stage that writes it (dvc.yaml outs).
MODEL_FOLDERS = {"tokenizer": "tokenizer", "pretrained": "pretrain", "checkpoints": "pretrain", "export": "release"}
NOT_STAGES = {"common", "config", "tracking", "__init__", "__main__"}


class DamagedFile(ValueError):
    """A file that exists but cannot be read; ``path`` is the file, the message says how to recover (``recover``,
    else ``recovery(path)``)."""

    def __init__(self, path: Path | str, err: BaseException, recover: str | None = None) -> None:
        self.path = Path(path)
        super().__init__(f"{path}: cannot be read (damaged or truncated? {one_line(err)}); {recover or recovery(path)}")

    # from a worker process: the message as it was
    def __reduce__(self) -> tuple[Callable[[str, Path], DamagedFile], tuple[str, Path]]:
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
def reading(path: Path | str, recover: str | None = None) -> Iterator[None]:
    """Turn a failure to read ``path`` in the block into ``DamagedFile`` (but ``NOT_DAMAGE`` errors): an
    ``OSError``, ``ValueError`` (JSON, UTF-8), pyarrow's errors, safetensors' ``SafetensorError``, a truncated
    pickle (``EOFError``, ``UnpicklingError``) and ``torch.load``'s ``RuntimeError`` for a damaged zip archive.
    ``recover``: how to get it back, when rerunning the stage that writes it is not (``recovery``)."""
    try:
        yield
    except (DamagedFile, *NOT_DAMAGE):
        raise
    except Exception as err:
        if is_damage(err):
            raise DamagedFile(path, err, recover) from err
        raise


@contextmanager
def reading_folder(folder: Path | str, recover: str | None = None) -> Iterator[None]:
    """``reading(folder)`` for a folder read whole (a model, a tokenizer: ``from_pretrained``), whose error may not
    say which file failed: the message names the first file in it that does not parse (``damaged_in``), else the
    folder."""
    try:
        with reading(folder, recover):
            yield
    except DamagedFile as err:
        bad = damaged_in(Path(folder))
        if bad is None:
            raise
        raise DamagedFile(bad, err.__cause__ or err, recover) from err.__cause__


def damaged_in(folder: Path) -> Path | None:
    """The first ``*.json`` file in ``folder`` that is not JSON, or ``*.safetensors`` file whose header or size is
    not a safetensors file's; None when every one reads (called only after a read failed: it parses them all)."""
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            json.loads(path.read_text(encoding="utf-8"))
        except ValueError:
            return path
    for path in sorted(folder.glob("*.safetensors")) if folder.is_dir() else []:
        from safetensors import safe_open

        try:
            with safe_open(str(path), "np"):
                pass
        except Exception as err:
            if is_damage(err):
                return path
            raise
    return None


def is_damage(err: BaseException) -> bool:
    """Whether ``err``, raised reading a file, says the file is damaged or truncated (see ``reading``)."""
    if isinstance(err, NOT_DAMAGE):
        return False
    if isinstance(err, (OSError, ValueError, EOFError, pickle.UnpicklingError)) or _is_arrow_error(err):
        return True
    if type(err).__name__ == "SafetensorError":  # safetensors' Rust error: no Python base to test for
        return True
    return isinstance(err, RuntimeError) and "PytorchStreamReader" in str(err)  # torch.load of a damaged zip


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
        raise NoRoom(
            err.errno,
            f"{named}: cannot be written: {os.strerror(err.errno)} (free space on its file "
            f"system or raise the file size limit, then rerun)",
            str(named),
        ) from err


def _damaged_file(message: str, path: Path) -> DamagedFile:
    err = DamagedFile.__new__(DamagedFile)
    ValueError.__init__(err, message)
    err.path = path
    return err


def final_path(path: Path | str) -> Path:
    """``path`` with each temporary ``.<name>.tmp`` part (a file or folder written, then renamed) as ``<name>``."""
    return Path(
        *(
            part[1:-4] if part.startswith(".") and part.endswith(".tmp") and len(part) > 5 else part
            for part in Path(path).parts
        )
    )


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
