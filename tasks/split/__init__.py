"""split: assign every row a split by group, so no author, template or near-duplicate cluster straddles two.

Reads ``data/dedup/<source>.parquet`` and writes ``data/split/<source>.parquet`` (+ ``split``, ``split_group``),
``data/split/manifest.tsv`` (``doc_id<TAB>split``, sorted by doc_id), ``data/split/dropped.jsonl`` (docs the
ledger drops or a test cap leaves out, empty otherwise) and ``data/split_ledger/ledger.parquet`` (``ledger.py``).

Groups. A row's unit of assignment is its *component*: union-find over the row's ``(source, group)`` and its
dedup ``cluster_id``, across every source of the same role. Two task sources that share a near-duplicate
cluster therefore split it the same way. Across roles the split names differ (train/dev/test vs
train/heldout) and nothing is coupled on purpose: with BBC in both roles, every ``bbc_news`` dev/test
document has a twin in ``bbc_news_pretrain``. Forcing those twins into the pretraining ``heldout`` slice
would make that slice ~20 % of BBC instead of 2 % and would hide the contamination the ``leakage`` stage
exists to measure and remove; so cross-role clusters are only counted here (``cross_role_clusters``). Every
output row carries its component's name in ``split_group`` (an opaque key, equal for exactly the rows that were
assigned together): test documents that share one share a group or a near-duplicate cluster, so the report
resamples them together.

Sizes (``split.task_sizing``, ``targets.py``). ``study``, the default: a task source that tasks read gets a train
split of ``ceil(train_pool_factor x`` the largest ``max_train_docs`` of their recipes) kept documents (the pool
every fine-tuning seed draws its training docs from), dev keeps its ``task_fractions.dev`` share, and every other
document is test; a source that ships its own split keeps its dev and test and moves the shipped train documents
the pool does not take to test. ``fractions``: ``task_fractions`` as given. Pretraining sources always use
``pretrain_fractions``.

Assignment (``assignment: fill``, the default). Each component gets the key ``blake2b(seed, name)`` where
``name`` is the smallest node label in the component, a pure function of the seed and the group itself.
Within each stratum (source, and label when ``stratify_by_label``), components are visited in key order and
placed by first-fit into the first evaluation split (dev, test / heldout) whose document target
``round(fraction * docs)`` they still fit; everything else is train. Hence evaluation splits never overshoot,
small groups fill the gaps, and fractions are met in documents: groups ``[0,0,0,0,0,1,1,1,2,4]`` at 80/10/10
give exactly 8/1/1 docs for every seed (only the 1-doc groups 2 and 4 fit a 1-doc target). Under ``study``
sizing dev and test are filled so first, then the stratum's share of the train pool (in kept documents), and
test takes the rest: the pool is met exactly too where small groups can fill it.

Stability, honestly. No scheme can both meet document targets exactly and never move a group when one is
added (groups A, B of 1 doc split 50/50; add C of 2 docs: exact 2/2 needs A and B together). What ``fill``
guarantees: the order never depends on other groups; when a new group lands in train and the rounded
targets are unchanged, no existing group moves; otherwise the change is local to the split boundaries it
touches (measured in tests/split/test_split.py). ``assignment: hash`` places each component alone: it goes to the
split whose cumulative-fraction interval contains ``key / 2**64``, so adding groups never moves another one,
and fractions hold only in expectation. In hash mode a component is named after its smallest *group* label
(cluster labels only for groupless rows), so a doc added to a group does not rename, hence re-key, the group;
a new cluster linking two groups still makes one component with one key. Neither mode remembers the previous
run: ``split.ledger: true`` (hash only) does, and guarantees that no document ever moves (``ledger.py``: the
ledger file, the rule for new docs, and the docs dropped as ``bridges_splits``). ``moved_since_previous`` in the
metrics is checked against the previous ledger file and must be 0.

Temporal mode: components are ordered by their earliest date (``meta[date_meta_key]``, ISO 8601; ties by
key) and filled in order, oldest to train, newest to the last split. A source whose rows all carry
``meta[own_split_meta_key]`` keeps that split; the stage verifies it (and any group linked to it).

Metrics: per source docs, groups and label counts per split and the achieved document fractions; per task
(``task_counts.py``) its source's kept docs per split, train pool and (token classification) gold entities;
``groups_in_multiple_splits`` counts every ``(source, group)`` and every ``cluster_id`` seen in more than one
split of a role. It must be 0 (bridged components aside: ``straddling_exempt``); otherwise the stage raises
``SplitLeakError``. Every input row is in ``docs`` or ``dropped`` of its source (``docs_in``): dropped are the
ledger's ``bridges_splits`` and, under a test cap (``split.max_test_docs``), ``beyond_max_test_docs``.

Memory: the driver reads only the ``REQUIRED_COLUMNS`` of the corpus; the texts and token lists are streamed
from each input file to its output, a block of rows at a time (``outputs``).

Modules: ``assign`` (components to splits), ``targets`` (what each split of a stratum may hold: fractions or
the study's train pool), ``task_counts`` (docs and gold entities per task, shipped train moved to test),
``ledger`` (the split ledger), ``outputs`` (the facts read, the output shards streamed).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from scipy import sparse
from scipy.sparse.csgraph import connected_components

from tasks.config.corpus.split import TASK_SPLITS, SplitParams
from tasks.config.paths import Paths
from tasks.split.assign import SPLITS_OF_ROLE, SplitLeakError, assign_splits
from tasks.split.ledger import (
    apply_ledger,
    empty_ledger,
    extend_ledger,
    holds_ledger_history,
    label_columns,
    ledger_metrics,
    ledger_path,
    read_ledger,
    replace_ledger,
    write_dropped,
)
from tasks.split.outputs import REQUIRED_COLUMNS, read_facts, source_files, write_shards
from tasks.split.targets import LEFT_OUT
from tasks.split.task_counts import entity_counts, shipped_train_to_test, study_lines, task_metrics

LEFT_OUT_REASON = "beyond_max_test_docs"
__all__ = ["SplitLeakError", "run"]


def run(cfg: SplitParams, paths: Paths, log: Any) -> dict:
    """Split every source under ``<data>/dedup``, write ``<data>/split`` and the ledger; returns the metrics dict.

    Raises ``FileNotFoundError`` when there is no input, ``ValueError`` for a bad row or ledger (file and doc_id
    named) and ``SplitLeakError`` when a group would straddle splits outside a bridged component, or a ledger doc
    moved.
    """
    files = source_files(paths.stage_data("dedup"))
    rows = working_rows(read_facts(files), None if cfg.mode == "temporal" else cfg.own_split_meta_key)
    check_unique_ids(rows)
    rows["component"] = merge_groups(rows, groups_first=cfg.assignment == "hash")
    rows["split"] = assign_splits(rows, cfg)
    placed, left_out = leave_out(rows, cfg)
    path = ledger_path(paths)
    previous = read_ledger(path) if cfg.ledger else None
    log.info(ledger_note(cfg.ledger, previous, path))
    for source, why in cfg.unused_test_caps().items():
        log.info(f"split: warning: split.max_test_docs.{source} caps nothing: {why}")
    base = empty_ledger() if previous is None else previous
    kept, dropped, bridged = apply_ledger(placed, base, path)
    if len(left_out):
        dropped = pd.concat([left_out, dropped] if len(dropped) else [left_out]).sort_values(
            "doc_id", ignore_index=True
        )
    in_bridge = kept["component"].isin(bridged)
    straddling, exempt = count_straddling(kept[~in_bridge]), count_straddling(kept[in_bridge])
    if straddling:
        raise SplitLeakError(f"{len(straddling)} group(s) in more than one split, e.g. {straddling[:5]}")
    check_task_splits_filled(kept, cfg)
    out_dir = paths.stage_data("split")
    write_outputs(files, len(rows), kept, out_dir)
    write_dropped(dropped, out_dir / "dropped.jsonl")
    if cfg.ledger or not holds_ledger_history(path):
        ledger = extend_ledger(base, kept)
        moved = replace_ledger(ledger, previous, out_dir / "manifest.tsv", path, cfg.ledger)
    else:  # a run without the ledger must not erase the history that scheduled runs keep docs in place with
        ledger, moved = None, None
    log.info(
        f"split: {len(kept)} rows from {len(files)} source(s) -> {out_dir}; {len(placed) - len(kept)} dropped "
        f"(bridges_splits), {len(left_out)} left out ({LEFT_OUT_REASON}), {len(bridged)} bridged component(s)"
    )
    metrics = split_metrics(rows, kept, dropped, len(straddling), cross_role_clusters(kept))
    tasks, moved_to_test = task_metrics(kept, entity_counts(files), cfg), shipped_train_to_test(kept, cfg)
    for line in study_lines(tasks, moved_to_test, cfg):
        log.info(line)
    return (
        metrics
        | ledger_metrics(cfg.ledger, previous, placed, kept, ledger, bridged, exempt)
        | {"moved_since_previous": moved, "task_sizing": cfg.task_sizing, "train_pool_factor": cfg.train_pool_factor}
        | {"tasks": tasks, "shipped_train_to_test": moved_to_test}
    )


def leave_out(rows: pd.DataFrame, cfg: SplitParams) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The rows the assignment placed, and those it left out past a test cap (``split.max_test_docs``) as dropped
    rows (``source, doc_id, reason, detail``)."""
    out = (rows["split"] == LEFT_OUT).to_numpy()
    caps = cfg.test_caps()
    detail = [f"test of {source} is capped at {caps.get(source)} kept docs" for source in rows["source"][out]]
    left = pd.DataFrame(
        {"source": rows["source"][out], "doc_id": rows["doc_id"][out], "reason": LEFT_OUT_REASON, "detail": detail}
    )
    return rows[~out], left


