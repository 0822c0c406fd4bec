"""The recall of each detector on the planted copies (``tasks.leakage.planted.variants``): which lexical methods
find each copy (``found_by``; on a Ray worker with ``engine: ray``, ``found_by_on_ray``), and the ``planted``
metrics: per variant and detector, copies found with Clopper-Pearson 95% intervals
(``tasks.common.stats.clopper_pearson``), and per family the strongest variant up to which recall stays >= 0.95.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from tasks.common.matching import minhash
from tasks.common.runtime import raycluster
from tasks.common.stats import clopper_pearson
from tasks.config.cluster import RayParams
from tasks.config.corpus.leakage import LexicalParams, PlantedParams
from tasks.leakage.lexical.detectors import DETECTORS, detect
from tasks.leakage.lexical.words import Side, make_side
from tasks.leakage.planted.variants import FAMILIES, Plant, variants

__all__ = ["DETECTORS", "counts", "found_by", "found_by_on_ray", "recall_entry", "strongest_at", "summarize"]


def found_by(plants: list[Plant], evals: Side, cfg: LexicalParams, tokenize) -> list[set[str]]:
    """For each planted doc, the lexical audit methods that match it to the eval doc it was built from
    (``tokenize``: text -> the detectors' words)."""
    side = make_side([tokenize(p.text) for p in plants], minhash.WordHashes())
    methods: dict[tuple[int, int], set[str]] = {}
    for i, j, method, _, _ in detect(side, evals, cfg, owner=np.array([p.eval_index for p in plants], np.int64)):
        methods.setdefault((i, j), set()).add(method)
    return [methods.get((i, p.eval_index), set()) for i, p in enumerate(plants)]


def found_by_on_ray(
    plants: list[Plant], evals: Side, cfg: LexicalParams, tokenize, ray_cfg: RayParams
) -> list[set[str]]:
    """``found_by`` in one Ray task (``engine: ray``): the copies' words and MinHash signatures and the detectors'
    n-gram arrays (up to ``worker_memory_mib``), ~0.9 GB at the default eval sets, are built on a worker, not
    on the driver; the same result. Raises ``ImportError`` without Ray."""
    ray = raycluster.connect(ray_cfg)
    return ray.get(_found_by.remote(plants, evals, cfg, tokenize))


@raycluster.remote
def _found_by(plants: list[Plant], evals: Side, cfg: LexicalParams, tokenize) -> list[set[str]]:
    return found_by(plants, evals, cfg, tokenize)


def recall_entry(hits: list[bool]) -> dict:
    """``found``, ``recall`` and its Clopper-Pearson 95% interval."""
    found, n = sum(hits), len(hits)
    low, high = clopper_pearson(found, n)
    return {"found": found, "n": n, "recall": round(found / n, 6) if n else None, "ci_low": low, "ci_high": high}


def counts(n: int, found: int) -> dict:
    """``planted = found + missed``, recall and miss rate (``None`` without planted docs), rounded to 1e-6."""
    rate = (lambda x: round(x / n, 6)) if n else (lambda x: None)
    return {"planted": n, "found": found, "missed": n - found, "recall": rate(found), "miss_rate": rate(n - found)}


def summarize(
    plants: list[Plant],
    methods: list[set[str]],
    eval_ids: list[str],
    not_planted: list[str],
    detectors: tuple[str, ...],
    cfg: PlantedParams,
    max_examples: int,
    scored=None,
) -> dict:
    """The ``planted`` metrics: per variant (``variants``, in ladder order) and detector, planted copies found
    with Clopper-Pearson 95% intervals; per family the strongest variant up to which recall stays >= 0.95
    (``recall_95_up_to``); pooled counts; the first ``max_examples`` missed copies.

    The lexical detectors (and ``lexical``: any of them) are scored on every plant. ``scored`` (per plant, or
    None: all) marks the plants the semantic detector scored (a sample of eval docs, for its cost): its column
    and ``audit`` (any detector) are over those, and so are each variant's ``planted``/``found``/``missed`` and
    the pooled counts, which are the audit's.
    """
    scored = [True] * len(plants) if scored is None else [bool(x) for x in scored]
    lexical = tuple(d for d in detectors if d != "semantic")
    columns = list(detectors) + ["lexical", "audit"]
    audited = [(p, m) for p, m, s in zip(plants, methods, scored) if s]
    out = {
        "seed": cfg.seed,
        "eval_docs": len(eval_ids),
        "eval_docs_planted": len({p.eval_index for p in plants}),
        "eval_docs_audited": len({p.eval_index for p, _ in audited}),
        "not_planted": not_planted,
        "detectors": columns,
        **counts(len(audited), sum(bool(m) for _, m in audited)),
    }
    out["variants"] = {}
    for v in variants(cfg):
        if v.name in not_planted:
            continue
        mine = [(p, m, s) for p, m, s in zip(plants, methods, scored) if p.variant == v.name]
        sample = [(p, m) for p, m, s in mine if s]
        entry = {"family": v.family, "strength": v.strength, **counts(len(sample), sum(bool(m) for _, m in sample))}
        entry["ci_low"], entry["ci_high"] = clopper_pearson(entry["found"], entry["planted"])
        entry["unchanged"] = sum(p.unchanged for p, _, _ in mine)
        entry["words_changed_share"] = round(sum(p.changed for p, _, _ in mine) / len(mine), 6) if mine else None
        entry["by_detector"] = {d: recall_entry([d in m for _, m, _ in mine]) for d in lexical}
        if "semantic" in detectors:
            entry["by_detector"]["semantic"] = recall_entry(["semantic" in m for _, m in sample])
        entry["by_detector"]["lexical"] = recall_entry([bool(m & set(lexical)) for _, m, _ in mine])
        entry["by_detector"]["audit"] = recall_entry([bool(m) for _, m in sample])
        entry["found_by_method"] = dict(sorted(Counter(x for _, m, _ in mine for x in m).items()))
        out["variants"][v.name] = entry
    out["recall_95_up_to"] = strongest_at(out["variants"], 0.95)
    missed = [p for p, m in audited if not m]
    out["missed_examples"] = [{"eval_doc": eval_ids[p.eval_index], "variant": p.variant} for p in missed[:max_examples]]
    return out


def strongest_at(entries: dict[str, dict], level: float) -> dict[str, dict]:
    """Per family of the ladder and per detector (``audit`` too), the strongest variant up to which recall
    stays >= ``level`` at every step (``point``: the estimate; ``ci``: the Clopper-Pearson lower bound);
    ``None`` when its first step already falls short."""
    out: dict[str, dict] = {}
    for family in FAMILIES:
        steps = [(name, e) for name, e in entries.items() if e["family"] == family]
        if not steps:
            continue
        out[family] = {}
        for detector in steps[0][1]["by_detector"]:
            point = ci = None
            point_on = ci_on = True
            for name, e in steps:
                cell = e["by_detector"][detector]
                point_on = point_on and cell["recall"] is not None and cell["recall"] >= level
                ci_on = ci_on and cell["ci_low"] is not None and cell["ci_low"] >= level
                point = name if point_on else point
                ci = name if ci_on else ci
            out[family][detector] = {"point": point, "ci": ci}
    return out
