"""Leakage across runs: today's evaluation sets against everything the model pretraining starts from has seen.

Each run audits its own corpus. A model carried over from an earlier run (``pretrain.init_from``: a folder)
has also trained on that run's pretraining text, and on its ancestors'. If a split later moved one of those
documents into dev or test, today's scores on it are contaminated, and today's audit cannot see it. So the
audit reads the ``init_from`` folder's ``pretraining.json`` (``tasks.common.pretraining_texts``: the md5 of each text
file of its pretraining and of its ancestors', flattened), finds every file again by md5 (DVC cache, or the
recorded path while its bytes still match), and runs the same lexical detectors as on today's corpus
(``lexical.detectors.detect``: word n-grams, whole-doc equality of short texts, MinHash over docs and passages) on the
rows that were trained on. A matched eval doc is handled as today's pretraining contamination is, by
``pretrain_action``, except that the earlier model cannot unlearn its text: ``remove`` takes the eval doc out
of its evaluation set (``removed.jsonl`` reason ``leakage:lineage``), ``flag`` keeps it with ``leak_flag``.

A lineage that cannot be established (no ``pretraining.json``, a record without lineage fields, a recorded md5
found nowhere) is ``status: unknown``; the report then refuses the claims that need a clean evaluation set
(``not resolvable: unknown pretraining lineage``). ``scratch`` and the packaged reference MiniLM (a named
external model) have ``status: none``: nothing of ours to audit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from tasks.common import pretraining_texts
from tasks.common.deps import require_declared
from tasks.common.files.ioerrors import reading
from tasks.common.matching import minhash
from tasks.config.corpus.leakage import LeakageParams
from tasks.leakage.lexical.detectors import detect
from tasks.leakage.lexical.words import Side, make_side

#: Columns of ``data/leakage/lineage.parquet``: one row per (lineage file, trained doc, eval doc, method).
LINEAGE_COLUMNS = ["file_md5", "train_doc", "eval_doc", "method", "score", "span", "eval_source", "eval_split"]
#: Columns a lineage file must have (the leakage stage's own output contract).
LINEAGE_FILE_COLUMNS = ("doc_id", "text", "split", "is_duplicate")


@dataclass(frozen=True)
class LineageAudit:
    """The audit's result: ``pairs`` (``LINEAGE_COLUMNS``, sorted), ``removed`` (``{eval doc_id: removal
    record}`` under ``pretrain_action: remove``), ``marked`` (eval doc ids kept with ``leak_flag`` under
    ``flag``) and ``metrics`` (the ``lineage`` section of ``metrics/leakage.json``)."""

    pairs: pd.DataFrame
    removed: dict[str, dict]
    marked: set[str]
    metrics: dict


def dvc_cache(root: Path) -> Path | None:
    """DVC's local cache of md5-addressed files (``.dvc/cache/files/md5`` unless ``cache.dir`` says otherwise)
    of the repo at ``root``; ``None`` when ``root`` is not a DVC repo."""
    from dvc.exceptions import NotDvcRepoError
    from dvc.repo import Repo

    try:
        with Repo(str(root)) as repo:
            return Path(repo.cache.local.path)
    except NotDvcRepoError:
        return None


def audit(
    cfg: LeakageParams,
    paths,
    eval_frame: pd.DataFrame,
    evals: Side,
    words: Callable[[str], list[str]],
    cache: Path | None,
) -> LineageAudit:
    """Audit ``eval_frame`` (kept task dev/test rows; ``evals`` their side) against the lineage of
    ``cfg.pretrain_init_from``, with ``words`` (the audit's tokenizer) and DVC cache folder ``cache``.

    Raises ``ValueError`` when the ``init_from`` folder is not a dep of the leakage stage in dvc.yaml (checked
    only when this run is the DVC stage, ``require_declared``), or when a lineage file lacks a contract column.
    """
    init_from = cfg.pretrain_init_from
    if init_from not in pretraining_texts.NO_LINEAGE:
        require_declared("leakage", paths.stage_data("leakage"), {"pretrain.init_from": init_from})
    record = pretraining_texts.inherited(init_from)
    unresolved, files, records = [], [], []
    for entry in record["data"]:
        where = pretraining_texts.resolve(entry, cache)
        if where is None:
            unresolved.append(
                f"{entry['path']}: no md5 recorded (not there when that model was pretrained)"
                if entry["md5"] is None
                else f"{entry['path']} (md5 {entry['md5']}): neither in the DVC cache nor at its path"
            )
            continue
        rows = trained_rows(where, entry)
        trains = make_side([words(t) for t in rows["text"]], minhash.WordHashes())
        for i, j, method, score, span in detect(trains, evals, cfg.lexical):
            ev = eval_frame.iloc[j]
            records.append(
                (
                    entry["md5"],
                    rows["doc_id"].iloc[i],
                    ev["doc_id"],
                    method,
                    round(float(score), 6),
                    span,
                    ev["source"],
                    ev["split"],
                )
            )
        files.append({**entry, "found": "cache" if where != Path(entry["path"]) else "path", "docs": len(rows)})
    pairs = pd.DataFrame.from_records(records, columns=LINEAGE_COLUMNS)
    pairs = pairs.sort_values(["eval_doc", "file_md5", "train_doc", "method"], ignore_index=True)
    removed, marked = actions(pairs, cfg.pretrain_action)
    unknown = record["unknown"] + unresolved
    status = "none" if init_from in pretraining_texts.NO_LINEAGE else "unknown" if unknown else "known"
    metrics = lineage_metrics(
        status, init_from, unknown, files, len(unresolved), pairs, eval_frame, cfg.pretrain_action
    )
    return LineageAudit(pairs, removed, marked, metrics)


def trained_rows(path: Path, entry: dict) -> pd.DataFrame:
    """The rows of a lineage file that were trained on: ``split == entry["split"]``, ``is_duplicate == false``
    (index reset). Raises ``ValueError`` naming the recorded path when a column is missing, or ``path`` when it
    cannot be read (``ioerrors.DamagedFile``)."""
    with reading(path):
        frame = pd.read_parquet(path)
    missing = [c for c in LINEAGE_FILE_COLUMNS if c not in frame.columns]
    if missing:
        raise ValueError(f"{entry['path']} (md5 {entry['md5']}, read from {path}): missing column(s) {missing}")
    keep = (frame["split"] == entry["split"]) & ~frame["is_duplicate"].astype(bool)
    return frame[keep].reset_index(drop=True)


def actions(pairs: pd.DataFrame, action: str) -> tuple[dict[str, dict], set[str]]:
    """``(removed, marked)``: every matched eval doc as a removal record (``action == "remove"``: doc_id,
    source, reason ``leakage:lineage``, methods, lineage_docs ``<file md5>:<doc_id>``) or as a marked doc id."""
    if action != "remove":
        return {}, set(pairs["eval_doc"])
    removed = {}
    for doc_id, part in pairs.groupby("eval_doc", sort=True):
        removed[doc_id] = {
            "doc_id": doc_id,
            "source": part["eval_source"].iloc[0],
            "reason": "leakage:lineage",
            "methods": sorted(set(part["method"])),
            "lineage_docs": sorted(set(part["file_md5"] + ":" + part["train_doc"])),
        }
    return removed, set()


def lineage_metrics(
    status: str,
    init_from: str,
    unknown: list[str],
    files: list[dict],
    unresolved: int,
    pairs: pd.DataFrame,
    eval_frame: pd.DataFrame,
    action: str,
) -> dict:
    """The ``lineage`` section: ``status`` (none | known | unknown) and why unknown, ``init_from``, the files
    checked (path, md5, split, found in ``cache`` or at its ``path``, trained docs) and how many were found
    nowhere (``files_unresolved``), ``action``, and per eval set ``<source>/<split>`` its ``docs``, the
    ``flagged`` ones (a match in the lineage) and their ``rate``, plus the flagged doc ids and pairs per method."""
    eval_sets = {}
    for (source, split), part in eval_frame.groupby(["source", "split"], sort=True):
        hit = sorted(set(part["doc_id"]) & set(pairs["eval_doc"]))
        eval_sets[f"{source}/{split}"] = {
            "docs": len(part),
            "flagged": len(hit),
            "rate": round(len(hit) / len(part), 6),
            "flagged_docs": hit,
        }
    methods = {m: int(n) for m, n in pairs["method"].value_counts().sort_index().items()}
    return {
        "status": status,
        "init_from": init_from,
        "unknown": unknown,
        "files_checked": files,
        "files_unresolved": unresolved,
        "action": action,
        "eval_sets": eval_sets,
        "pairs_by_method": methods,
    }