def ledger_note(enabled: bool, previous: pd.DataFrame | None, path: Path) -> str:
    """The log line saying whether the ledger was read and used."""
    if not enabled and holds_ledger_history(path):
        return f"split: split.ledger is false: {path}, written by ledger runs, is neither used nor changed"
    if not enabled:
        return f"split: split.ledger is false: {path} is not read, and is rewritten with this run's splits"
    if previous is None:
        return f"split: no ledger at {path}: every component gets its from-scratch split; this run starts it"
    return f"split: ledger {path} found and used: its {len(previous)} docs keep their splits"


def working_rows(tables: dict[str, pa.Table], meta_key: str | None = None) -> pd.DataFrame:
    """Every source's rows one after another (index = position), ``REQUIRED_COLUMNS`` only, strings as Python
    objects. Without the text and token columns a row filter copies little (pyarrow ``take`` of the texts was
    ~7 s per run at 100k docs), and object strings are iterated ~20x faster than pandas' Arrow-backed ``str``.
    ``meta_key``: the only meta key read (the shipped split's; None: every meta kept, temporal mode reads the
    dates): a meta that cannot hold it (``assign.meta_value``'s test, in Arrow) is null, not a Python string. A
    ``group`` or ``cluster_id`` equal to the row's ``doc_id`` is that string object, not a copy of it."""
    frames = []
    for table in tables.values():
        if meta_key is not None:
            table = table.set_column(table.schema.get_field_index("meta"), "meta", may_hold(table["meta"], meta_key))
        frames.append(table.select(list(REQUIRED_COLUMNS)).to_pandas())
    rows = pd.concat(frames, ignore_index=True).astype({c: object for c in REQUIRED_COLUMNS if c != "is_duplicate"})
    ids = rows["doc_id"].to_numpy()
    for column in ("group", "cluster_id"):  # a doc's own group and a singleton's cluster: its doc_id's object
        values = rows[column].to_numpy()
        rows[column] = np.where(values == ids, ids, values)
    return rows


