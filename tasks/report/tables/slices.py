"""Slice tables: every fine-tuning arm a claim names, and every baseline, scored on parts of the test set.

Per task (cls, ner), one table of the headline metric (cls: macro-F1 over the classes present in the slice) on
all test items, on the clean items (no 13-gram or
near duplicate shared with the train split) and the overlapping ones (the contamination analysis of GPT-3,
Brown et al. 2020, sec. 4), on the semantically clean items (no semantic match in the pretraining corpus: the
leakage stage's embedding detector, ``tasks.report.claims.arms.items.semantically_flagged``; the column is absent
when that detector did not run), and on length terciles (words per doc); and one table of per-class F1 (cls) or
per-entity-type F1 (ner). Each cell is a point estimate with the hierarchical bootstrap CI over the arm's seeds
and the cell's items (``tasks.report.stats.bootstrap``), ``slice_resamples`` draws.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tasks.report.claims.arms.items import Items, metric_function, read_test_items, semantically_flagged, with_items
from tasks.report.claims.arms.resolve import resolve
from tasks.report.claims.estimation import counts_estimate
from tasks.report.claims.grammar import MALFORMED, ClaimsFile, Metrics, NotRun, finetune_run
from tasks.report.claims.tasks_run import finetune_tasks, task_headline
from tasks.report.stats.estimates import Estimate, StatsConfig


@dataclass(frozen=True)
class SliceTable:
    """One task's slices: ``rows[arm][column]`` estimates with ``sizes[column]`` items (or gold entities for a
    ner type), for the headline ``metric`` (``columns``) and the per-label F1 (``label_columns``)."""

    task: str
    module: str  # the task's kind: cls | ner (Metrics.task_module)
    metric: str
    columns: tuple[str, ...]
    label_columns: tuple[str, ...]
    sizes: dict[str, int]
    rows: dict[str, dict[str, Estimate]]


def slice_tables(claims: ClaimsFile, metrics: Metrics, cfg: StatsConfig) -> dict[str, SliceTable | str]:
    """``{task: table}``, or ``{task: "not computed: <why>"}`` when its predictions or items are missing."""
    out: dict[str, SliceTable | str] = {}
    for task in finetune_tasks(metrics):
        try:
            metric = task_headline(metrics, task)
            out[task] = task_table(task, metric, arm_keys(claims, task, metrics), metrics, cfg)
        except NotRun as why:
            out[task] = f"not computed: {why}"
        except MALFORMED as err:
            out[task] = f"not computed: malformed input: {type(err).__name__}: {err}"
    return out


def arm_keys(claims: ClaimsFile, task: str, metrics: Metrics) -> list[str]:
    """Run keys of the task's arms that a claim names, then every baseline, in first-mention order."""
    keys = []
    for claim in claims.claims:
        for ref in (claim.treatment, claim.baseline):
            found = finetune_run(ref, metrics)
            if found and found[0] == task:
                keys.append(found[1])
    runs = (metrics.optional(f"finetune/{task}") or {}).get("runs") or {}
    keys += sorted(k for k in runs if k.startswith("baseline/"))
    return list(dict.fromkeys(k for k in keys if k in runs))


def task_table(task: str, metric: str, keys: list[str], metrics: Metrics, cfg: StatsConfig) -> SliceTable:
    """The slice table of one task over the arms ``keys``; raises ``NotRun`` when there is nothing to slice."""
    if not keys or metrics.predictions is None:
        raise NotRun(f"no {task} arms with predictions")
    arms = {
        key: with_items(resolve(f"finetune/{task}/{key}", metric, metrics), task, metric, metrics, "all").items
        for key in keys
    }
    first = next(iter(arms.values()))
    for key, items in arms.items():
        if items.doc_ids != first.doc_ids:
            raise NotRun(f"{key} scored other test items than {next(iter(arms))}")
    masks = item_masks(first.doc_ids, read_test_items(metrics.predictions, task), semantic_matches(metrics))
    labels = gold_labels(first)
    rows = {}
    for key, items in arms.items():
        cells = {
            name: cell(present_classes(items.subset(mask).headline, items.module), metric_function(metric), cfg)
            for name, mask in masks.items()
        }
        for label in labels:
            counts, function = items.label_metric(label)
            cells[label] = cell(counts, function, cfg)
        rows[key] = cells
    sizes = {name: int(mask.sum()) for name, mask in masks.items()} | label_support(first, labels)
    return SliceTable(task, first.module, metric, tuple(masks), tuple(labels), sizes, rows)


