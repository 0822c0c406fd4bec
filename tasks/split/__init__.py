"""split: assign every row a split by group, so no author, template or near-duplicate cluster straddles two.

Reads ``data/dedup/<source>.parquet`` and writes ``data/split/<source>.parquet`` (+ ``split``, ``split_group``),
``data/split/manifest.tsv`` (``doc_id<TAB>split``, sorted by doc_id), ``data/split/dropped.jsonl`` (docs the
ledger drops or a test cap leaves out, empty otherwise) and ``data/split_ledger/ledger.parquet`` (``ledger.py``),
put in place last, after the shards.

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

Memory: the driver reads only the ``REQUIRED_COLUMNS`` of the corpus, a row group at a time into object columns
(one string object per distinct source, role and label); the texts and token lists are streamed from each input
file to its output, a block of rows at a time (``outputs``). Labels, components, groups and clusters are counted
as integer codes, not per-row strings or frames of them; a component is an ``int64`` code a row and its name an
Arrow string (``components``). The shards are written after ``settle``, when the rows' frames are freed and each
row is two codes (``outputs.Placement``); freed pages are given back before. Only then is the ledger that
``settle`` staged and checked renamed into place (``ledger.commit_ledger``): a run interrupted before leaves the
previous ledger, so its rerun reads what an uninterrupted run would have read.

Modules: ``components`` (the unions of groups and clusters, coded), ``assign`` (components to splits),
``targets`` (what each split of a stratum may hold: fractions or the study's train pool), ``task_counts`` (docs and
gold entities per task, shipped train moved to test), ``ledger`` (the split ledger), ``straddle`` (the check that no
group or cluster straddles, and the cross-role count), ``outputs`` (the facts read, the output shards streamed).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from tasks.common.runtime.heap import give_back_freed_memory, map_large_blocks
from tasks.config.corpus.split import TASK_SPLITS, SplitParams
from tasks.config.paths import Paths
from tasks.split.assign import SPLITS_OF_ROLE, SplitLeakError, assign_splits
from tasks.split.components import merge_groups
from tasks.split.ledger import (
    apply_ledger,
    commit_ledger,
    empty_ledger,
    extend_ledger,
    holds_ledger_history,
    ledger_metrics,
    ledger_path,
    read_ledger,
    stage_ledger,
    write_dropped,
)
from tasks.split.outputs import REQUIRED_COLUMNS, Placement, read_facts, source_files, write_shards
from tasks.split.straddle import count_straddling, cross_role_clusters
from tasks.split.targets import LEFT_OUT
from tasks.split.task_counts import entity_counts, shipped_train_to_test, study_lines, task_metrics

LEFT_OUT_REASON = "beyond_max_test_docs"
#: the columns of few distinct values (a source's name, its role, a label)
SHARED_COLUMNS = ("source", "role", "label")
__all__ = ["SplitLeakError", "run"]


def run(cfg: SplitParams, paths: Paths, log: Any) -> dict:
    """Split every source under ``<data>/dedup``, write ``<data>/split`` and then the ledger; returns the metrics
    dict. The ledger ``settle`` staged is renamed into place only once the shards are written: a run that fails or
    is killed before leaves the previous ledger (or none) as it was.

    Raises ``FileNotFoundError`` when there is no input, ``ValueError`` for a bad row or ledger (file and doc_id
    named) and ``SplitLeakError`` when a group would straddle splits outside a bridged component, or a ledger doc
    moved (then no shard is written).
    """
    map_large_blocks()  # row-sized numpy temporaries given back as they are freed, not kept in glibc's heap
    files = source_files(paths.stage_data("dedup"))
    metrics, placement, staged = settle(files, cfg, paths, log)
    give_back_freed_memory()  # under the shard writes' own peak (blocks of texts), all the assignment freed
    write_shards(files, placement, paths.stage_data("split"))
    if staged is not None:
        commit_ledger(staged, ledger_path(paths))
    return metrics


def settle(files: dict[str, Path], cfg: SplitParams, paths: Paths, log: Any) -> tuple[dict, Placement, Path | None]:
    """Everything but the shards: the assignment, the ledger overlay, the checks, ``manifest.tsv`` and
    ``dropped.jsonl`` written, the new ledger staged beside the old one and checked (``ledger.stage_ledger``: no doc
    moved, else ``SplitLeakError``), and the metrics. Returns them, the placement of every input row
    (``outputs.Placement``: the rows' frames are freed on return, so the shard writes hold codes only) and the
    staged ledger for ``run`` to put in place after the shards (None: a ledger-off run left the history as it was)."""
    rows = working_rows(read_facts(files), None if cfg.mode == "temporal" else cfg.own_split_meta_key)
    give_back_freed_memory()  # the facts' Arrow pages, not reused by Python's objects
    check_unique_ids(rows)
    rows["component"], names = merge_groups(rows, cfg.assignment == "hash")
    give_back_freed_memory()  # the labels' encodings (~250 B a row), under the assignment's own peak
    rows["split"] = assign_splits(rows, cfg, names)
    give_back_freed_memory()  # each step's freed pages, kept by Arrow's pool and glibc, would add to the next peak
    inputs, total = docs_in(rows), len(rows)
    placed, left_out = leave_out(rows, cfg)
    del rows  # a copy of its rows, placed or not, would be held to the end: ~90 B a row
    path = ledger_path(paths)
    previous = read_ledger(path) if cfg.ledger else None
    log.info(ledger_note(cfg.ledger, previous, path))
    for source, why in cfg.unused_test_caps().items():
        log.info(f"split: warning: split.max_test_docs.{source} caps nothing: {why}")
    base = empty_ledger() if previous is None else previous
    kept, dropped, bridged = apply_ledger(placed, base, path, names)
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
    write_manifest(kept, out_dir)
    write_dropped(dropped, out_dir / "dropped.jsonl")
    if cfg.ledger or not holds_ledger_history(path):
        ledger = extend_ledger(base, kept)
        staged, moved = stage_ledger(ledger, previous, out_dir / "manifest.tsv", path, cfg.ledger)
    else:  # a run without the ledger must not erase the history that scheduled runs keep docs in place with
        ledger, moved, staged = None, None, None
    give_back_freed_memory()
    log.info(
        f"split: {len(kept)} rows from {len(files)} source(s) -> {out_dir}; {len(placed) - len(kept)} dropped "
        f"(bridges_splits), {len(left_out)} left out ({LEFT_OUT_REASON}), {len(bridged)} bridged component(s)"
    )
    metrics = split_metrics(inputs, kept, dropped, len(straddling), cross_role_clusters(kept))
    tasks, moved_to_test = task_metrics(kept, entity_counts(files), cfg), shipped_train_to_test(kept, cfg)
    for line in study_lines(tasks, moved_to_test, cfg):
        log.info(line)
    bridged_names = names.take(pa.array(bridged, pa.int64())).to_pylist()  # codes sort as their names
    metrics = (
        metrics
        | ledger_metrics(cfg.ledger, previous, placed, kept, ledger, bridged_names, exempt)
        | {"moved_since_previous": moved, "task_sizing": cfg.task_sizing, "train_pool_factor": cfg.train_pool_factor}
        | {"tasks": tasks, "shipped_train_to_test": moved_to_test}
    )
    return metrics, placement(kept, total, names), staged


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


def working_rows(tables: Iterable[pa.Table], meta_key: str | None = None) -> pd.DataFrame:
    """The rows of ``tables`` (``read_facts``: every source's row groups) one after another (index = position),
    each table converted before the next is read, ``REQUIRED_COLUMNS`` only, strings as Python
    objects. Without the text and token columns a row filter copies little (pyarrow ``take`` of the texts was
    ~7 s per run at 100k docs), and object strings are iterated ~20x faster than pandas' Arrow-backed ``str``.
    ``meta_key``: the only meta key read (the shipped split's; None: every meta kept, temporal mode reads the
    dates): a meta that cannot hold it (``assign.meta_value``'s test, in Arrow) is null, not a Python string. A
    ``group`` or ``cluster_id`` equal to the row's ``doc_id`` is that string object, not a copy of it, and the
    ``SHARED_COLUMNS`` hold one string object per distinct value."""
    return pd.concat([object_frame(table, meta_key) for table in tables], ignore_index=True)


def object_frame(table: pa.Table, meta_key: str | None) -> pd.DataFrame:
    """One source's ``REQUIRED_COLUMNS`` as object columns (``working_rows``); the ``SHARED_COLUMNS`` through an
    Arrow dictionary, so that a value is one string object, not one a row (~60 B a row each)."""
    if meta_key is not None:
        table = table.set_column(table.schema.get_field_index("meta"), "meta", may_hold(table["meta"], meta_key))
    table = table.select(list(REQUIRED_COLUMNS))
    for column in SHARED_COLUMNS:
        if pa.types.is_string(table.schema.field(column).type):
            encoded = pc.dictionary_encode(table[column])
            table = table.set_column(table.schema.get_field_index(column), column, encoded)
    frame = table.to_pandas().astype({c: object for c in REQUIRED_COLUMNS if c != "is_duplicate"})
    ids = frame["doc_id"].to_numpy()
    for column in ("group", "cluster_id"):  # a doc's own group and a singleton's cluster: its doc_id's object
        values = frame[column].to_numpy()
        # object dtype: a column set from an object array would be Arrow-backed strings, a copy of every value
        frame[column] = pd.Series(np.where(values == ids, ids, values), index=frame.index, dtype=object)
    return frame


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


def write_manifest(rows: pd.DataFrame, out_dir: Path) -> None:
    """``<out_dir>/manifest.tsv``: ``doc_id<TAB>split`` of ``rows``, sorted by doc_id."""
    out_dir.mkdir(parents=True, exist_ok=True)
    manifest = rows[["doc_id", "split"]].sort_values("doc_id")
    manifest.to_csv(out_dir / "manifest.tsv", sep="\t", index=False, lineterminator="\n")


def placement(rows: pd.DataFrame, total: int, names: pa.Array) -> Placement:
    """Where each of the ``total`` input rows goes (``outputs.Placement``): ``rows``' index is the row's position
    in ``files`` one after another (``working_rows``), so a source's kept rows are found by position, not by
    looking doc_ids up; its ``split`` as a code (-1: not written, as a null split), its ``component`` (a code of
    ``names``) as ``split_group``."""
    codes, splits = pd.factorize(rows["split"].to_numpy(object), sort=True)
    split, group = np.full(total, -1, np.int8), np.zeros(total, np.int64)
    split[rows.index.to_numpy()], group[rows.index.to_numpy()] = codes, rows["component"].to_numpy(np.int64)
    return Placement(split, pa.array(list(splits), pa.string()), group, names)


def docs_in(rows: pd.DataFrame) -> dict[str, tuple[int, str]]:
    """``{source: (rows, role of its first row)}``, sorted by source: what ``split_metrics`` needs of the input."""
    first = rows.groupby("source", sort=True)["role"].agg(["size", "first"])
    return {source: (int(size), role) for source, size, role in zip(first.index, first["size"], first["first"])}


def split_metrics(
    inputs: dict[str, tuple[int, str]], kept: pd.DataFrame, dropped: pd.DataFrame, straddling: int, cross_role: int
) -> dict:
    """Per source (``inputs``: ``docs_in``): docs in, docs dropped by reason, and per split docs, kept docs,
    groups, labels and achieved document fractions (of the docs out)."""
    sources = {}
    source_of, split_of = kept["source"].to_numpy(object), kept["split"].to_numpy(object)
    groups, _ = pd.factorize(kept["component"])  # masks and codes: no copy of a source's or a split's rows
    for source, (docs, role) in inputs.items():
        part = source_of == source
        by_split = {s: part & (split_of == s) for s in SPLITS_OF_ROLE[role]}
        sources[source] = {
            "docs_in": docs,
            "dropped": dict(sorted(Counter(dropped.loc[dropped["source"] == source, "reason"]).items())),
            "docs": {s: int(m.sum()) for s, m in by_split.items()},
            "docs_kept": {s: int((~kept["is_duplicate"][m]).sum()) for s, m in by_split.items()},
            "groups": {s: len(np.unique(groups[m][groups[m] >= 0])) for s, m in by_split.items()},
            "fraction_achieved": {s: round(int(m.sum()) / max(int(part.sum()), 1), 6) for s, m in by_split.items()},
            "labels": {s: label_counts(kept["label"][m]) for s, m in by_split.items()},
        }
    return {"sources": sources, "groups_in_multiple_splits": straddling, "cross_role_clusters": cross_role}


def label_counts(labels: pd.Series) -> dict[str, int]:
    """``{label: docs}`` of one split's labels, sorted by label (empty for unlabelled sources)."""
    return {str(k): int(v) for k, v in sorted(Counter(labels.dropna()).items())}