def may_hold(meta: pa.ChunkedArray, key: str) -> pa.ChunkedArray:
    """``meta`` where it holds ``key`` as text or any backslash (a JSON escape could spell it), else null: the
    values ``assign.meta_value`` parses; it answers None for the others, as for a null."""
    maybe = pc.or_(pc.match_substring(meta, key), pc.match_substring(meta, "\\"))
    return pc.if_else(pc.fill_null(maybe, False), meta, pa.scalar(None, meta.type))


def check_unique_ids(rows: pd.DataFrame) -> None:
    """Raise ``ValueError`` naming the first doc_id that occurs twice (the manifest is keyed by doc_id)."""
    dupes = rows["doc_id"][rows["doc_id"].duplicated()]
    if len(dupes):
        raise ValueError(f"doc_id {dupes.iloc[0]!r} occurs more than once across data/dedup sources")


def merge_groups(rows: pd.DataFrame, groups_first: bool = False) -> np.ndarray:
    """Component name per row (``(rows,)`` object): union of ``(role, source, group)`` and ``(role, cluster_id)``
    labels.

    Groups are source-local names (author "smith" of two sources is not one person); clusters are global
    but merged only within a role (see the module docstring). A row without a group is its cluster alone.
    The name is the smallest label, with ``groups_first`` the smallest group label (hash mode: a new doc's
    cluster id does not rename its group). The labels (``ledger.label_columns``, as ``assign.row_labels`` writes
    them) get integer codes in that order, the row's (cluster, group) pairs are the edges of a graph whose
    connected components (scipy) are the unions, and each component is named by its smallest code: the root a
    union-find by that priority keeps, without a Python dict of every label.
    """
    cluster, group = label_columns(rows)
    has_group = group.notna().to_numpy()
    codes, names = pd.factorize(
        np.concatenate([cluster.to_numpy(object), group.to_numpy(object)[has_group]]), sort=True
    )
    names = np.asarray(names, dtype=object)
    if groups_first:  # group labels before cluster labels, each in label order
        order = np.lexsort((np.arange(len(names)), [name.split("|", 2)[1] == "cluster" for name in names]))
        rank = np.empty(len(names), np.int64)
        rank[order] = np.arange(len(names))
        codes, names = rank[codes], names[order]
    own, linked = codes[: len(rows)], codes[len(rows) :]
    edges = sparse.coo_matrix((np.ones(len(linked), np.int8), (own[has_group], linked)), shape=(len(names),) * 2)
    _, component = connected_components(edges, directed=False)
    root = np.full(component.max(initial=-1) + 1, len(names), np.int64)
    np.minimum.at(root, component, np.arange(len(names)))
    return names[root[component[own]]]


