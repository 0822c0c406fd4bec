"""Pretraining lineage: what text a model and every model it was continued from were trained on.

A model folder's ``pretraining.json`` (written by pretrain, read by leakage) carries two lineage fields:

- ``data``: the files this run's pretraining text came from, ``[{path, md5, split}]``: ``path`` relative to the
  repo root (``data/leakage/<source>.parquet``), ``md5`` of its bytes (what DVC 3 records for a file and files
  its cache under; null when the file was not there to hash), and the ``split`` whose rows
  (``is_duplicate == false``) were trained on;
- ``lineage``: ``{status, data, unknown}`` of the model it started from (``pretrain.init_from``): ``data`` is
  that model's own ``data`` plus its ``lineage.data``, flattened (deduplicated by md5 and split, sorted), so a
  model carries its whole ancestry; ``status`` is ``none`` (from scratch or the packaged reference MiniLM: no
  earlier run of ours), ``known``, or ``unknown`` when a link cannot be established, with each reason in
  ``unknown`` (a folder without ``pretraining.json``, a record from before lineage was recorded).

A recorded file is found again by content: in the DVC cache (``<cache>/<md5[:2]>/<md5[2:]>``, DVC 3's
``.dvc/cache/files/md5`` layout) or at its path while the bytes there still have that md5.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

#: The record file in a model folder (the same name as ``tasks.common.models.encoders.PRETRAINING_RECORD``).
RECORD = "pretraining.json"
#: ``pretrain.init_from`` values that start from no earlier run of ours.
NO_LINEAGE = ("scratch", "reference")


def file_md5(path: Path) -> str:
    """Hex md5 of the bytes of ``path`` (read in 1 MiB chunks): DVC 3's hash of a file."""
    digest = hashlib.md5()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def inherited(init_from: str) -> dict:
    """The ``lineage`` field of a model started from ``init_from``: ``none`` for scratch and reference, else
    the record of the folder ``init_from`` (its ``data`` and its own lineage, flattened); ``unknown`` when the
    folder has no ``pretraining.json`` or its record has no lineage fields, or its lineage is unknown."""
    if init_from in NO_LINEAGE:
        return {"status": "none", "data": [], "unknown": []}
    path = Path(init_from) / RECORD
    if not path.is_file():
        return {"status": "unknown", "data": [], "unknown": [f"{path}: missing (a model of unknown pretraining)"]}
    record = json.loads(path.read_text(encoding="utf-8"))
    if "data" not in record or "lineage" not in record:
        return {"status": "unknown", "data": [], "unknown": [f"{path}: records no pretraining data files"]}
    parent = record["lineage"]
    data = flatten(list(record["data"]) + list(parent["data"]))
    unknown = list(parent["unknown"])
    return {"status": "unknown" if unknown else "known", "data": data, "unknown": unknown}


def flatten(entries: list[dict]) -> list[dict]:
    """``entries`` without repeats of one (md5, split), sorted by (path, md5, split); the first path is kept. An
    entry without md5 is kept once per (path, split)."""
    seen: dict[tuple[str, str], dict] = {}
    for entry in entries:
        key = (entry["md5"] or f"path:{entry['path']}", entry["split"])
        seen.setdefault(key, {k: entry[k] for k in ("path", "md5", "split")})
    return sorted(seen.values(), key=lambda e: (e["path"], e["md5"] or "", e["split"]))


def resolve(entry: dict, cache: Path | None) -> Path | None:
    """Where the bytes of a recorded file are now: the DVC cache's copy, else ``entry["path"]`` if its md5 is
    still ``entry["md5"]``; ``None`` when neither (an edited or deleted file that DVC never cached) or when no
    md5 was recorded."""
    md5 = entry["md5"]
    if md5 is None:
        return None
    if cache is not None:
        cached = Path(cache) / md5[:2] / md5[2:]
        if cached.is_file():
            return cached
    path = Path(entry["path"])
    if path.is_file() and file_md5(path) == md5:
        return path
    return None
