"""Test items behind a fine-tuning arm: the finetune stage's prediction files read back as per-item counts.

An arm ``finetune/<task>/<run key>`` has one ``data/finetune/<task>/<run key>/seed<k>.test.jsonl`` per seed
(``doc_id, gold, pred``). Each item becomes a vector of sufficient statistics in the layouts of
``tasks.report.stats.bootstrap`` (cls: per-class tp/fp/fn; ner: entity tp, predicted, gold per sentence, read with
seqeval's strict IOB2 entities, as the finetune stage scores them), so the claim table can resample test
items. Every seed's metric recomputed from its counts must equal the value in ``metrics/finetune/<task>.json``
(to 1e-9): predictions that disagree with the metrics make the claim ``not run``, never a silent number.
``data/finetune/<task>/test_items.jsonl`` gives each item's slices (``n_words``, ``train_overlap``), and
``data/split/<source>.parquet`` each item's resampling cluster (``split_group``: items that share a same-story
group or a dedup cluster are resampled together, ``with_clusters``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from functools import cache, lru_cache, partial
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
from seqeval.scheme import IOB2, Entities

from tasks.report.claims.grammar import Metrics, NotRun, Sample, dig
from tasks.report.claims.switches import Off, off
from tasks.report.claims.tasks_run import task_module
from tasks.report.stats import bootstrap as bs

#: claim metric -> (task, function of summed counts)
METRICS = {
    "test_macro_f1": ("cls", bs.macro_f1_from_counts),
    "test_accuracy": ("cls", bs.accuracy_from_counts),
    "test_entity_f1": ("ner", bs.micro_f1_from_counts),
    "test_entity_precision": ("ner", bs.precision_from_counts),
    "test_entity_recall": ("ner", bs.recall_from_counts),
}


@dataclass(frozen=True)
class Items:
    """Per-item counts of one arm of a task of kind ``module`` (``cls``: classification and pair
    classification; ``ner``: token classification): ``counts`` (n_seeds, n_items, K) over ``doc_ids`` (sorted),
    ``seeds``; ``labels`` are the class names (cls) or entity types (ner) of the count layout; ``pretrain`` the
    pretraining seed of each run (row) when runs of several are stacked (``tasks.report.claims.arms.nested_seeds``)."""

    module: str
    counts: np.ndarray
    doc_ids: tuple[str, ...]
    seeds: tuple[int, ...]
    labels: tuple[str, ...]
    pretrain: tuple[str, ...] | None = None  # None: one pretraining seed
    clusters: np.ndarray | None = None  # (n_items,) group of each item, resampled together; None: each its own

    def subset(self, keep: np.ndarray) -> Items:
        """The same arm on the items where ``keep`` (n_items,) is true."""
        ids = tuple(d for d, k in zip(self.doc_ids, keep, strict=True) if k)
        clusters = None if self.clusters is None else self.clusters[keep]
        return Items(self.module, self.counts[:, keep], ids, self.seeds, self.labels, self.pretrain, clusters)

    @property
    def headline(self) -> np.ndarray:
        """The counts the headline metrics read: cls every column, ner the micro ``[tp, n_pred, n_gold]``."""
        return self.counts if self.module == "cls" else self.counts[..., :3]

    def label_metric(self, label: str):
        """``(counts, function)`` of one class's F1 (cls) or one entity type's F1 (ner), for the slice tables."""
        index = self.labels.index(label)
        if self.module == "cls":
            return self.counts, partial(bs.class_f1_from_counts, c=index)
        return self.counts[..., 3 * (1 + index) : 3 * (2 + index)], bs.micro_f1_from_counts


def metric_function(metric: str):
    """The function of summed counts behind claim metric ``metric``; raises ``NotRun`` for another metric."""
    if metric not in METRICS:
        raise NotRun(f"metric {metric!r} has no item-level form (known: {sorted(METRICS)})")
    return METRICS[metric][1]


def load_items(folder: Path, task: str, run_key: str, seeds: list[int], labels: list[str], module: str) -> Items:
    """Counts of run ``run_key`` for every seed, from ``<folder>/<task>/<run_key>/seed<k>.test.jsonl``.

    ``module`` is the task's kind (``cls`` | ``ner``, ``Metrics.task_module``). ``labels`` are the cls class
    names (ignored for ner, whose types come from the gold and predicted tags). Read once per version of the
    files (``file_versions`` keys the memo): claims, gates and tables read the same arm many times.
    Raises ``NotRun`` naming the file when one is missing, and when seeds disagree on the test doc ids.
    """
    paths = [Path(folder) / task / run_key / f"seed{seed}.test.jsonl" for seed in seeds]
    return _counted_items(file_versions(paths), tuple(seeds), tuple(labels), module, f"{folder}/{task}/{run_key}")


def file_versions(paths: list[Path]) -> tuple[tuple[str, int, int], ...]:
    """``(path, mtime_ns, size)`` of each prediction file, the key of a memo of what was read from them; raises
    ``NotRun`` naming a missing file."""
    out = []
    for path in paths:
        if not path.exists():
            raise NotRun(f"{path} is missing (rerun the finetune stage)")
        stat = path.stat()
        out.append((str(path), stat.st_mtime_ns, stat.st_size))
    return tuple(out)


@lru_cache(maxsize=512)
def _counted_items(
    files: tuple[tuple[str, int, int], ...], seeds: tuple[int, ...], labels: tuple[str, ...], module: str, where: str
) -> Items:
    records = [read_predictions(Path(path)) for path, _, _ in files]
    doc_ids = tuple(r["doc_id"] for r in records[0])
    for seed, recs in zip(seeds, records, strict=True):
        if tuple(r["doc_id"] for r in recs) != doc_ids:
            raise NotRun(f"{where}: seed {seed} predicted other test docs than seed {seeds[0]}")
    if module == "cls":
        counts = np.stack([cls_counts(recs, list(labels)) for recs in records])
        return Items(module, counts, doc_ids, seeds, labels)
    entities = [(_entities(recs, "gold"), _entities(recs, "pred")) for recs in records]
    types = tuple(sorted({e[3] for gold, pred in entities for e in gold | pred}))
    counts = np.stack([ner_counts(len(recs), *found, types) for recs, found in zip(records, entities, strict=True)])
    return Items(module, counts, doc_ids, seeds, types)


def read_predictions(path: Path) -> list[dict]:
    """The records of one prediction file, sorted by doc_id; raises ``NotRun`` naming a missing file."""
    if not path.exists():
        raise NotRun(f"{path} is missing (rerun the finetune stage)")
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return sorted(rows, key=lambda r: r["doc_id"])


def cls_counts(recs: list[dict], labels: list[str]) -> np.ndarray:
    """(n_items, 3C) per-class tp/fp/fn of classification records (``bootstrap.class_counts``)."""
    index = {name: i for i, name in enumerate(labels)}
    try:
        gold = np.array([index[r["gold"]] for r in recs])
        pred = np.array([index[r["pred"]] for r in recs])
    except KeyError as err:
        raise NotRun(f"prediction label {err} is not one of the task's labels {labels}") from None
    return bs.class_counts(gold, pred, len(labels))


#: An entity ``(sentence, start, end, type)``.
Entity = tuple[int, int, int, str]


def _entities(recs: list[dict], side: str) -> set[Entity]:
    """Strict IOB2 entities ``(sentence, start, end, type)`` of the ``gold`` or ``pred`` tags (seqeval)."""
    found = Entities([r[side] for r in recs], IOB2, False).entities
    return {(i, e.start, e.end, e.tag) for i, sent in enumerate(found) for e in sent}


def ner_counts(n_items: int, gold: set[Entity], pred: set[Entity], types: tuple[str, ...]) -> np.ndarray:
    """(n_items, 3 + 3T): micro ``[tp, n_pred, n_gold]`` per sentence, then the same per entity type, of the
    ``gold`` and ``pred`` entities of ``n_items`` sentences (``_entities``).

    An entity is a true positive when a predicted entity has the same sentence, span and type (seqeval strict).
    """
    out = np.zeros((n_items, 3 * (1 + len(types))), dtype=np.int64)
    column = {t: 3 * (1 + i) for i, t in enumerate(types)}
    for offset, entities in ((0, gold & pred), (1, pred), (2, gold)):
        for sent, _, _, tag in entities:
            out[sent, offset] += 1
            out[sent, column[tag] + offset] += 1
    return out


def check_against_metrics(items: Items, metric: str, per_seed: dict[int, float], where: str) -> None:
    """Raise ``NotRun`` unless every seed's metric from the counts equals the metrics file's (to 1e-9)."""
    function = metric_function(metric)
    for seed, counts in zip(items.seeds, items.headline, strict=True):
        recomputed = float(function(counts.sum(axis=0)))
        if abs(recomputed - per_seed[seed]) > 1e-9:
            raise NotRun(
                f"{where}: seed {seed} {metric} from the predictions is {recomputed:.6f}, the metrics "
                f"say {per_seed[seed]:.6f} (stale predictions?)"
            )


def read_test_items(folder: Path, task: str) -> dict[str, dict]:
    """``{doc_id: {n_words, train_overlap}}`` of ``<folder>/<task>/test_items.jsonl``; ``NotRun`` if missing."""
    path = Path(folder) / task / "test_items.jsonl"
    if not path.exists():
        raise NotRun(f"{path} is missing (rerun the finetune stage)")
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return {r["doc_id"]: r for r in rows}


def with_items(sample: Sample, task: str, metric: str, metrics: Metrics, item_slice: str) -> Sample:
    """``sample`` (a finetune arm) with its test items, restricted to ``item_slice`` (``all``, ``clean``:
    no text shared with the train split, ``overlapping``, ``semantically_clean``: no semantic match in the
    pretraining corpus); its per-seed values are then those of the slice.

    Unchanged when ``metrics.predictions`` is None. Raises ``NotRun`` when a file is missing, the predictions
    disagree with the metrics, or the slice is empty.
    """
    if metrics.predictions is None:
        return sample
    labels = list(metrics.get(f"finetune/{task}").get("labels") or [])
    items = load_items(
        metrics.predictions, task, sample.run_key, [int(u) for u in sample.units], labels, task_module(metrics, task)
    )
    check_against_metrics(
        items,
        metric,
        dict(zip(items.seeds, sample.values, strict=True)),
        f"{metrics.predictions}/{task}/{sample.run_key}",
    )
    if item_slice == "semantically_clean":
        matched = semantically_flagged(metrics)
        keep = np.array([d not in matched for d in items.doc_ids])
        if not keep.any():
            raise NotRun(f"{task} test set has no {item_slice} items")
        items = items.subset(keep)
    elif item_slice != "all":
        overlap = read_test_items(metrics.predictions, task)
        keep = np.array([bool(overlap[d]["train_overlap"]) == (item_slice == "overlapping") for d in items.doc_ids])
        if not keep.any():
            raise NotRun(f"{task} test set has no {item_slice} items")
        items = items.subset(keep)
    function = metric_function(metric)
    values = tuple(float(function(c.sum(axis=0))) for c in items.headline)
    return replace(sample, values=values, items=with_clusters(items, metrics, task))


def with_clusters(items: Items, metrics: Metrics, task: str) -> Items:
    """``items`` with the resampling cluster of each test item: its ``split_group`` in
    ``<data>/split/<source>.parquet`` (the split stage's union of a doc's same-story group and its dedup cluster;
    tasks/CONTRACTS.md, split), as int labels; an item the file does not list is its own cluster. Unchanged when
    the file or the task's ``source`` is absent (each item its own cluster)."""
    source = metrics.get(f"finetune/{task}").get("source")
    path = Path(metrics.predictions).parent / "split" / f"{source}.parquet"
    groups = split_groups(path, path.stat().st_mtime_ns) if source and path.exists() else {}
    if not groups:
        return items
    names = [groups.get(doc, f"item:{doc}") for doc in items.doc_ids]
    return replace(items, clusters=np.unique(names, return_inverse=True)[1])


@cache
def split_groups(path: Path, mtime_ns: int) -> dict[str, str]:
    """``{doc_id: split_group}`` of one split-stage parquet file (read once per version: ``mtime_ns`` keys it)."""
    table = pq.read_table(path, columns=["doc_id", "split_group"])
    return dict(zip(table.column("doc_id").to_pylist(), table.column("split_group").to_pylist(), strict=True))


def semantically_flagged(metrics: Metrics) -> set[str]:
    """Eval doc ids with a semantic match in the pretraining corpus; raises ``NotRun`` when the semantic
    detector did not run."""
    semantic = dig(metrics.get("leakage"), ["semantic"], "metrics/leakage.json")
    if not semantic.get("enabled"):
        raise Off(off("leakage.semantic.enabled"))
    sets = dig(semantic, ["by_eval_set"], "metrics/leakage.json semantic")
    return {doc for entry in sets.values() for doc in entry.get("flagged_docs", [])}