def count_straddling(rows: pd.DataFrame) -> list[str]:
    """Labels of raw groups and clusters found in more than one split of a role (independent re-check), sorted
    by role and label within each kind."""
    has_group = rows["group"].notna()
    checks = (
        ("group", rows[has_group], [f"{s}|{g}" for s, g in zip(rows["source"][has_group], rows["group"][has_group])]),
        ("cluster", rows, list(rows["cluster_id"])),
    )
    straddling = []
    for kind, part, labels in checks:
        table = pd.DataFrame({"role": list(part["role"]), "label": labels, "split": list(part["split"])})
        splits = table.groupby(["role", "label"], sort=False)["split"].nunique(dropna=False)
        straddling += [f"{kind}:{role}:{label}" for role, label in sorted(splits.index[splits.to_numpy() > 1])]
    return straddling


def cross_role_clusters(rows: pd.DataFrame) -> int:
    """Clusters with rows in both roles (left to the leakage stage, which removes eval twins)."""
    roles = rows.groupby("cluster_id")["role"].nunique()
    return int((roles > 1).sum())


def check_task_splits_filled(rows: pd.DataFrame, cfg: SplitParams) -> None:
    """Raise ``ValueError`` naming the source and the split when a task source has no kept (non-duplicate)
    document in a split that ``split.task_fractions`` gives a share (a pooled source under ``study`` sizing:
    train, test, and dev when its fraction is not 0): fine-tuning needs train, dev and test, and an empty one
    would only fail stages later."""
    tasks, pools = rows[rows["role"] == "task"], cfg.train_pools()
    for source, part in tasks.groupby("source", sort=True):
        kept = part[~part["is_duplicate"].astype(bool)]
        for split in TASK_SPLITS:
            needed = cfg.task_fractions.get(split, 0.0) > 0 or (source in pools and split != "dev")
            if needed and not (kept["split"] == split).any():
                sizing = (
                    f"study sizing: a train pool of {pools[source]} docs, split.train_pool_factor "
                    f"{cfg.train_pool_factor} x max_train_docs; lower either or set split.task_sizing: fractions"
                    if source in pools
                    else f"split.task_fractions={cfg.task_fractions}: give the source a larger share"
                )
                raise ValueError(
                    f"source {source}: split {split!r} is empty ({len(kept)} kept docs in "
                    f"{kept['component'].nunique()} groups, {sizing}), or add documents"
                )


