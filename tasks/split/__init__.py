"""split: assign every row a split by group, so no author, template or near-duplicate cluster straddles two.

Reads ``data/dedup/<source>.parquet`` and writes ``data/split/<source>.parquet`` (+ ``split``) and
``data/split/manifest.tsv`` (``doc_id<TAB>split``, sorted by doc_id).

Groups. A row's unit of assignment is its *component*: union-find over the row's ``(source, group)`` and its
dedup ``cluster_id``, across every source of the same role. Two task sources that share a near-duplicate
cluster therefore split it the same way. Across roles the split names differ (train/dev/test vs
train/heldout) and nothing is coupled on purpose: with BBC in both roles, every ``bbc_news`` dev/test
document has a twin in ``bbc_news_pretrain``. Forcing those twins into the pretraining ``heldout`` slice
would make that slice ~20 % of BBC instead of 2 % and would hide the contamination the ``leakage`` stage
exists to measure and remove; so cross-role clusters are only counted here (``cross_role_clusters``).

Assignment (``assignment: fill``, the default). Each component gets the key ``blake2b(seed, name)`` where
``name`` is the smallest node label in the component, a pure function of the seed and the group itself.
Within each stratum (source, and label when ``stratify_by_label``), components are visited in key order and
placed by first-fit into the first evaluation split (dev, test / heldout) whose document target
``round(fraction * docs)`` they still fit; everything else is train. Hence evaluation splits never overshoot,
small groups fill the gaps, and fractions are met in documents: groups ``[0,0,0,0,0,1,1,1,2,4]`` at 80/10/10
give exactly 8/1/1 docs for every seed (only the 1-doc groups 2 and 4 fit a 1-doc target).

Stability, honestly. No scheme can both meet document targets exactly and never move a group when one is
added (groups A, B of 1 doc split 50/50; add C of 2 docs: exact 2/2 needs A and B together). What ``fill``
guarantees: the order never depends on other groups; when a new group lands in train and the rounded
targets are unchanged, no existing group moves; otherwise the change is local to the split boundaries it
touches (measured in tests/test_split.py). ``assignment: hash`` is the strictly stable alternative: a
component goes to the split whose cumulative-fraction interval contains ``key / 2**64``, so adding groups
never moves another one, and fractions hold only in expectation.

Temporal mode: components are ordered by their earliest date (``meta[date_meta_key]``, ISO 8601; ties by
key) and filled in order, oldest to train, newest to the last split. A source whose rows all carry
``meta[own_split_meta_key]`` keeps that split; the stage verifies it (and any group linked to it).

Metrics: per source docs, groups and label counts per split and the achieved document fractions;
``groups_in_multiple_splits`` counts every ``(source, group)`` and every ``cluster_id`` seen in more than one
split of a role. It must be 0; otherwise the stage raises ``SplitLeakError``.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import Counter, defaultdict
from pathlib import Path

import pandas as pd

from tasks.common.parquet import read_source_frames
from tasks.common.unionfind import UnionFind
from tasks.config.split import PRETRAIN_SPLITS, TASK_SPLITS, SplitParams

REQUIRED_COLUMNS = ("doc_id", "source", "role", "label", "group", "meta", "cluster_id", "is_duplicate")
SPLITS_OF_ROLE = {"task": TASK_SPLITS, "pretrain": PRETRAIN_SPLITS}
SPLIT_ALIASES = {"validation": "dev", "valid": "dev", "val": "dev"}


class SplitLeakError(RuntimeError):
    """A group or near-duplicate cluster ended up in more than one split."""


def run(cfg: SplitParams, paths, log) -> dict:
    """Split every source under ``<data>/dedup`` and write ``<data>/split``; returns the metrics dict.

    Raises ``FileNotFoundError`` when there is no input, ``ValueError`` for a bad row (file and doc_id named)
    and ``SplitLeakError`` when a group would straddle splits.
    """
    frames = read_sources(paths.stage_data("dedup"))
    rows = pd.concat(list(frames.values()), ignore_index=True)
    check_unique_ids(rows)
    rows["component"] = merge_groups(rows)
    rows["split"] = ""
    for role, splits in SPLITS_OF_ROLE.items():
        mask = rows["role"] == role
        if mask.any():
            rows.loc[mask, "split"] = assign_role(rows[mask], cfg, role, splits)
    straddling = count_straddling(rows)
    if straddling:
        raise SplitLeakError(f"{len(straddling)} group(s) in more than one split, e.g. {straddling[:5]}")
    check_task_splits_filled(rows, cfg)
    out_dir = paths.stage_data("split")
    write_outputs(frames, rows, out_dir)
    log.info(f"split: {len(rows)} rows from {len(frames)} source(s) -> {out_dir}")
    return split_metrics(rows, len(straddling), cross_role_clusters(rows))


def read_sources(folder: Path) -> dict[str, pd.DataFrame]:
    """``{source: frame}`` for every ``<folder>/*.parquet``, sorted by file name; checks the dedup columns."""
    frames = read_source_frames(folder, REQUIRED_COLUMNS, producer="dedup")
    for file_stem, frame in frames.items():
        bad_role = sorted(set(frame["role"]) - set(SPLITS_OF_ROLE))
        if bad_role:
            raise ValueError(f"{folder / file_stem}.parquet: unknown role(s) {bad_role}; "
                             f"expected one of {sorted(SPLITS_OF_ROLE)}")
    return frames


def check_unique_ids(rows: pd.DataFrame) -> None:
    """Raise ``ValueError`` naming the first doc_id that occurs twice (the manifest is keyed by doc_id)."""
    dupes = rows["doc_id"][rows["doc_id"].duplicated()]
    if len(dupes):
        raise ValueError(f"doc_id {dupes.iloc[0]!r} occurs more than once across data/dedup sources")


def merge_groups(rows: pd.DataFrame) -> list[str]:
    """Component name per row: union of ``(role, source, group)`` and ``(role, cluster_id)`` labels.

    Groups are source-local names (author "smith" of two sources is not one person); clusters are global
    but merged only within a role (see the module docstring). A row without a group is its cluster alone.
    """
    uf = UnionFind()
    nodes = []
    for role, source, group, cluster in zip(rows["role"], rows["source"], rows["group"], rows["cluster_id"]):
        cluster_node = f"{role}|cluster|{cluster}"
        uf.find(cluster_node)
        if group is not None and not (isinstance(group, float) and math.isnan(group)):
            uf.union(cluster_node, f"{role}|group|{source}|{group}")
        nodes.append(cluster_node)
    return [uf.find(node) for node in nodes]


def group_key(seed: int, name: str) -> int:
    """64-bit ``blake2b(seed, name)``: the position of a component in the assignment order."""
    digest = hashlib.blake2b(f"{seed}\x00{name}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def assign_role(rows: pd.DataFrame, cfg: SplitParams, role: str, splits: tuple[str, ...]) -> pd.Series:
    """The split of every row of one role (index aligned with ``rows``)."""
    fractions = cfg.task_fractions if role == "task" else cfg.pretrain_fractions
    fixed = own_splits(rows, cfg.own_split_meta_key, splits)
    components = component_table(rows, cfg, role)
    chosen: dict[str, str] = fixed_components(rows, fixed)
    for _, members in components.groupby("stratum", sort=True):
        chosen.update(fill_stratum(members, chosen, fractions, splits, cfg))
    return rows["component"].map(chosen)


def own_splits(rows: pd.DataFrame, key: str, splits: tuple[str, ...]) -> pd.Series:
    """Split shipped by the source in ``meta[key]`` (NaN where the source ships none).

    A source uses its own split only when every row carries the key; raises ``ValueError`` when only some
    rows do, or a value is not a split of the role (``validation``/``valid``/``val`` count as ``dev``).
    """
    values = pd.Series(index=rows.index, dtype=object)
    for source, part in rows.groupby("source", sort=True):
        shipped = [json.loads(m or "{}").get(key) for m in part["meta"]]
        present = sum(v is not None for v in shipped)
        if present == 0:
            continue
        if present < len(shipped):
            first = part["doc_id"].iloc[[v is None for v in shipped].index(True)]
            raise ValueError(f"source {source}: meta[{key!r}] present in {present} of {len(shipped)} rows ({first})")
        mapped = [SPLIT_ALIASES.get(str(v).lower(), str(v).lower()) for v in shipped]
        bad = sorted(set(mapped) - set(splits))
        if bad:
            raise ValueError(f"source {source}: meta[{key!r}] values {bad} are not among {list(splits)}")
        values[part.index] = mapped
    return values


def fixed_components(rows: pd.DataFrame, fixed: pd.Series) -> dict[str, str]:
    """``{component: split}`` for components containing rows with a shipped split.

    Raises ``SplitLeakError`` when one component holds rows of different shipped splits (the source's own
    split lets a group or near-duplicate cluster straddle).
    """
    chosen: dict[str, str] = {}
    known = fixed.notna()
    for component, split_values in fixed[known].groupby(rows["component"][known], sort=True):
        distinct = sorted(set(split_values))
        if len(distinct) > 1:
            raise SplitLeakError(f"shipped split puts group {component!r} in {distinct}")
        chosen[component] = distinct[0]
    return chosen


def component_table(rows: pd.DataFrame, cfg: SplitParams, role: str) -> pd.DataFrame:
    """One row per component: ``docs``, ``key``, ``stratum`` (source[/label]) and ``date`` (temporal mode)."""
    table = rows.groupby("component", sort=True).agg(
        docs=("doc_id", "size"), source=("source", _most_common), label=("label", _most_common)
    )
    table["key"] = [group_key(cfg.seed, name) for name in table.index]
    with_label = cfg.stratify_by_label and role == "task"
    table["stratum"] = [
        f"{src}/{lab}" if with_label and lab is not None else src for src, lab in zip(table["source"], table["label"])
    ]
    if cfg.mode == "temporal":
        table["date"] = component_dates(rows, cfg.date_meta_key)
    return table


def _most_common(values: pd.Series):
    """The most frequent non-null value (ties: the smallest as a string), or None."""
    counts = Counter(v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v)))
    if not counts:
        return None
    top = max(counts.values())
    return min((v for v, c in counts.items() if c == top), key=str)


def component_dates(rows: pd.DataFrame, key: str) -> pd.Series:
    """Earliest ``meta[key]`` date per component; raises ``ValueError`` naming a row without a valid date."""
    dates = []
    for doc_id, meta in zip(rows["doc_id"], rows["meta"]):
        value = json.loads(meta or "{}").get(key)
        try:
            dates.append(pd.Timestamp(value).tz_localize(None) if value is not None else None)
        except ValueError as err:
            raise ValueError(f"doc {doc_id}: meta[{key!r}]={value!r} is not an ISO date") from err
        if dates[-1] is None:
            raise ValueError(f"doc {doc_id}: meta[{key!r}] missing (split.mode is temporal)")
    return pd.Series(dates, index=rows.index).groupby(rows["component"], sort=True).min()


def doc_targets(total_docs: int, fractions: dict[str, float], splits: tuple[str, ...]) -> dict[str, int]:
    """Documents per split: ``round(fraction * total)`` (half up) for evaluation splits, the rest to train."""
    targets = {s: math.floor(fractions[s] * total_docs + 0.5) for s in splits if s != "train"}
    targets["train"] = total_docs - sum(targets.values())
    return targets


def fill_stratum(
    members: pd.DataFrame, chosen: dict[str, str], fractions: dict[str, float], splits: tuple[str, ...], cfg
) -> dict[str, str]:
    """Assign the free components of one stratum; fixed ones count toward their split's target."""
    targets = doc_targets(int(members["docs"].sum()), fractions, splits)
    counts = Counter()
    for name, docs in zip(members.index, members["docs"]):
        if name in chosen:
            counts[chosen[name]] += docs
    free = members[~members.index.isin(list(chosen))]
    if cfg.mode == "temporal":
        return fill_in_order(free.sort_values(["date", "key"]), targets, counts, splits)
    if cfg.assignment == "hash":
        return hash_buckets(free, fractions, splits)
    return first_fit(free.sort_values("key"), targets, counts, splits)


def first_fit(ordered: pd.DataFrame, targets: dict, counts: Counter, splits: tuple[str, ...]) -> dict[str, str]:
    """Key order; each component to the first evaluation split it fits (docs <= target), else train."""
    eval_splits = [s for s in splits if s != "train"]
    out = {}
    for name, docs in zip(ordered.index, ordered["docs"]):
        split = next((s for s in eval_splits if counts[s] + docs <= targets[s]), "train")
        counts[split] += docs
        out[name] = split
    return out


def fill_in_order(ordered: pd.DataFrame, targets: dict, counts: Counter, splits: tuple[str, ...]) -> dict[str, str]:
    """Temporal fill: splits in params order (train first); move on once the next component overshoots."""
    out, current = {}, 0
    for name, docs in zip(ordered.index, ordered["docs"]):
        while current < len(splits) - 1 and counts[splits[current]] + docs > targets[splits[current]]:
            current += 1
        counts[splits[current]] += docs
        out[name] = splits[current]
    return out


def hash_buckets(free: pd.DataFrame, fractions: dict[str, float], splits: tuple[str, ...]) -> dict[str, str]:
    """Pure bucket: ``key / 2**64`` against cumulative fractions (eval splits first, then train)."""
    ordered_splits = [s for s in splits if s != "train"] + ["train"]
    edges, total = [], 0.0
    for split in ordered_splits:
        total += fractions[split]
        edges.append(total)
    out = {}
    for name, key in zip(free.index, free["key"]):
        u = key / 2**64
        out[name] = next((s for s, edge in zip(ordered_splits, edges) if u < edge), "train")
    return out


def count_straddling(rows: pd.DataFrame) -> list[str]:
    """Labels of raw groups and clusters found in more than one split of a role (independent re-check)."""
    straddling = []
    has_group = rows["group"].notna()
    checks = (
        ("group", rows[has_group], [f"{s}|{g}" for s, g in zip(rows["source"][has_group], rows["group"][has_group])]),
        ("cluster", rows, list(rows["cluster_id"])),
    )
    for kind, part, labels in checks:
        seen: dict[tuple[str, str], set[str]] = defaultdict(set)
        for role, label, split in zip(part["role"], labels, part["split"]):
            seen[(role, label)].add(split)
        straddling += [f"{kind}:{role}:{label}" for (role, label), s in sorted(seen.items()) if len(s) > 1]
    return straddling


def cross_role_clusters(rows: pd.DataFrame) -> int:
    """Clusters with rows in both roles (left to the leakage stage, which removes eval twins)."""
    roles = rows.groupby("cluster_id")["role"].nunique()
    return int((roles > 1).sum())


def check_task_splits_filled(rows: pd.DataFrame, cfg: SplitParams) -> None:
    """Raise ``ValueError`` naming the source and the split when a task source has no kept (non-duplicate)
    document in a split that ``split.task_fractions`` gives a share: fine-tuning needs train, dev and test,
    and an empty one would only fail stages later."""
    tasks = rows[rows["role"] == "task"]
    for source, part in tasks.groupby("source", sort=True):
        kept = part[~part["is_duplicate"].astype(bool)]
        for split in TASK_SPLITS:
            if cfg.task_fractions.get(split, 0.0) > 0 and not (kept["split"] == split).any():
                raise ValueError(
                    f"source {source}: split {split!r} is empty ({len(kept)} kept docs in "
                    f"{kept['component'].nunique()} groups, split.task_fractions={cfg.task_fractions}): add "
                    "documents or give the source a larger share")


def write_outputs(frames: dict[str, pd.DataFrame], rows: pd.DataFrame, out_dir: Path) -> None:
    """``<source>.parquet`` (input row order + ``split``) and ``manifest.tsv`` sorted by doc_id."""
    out_dir.mkdir(parents=True, exist_ok=True)
    split_of = dict(zip(rows["doc_id"], rows["split"]))
    for source, frame in frames.items():
        frame.assign(split=frame["doc_id"].map(split_of)).to_parquet(out_dir / f"{source}.parquet", index=False)
    manifest = rows[["doc_id", "split"]].sort_values("doc_id")
    manifest.to_csv(out_dir / "manifest.tsv", sep="\t", index=False, lineterminator="\n")


def split_metrics(rows: pd.DataFrame, straddling: int, cross_role: int) -> dict:
    """Per source: docs, kept docs, groups, labels and achieved document fractions per split."""
    sources = {}
    for source, part in rows.groupby("source", sort=True):
        splits = SPLITS_OF_ROLE[part["role"].iloc[0]]
        by_split = {s: part[part["split"] == s] for s in splits}
        sources[source] = {
            "docs": {s: len(p) for s, p in by_split.items()},
            "docs_kept": {s: int((~p["is_duplicate"]).sum()) for s, p in by_split.items()},
            "groups": {s: int(p["component"].nunique()) for s, p in by_split.items()},
            "fraction_achieved": {s: round(len(p) / len(part), 6) for s, p in by_split.items()},
            "labels": {s: label_counts(p) for s, p in by_split.items()},
        }
    return {"sources": sources, "groups_in_multiple_splits": straddling, "cross_role_clusters": cross_role}


def label_counts(part: pd.DataFrame) -> dict[str, int]:
    """``{label: docs}`` of one split, sorted by label (empty for unlabelled sources)."""
    return {str(k): int(v) for k, v in sorted(Counter(part["label"].dropna()).items())}