def semantic_matches(metrics: Metrics) -> set[str] | None:
    """Eval docs with a semantic match in the pretraining corpus, or None when the detector did not run."""
    try:
        return semantically_flagged(metrics)
    except NotRun:
        return None


#: The slice of test items without a semantic match in the pretraining corpus.
SEMANTICALLY_CLEAN = "semantically clean"


def item_masks(
    doc_ids: tuple[str, ...], test_items: dict[str, dict], semantic: set[str] | None = None
) -> dict[str, np.ndarray]:
    """Boolean masks over the test items: all, clean, overlapping, semantically clean (when ``semantic``, the
    semantically matched doc ids, is given), and length terciles by words per doc."""
    missing = [d for d in doc_ids if d not in test_items]
    if missing:
        raise NotRun(f"test_items.jsonl lacks {len(missing)} predicted docs (e.g. {missing[0]!r})")
    overlap = np.array([bool(test_items[d]["train_overlap"]) for d in doc_ids])
    words = np.array([int(test_items[d]["n_words"]) for d in doc_ids])
    low, high = (int(v) for v in np.quantile(words, [1 / 3, 2 / 3]))
    semantic_clean = {} if semantic is None else {SEMANTICALLY_CLEAN: np.array([d not in semantic for d in doc_ids])}
    return {
        "all": np.ones(len(doc_ids), dtype=bool),
        "clean": ~overlap,
        "overlapping": overlap,
        **semantic_clean,
        f"<= {low} words": words <= low,
        f"{low + 1}-{high} words": (words > low) & (words <= high),
        f"> {high} words": words > high,
    }


def gold_labels(items: Items) -> list[str]:
    """The classes (cls) or the entity types present in the gold test tags (ner)."""
    if items.module == "cls":
        return list(items.labels)
    return [t for t in items.labels if items.counts[0, :, 3 * (1 + items.labels.index(t)) + 2].sum() > 0]


def label_support(items: Items, labels: list[str]) -> dict[str, int]:
    """Gold test docs per class (cls) or gold test entities per type (ner)."""
    if items.module == "cls":
        tp_fn = items.counts[0].sum(axis=0)
        n = len(items.labels)
        return {label: int(tp_fn[i] + tp_fn[2 * n + i]) for i, label in enumerate(labels)}
    return {t: int(items.counts[0, :, 3 * (1 + items.labels.index(t)) + 2].sum()) for t in labels}


def present_classes(counts: np.ndarray, module: str) -> np.ndarray:
    """cls counts (n_seeds, n_items, 3C) restricted to the classes with gold items in this slice, so that its
    macro-F1 averages over the classes it has (sklearn ``labels=`` the present ones); otherwise a slice without a
    class would be capped at (C-1)/C. ner counts are returned unchanged (micro F1 has no such cap)."""
    if module != "cls":
        return counts
    n = counts.shape[-1] // 3
    gold = counts[0, :, :n].sum(axis=0) + counts[0, :, 2 * n :].sum(axis=0)
    keep = np.flatnonzero(gold > 0)
    return np.concatenate([counts[..., keep], counts[..., n + keep], counts[..., 2 * n + keep]], axis=-1)


def cell(counts: np.ndarray, function, cfg: StatsConfig) -> Estimate:
    """Point estimate and hierarchical bootstrap CI of ``function`` on ``counts`` (n_seeds, n_items, K);
    an empty slice gives a ``nan`` estimate."""
    if counts.shape[1] == 0:
        return Estimate(float("nan"), float("nan"), float("nan"), 0, "empty slice")
    return counts_estimate(counts, function, cfg, cfg.slice_resamples)