def write_outputs(files: dict[str, Path], total: int, rows: pd.DataFrame, out_dir: Path) -> None:
    """``<source>.parquet`` (input row order + ``split`` and ``split_group``, the row's ``component``; rows not in
    ``rows`` left out; streamed from the input files, ``outputs.write_shards``) and ``manifest.tsv`` sorted by
    doc_id. ``rows``' index is the row's position in ``files`` one after another (``working_rows``, ``total``
    rows), so a source's kept rows are found by position, not by looking doc_ids up."""
    out_dir.mkdir(parents=True, exist_ok=True)
    split, group = np.full(total, None, dtype=object), np.full(total, None, dtype=object)
    split[rows.index.to_numpy()] = rows["split"].to_numpy()
    group[rows.index.to_numpy()] = rows["component"].to_numpy()
    write_shards(files, split, group, out_dir)
    manifest = rows[["doc_id", "split"]].sort_values("doc_id")
    manifest.to_csv(out_dir / "manifest.tsv", sep="\t", index=False, lineterminator="\n")


def split_metrics(
    rows: pd.DataFrame, kept: pd.DataFrame, dropped: pd.DataFrame, straddling: int, cross_role: int
) -> dict:
    """Per source: docs in, docs dropped by reason, and per split docs, kept docs, groups, labels and achieved
    document fractions (of the docs out)."""
    sources = {}
    for source, rows_in in rows.groupby("source", sort=True):
        part = kept[kept["source"] == source]
        splits = SPLITS_OF_ROLE[rows_in["role"].iloc[0]]
        by_split = {s: part[part["split"] == s] for s in splits}
        sources[source] = {
            "docs_in": len(rows_in),
            "dropped": dict(sorted(Counter(dropped.loc[dropped["source"] == source, "reason"]).items())),
            "docs": {s: len(p) for s, p in by_split.items()},
            "docs_kept": {s: int((~p["is_duplicate"]).sum()) for s, p in by_split.items()},
            "groups": {s: int(p["component"].nunique()) for s, p in by_split.items()},
            "fraction_achieved": {s: round(len(p) / max(len(part), 1), 6) for s, p in by_split.items()},
            "labels": {s: label_counts(p) for s, p in by_split.items()},
        }
    return {"sources": sources, "groups_in_multiple_splits": straddling, "cross_role_clusters": cross_role}


def label_counts(part: pd.DataFrame) -> dict[str, int]:
    """``{label: docs}`` of one split, sorted by label (empty for unlabelled sources)."""
    return {str(k): int(v) for k, v in sorted(Counter(part["label"].dropna()).items())}
