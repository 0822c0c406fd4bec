"""Assignment of components to splits: the from-scratch rule (fill, hash or temporal; see ``tasks/split``'s
docstring), a pure function of the rows of this run and the params. The ledger (``ledger.py``) overlays it; the
study sizing (``targets.py``) gives a task source's train split a pool target instead of a fraction."""

from __future__ import annotations

import hashlib
import json
import math
from collections import Counter

import numpy as np
import pandas as pd
import pyarrow as pa

from tasks.common.runtime.heap import give_back_freed_memory
from tasks.config.corpus.split import PRETRAIN_SPLITS, TASK_SPLITS, SplitParams
from tasks.split.targets import LEFT_OUT, StratumPlan, plan_stratum, stratum_shares

SPLITS_OF_ROLE = {"task": TASK_SPLITS, "pretrain": PRETRAIN_SPLITS}
SPLIT_ALIASES = {"validation": "dev", "valid": "dev", "val": "dev"}
#: the columns a role's assignment reads (a copy of the role's rows: the others are not copied)
ASSIGN_COLUMNS = ("doc_id", "source", "label", "meta", "is_duplicate", "component")
#: component names made Python strings at once to be keyed (``component_keys``)
KEY_CHUNK = 65_536


def row_labels(role: str, source: str, group, cluster: str) -> list[str]:
    """A row's cluster label and, when it has a group, its group label: the nodes whose union is its component
    (groups are source-local, clusters global, both within a role)."""
    has_group = group is not None and not (isinstance(group, float) and math.isnan(group))
    return [f"{role}|cluster|{cluster}"] + ([f"{role}|group|{source}|{group}"] if has_group else [])


class SplitLeakError(RuntimeError):
    """A group or near-duplicate cluster ended up in more than one split, or a ledger doc moved."""


def assign_splits(rows: pd.DataFrame, cfg: SplitParams, names: pa.Array) -> pd.Series:
    """The from-scratch split of every row (index aligned with ``rows``, which carry ``component``: a code of
    ``names``, ``components.merge_groups``; codes sort as their names)."""
    split = pd.Series("", index=rows.index, dtype=object)
    for role, splits in SPLITS_OF_ROLE.items():
        mask = rows["role"] == role
        if mask.any():
            split[mask] = assign_role(rows.loc[mask, list(ASSIGN_COLUMNS)], cfg, role, splits, names)
    return split


def group_key(seed: int, name: str) -> int:
    """64-bit ``blake2b(seed, name)``: the position of a component in the assignment order."""
    digest = hashlib.blake2b(f"{seed}\x00{name}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def assign_role(rows: pd.DataFrame, cfg: SplitParams, role: str, splits: tuple[str, ...], names: pa.Array) -> pd.Series:
    """The split of every row of one role (index aligned with ``rows``; ``assign_splits``)."""
    fractions = cfg.task_fractions if role == "task" else cfg.pretrain_fractions
    shipped = own_splits(rows, cfg.own_split_meta_key, splits)
    components, position = component_table(rows, cfg, role, names)
    give_back_freed_memory()  # the table's counting (~250 B a row at its peak), under the fill's own peak
    chosen: dict[int, str] = fixed_components(rows, shipped, names)
    pools = cfg.train_pools() if role == "task" else {}
    # study: a pooled source's shipped train is only a candidate for its pool; what the pool does not take is test
    shipped_train = {
        name for name, split in chosen.items() if split == "train" and components.at[name, "source"] in pools
    }
    for name in shipped_train:
        del chosen[name]
    targets = stratum_shares(components, chosen, pools)
    caps = stratum_shares(components, {}, cfg.test_caps() if role == "task" else {})
    # the split of each component by its position in the table: a dict of every component held ~130 B a component
    codes, split_of = components.index.to_numpy(), np.full(len(components), None, dtype=object)
    fixed = np.fromiter(chosen, np.int64, len(chosen))
    split_of[np.searchsorted(codes, fixed)] = np.asarray(list(chosen.values()), dtype=object)
    for stratum, members in components.groupby("stratum", sort=True):
        pooled = members["source"].iloc[0] in pools  # a pooled stratum without candidates has a pool of 0
        pool = targets.get(stratum, 0) if pooled else None
        plan = plan_stratum(members, fractions, splits, pool, shipped_train, caps.get(stratum))
        free, filled = fill_stratum(members, chosen, plan, cfg)  # strata are disjoint: chosen holds the fixed only
        split_of[np.searchsorted(codes, free)] = np.asarray(filled, dtype=object)  # the split's one string object
    return pd.Series(split_of[position], index=rows.index, dtype=object)


def own_splits(rows: pd.DataFrame, key: str, splits: tuple[str, ...]) -> pd.Series:
    """Split shipped by the source in ``meta[key]`` (NaN where the source ships none).

    A source uses its own split only when every row carries the key; raises ``ValueError`` when only some
    rows do, or a value is not a split of the role (``validation``/``valid``/``val`` count as ``dev``).
    """
    values = pd.Series(index=rows.index, dtype=object)
    for source, metas in rows["meta"].groupby(rows["source"], sort=True):  # the metas alone, not a copy of the rows
        shipped = [meta_value(m, key) for m in metas]
        present = sum(v is not None for v in shipped)
        if present == 0:
            continue
        if present < len(shipped):
            first = rows["doc_id"][metas.index[[v is None for v in shipped].index(True)]]
            raise ValueError(f"source {source}: meta[{key!r}] present in {present} of {len(shipped)} rows ({first})")
        mapped = [SPLIT_ALIASES.get(str(v).lower(), str(v).lower()) for v in shipped]
        bad = sorted(set(mapped) - set(splits))
        if bad:
            raise ValueError(f"source {source}: meta[{key!r}] values {bad} are not among {list(splits)}")
        values[metas.index] = mapped
    return values


def meta_value(meta: str | None, key: str):
    """``json.loads(meta).get(key)``; a meta without a backslash (no JSON escape) that does not hold ``key`` as
    text cannot hold it as a key, and is not parsed (most rows: ~0.3 s of json.loads at 100k docs). A missing meta
    (None, or pandas' NaN: ``working_rows`` nulls those that cannot hold the key) holds no key."""
    if not isinstance(meta, str) or (key not in meta and "\\" not in meta):
        return None
    return json.loads(meta).get(key)


def fixed_components(rows: pd.DataFrame, fixed: pd.Series, names: pa.Array) -> dict[int, str]:
    """``{component code: split}`` for components containing rows with a shipped split.

    Raises ``SplitLeakError`` when one component holds rows of different shipped splits (the source's own
    split lets a group or near-duplicate cluster straddle).
    """
    chosen: dict[int, str] = {}
    known = fixed.notna()
    for component, split_values in fixed[known].groupby(rows["component"][known], sort=True):
        distinct = sorted(set(split_values))
        if len(distinct) > 1:
            raise SplitLeakError(f"shipped split puts group {names[component].as_py()!r} in {distinct}")
        chosen[component] = distinct[0]
    return chosen


def component_table(
    rows: pd.DataFrame, cfg: SplitParams, role: str, names: pa.Array
) -> tuple[pd.DataFrame, np.ndarray]:
    """One row per component, indexed by its code (``assign_splits``), sorted by name: ``docs``, ``kept``
    (non-duplicate docs), ``key``, ``stratum`` (source[/label]) and ``date`` (temporal mode); and per row the
    position of its component there. The role's components get positions once (``present``) and every count is
    taken over them."""
    codes, found = present(rows["component"].to_numpy(np.int64), len(names))
    index = pd.Index(found, dtype=np.int64, name="component")
    kept = np.bincount(codes, weights=~rows["is_duplicate"].to_numpy(bool), minlength=len(index))
    table = pd.DataFrame({"docs": np.bincount(codes, minlength=len(index)), "kept": kept.astype(np.int64)}, index)
    # object columns: pandas 3 makes an object array of strings Arrow strings, and a Python string a component again
    # where they are iterated (the strata: ~75 B a component)
    table["source"] = pd.Series(most_common_by(codes, len(index), rows["source"]), index, dtype=object)
    table["label"] = pd.Series(most_common_by(codes, len(index), rows["label"]), index, dtype=object)
    table["key"] = component_keys(cfg.seed, names, found)
    with_label = cfg.stratify_by_label and role == "task"
    labelled = zip(table["source"], table["label"])
    strata = [f"{src}/{lab}" if with_label and lab is not None else src for src, lab in labelled]
    table["stratum"] = pd.Series(strata, index, dtype=object)
    if cfg.mode == "temporal":
        table["date"] = component_dates(rows, cfg.date_meta_key)
    return table, codes


def present(codes: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """``(position, found)``: the distinct ``codes`` (of ``0 .. size - 1``) sorted, and per code its position
    there (``int64``); what a sorted ``pd.factorize`` answers, by a mask of ``size``, without its hash table and
    sort (~80 B a row)."""
    seen = np.zeros(size, bool)
    seen[codes] = True
    return (np.cumsum(seen) - 1)[codes], np.flatnonzero(seen)


def component_keys(seed: int, names: pa.Array, codes: np.ndarray) -> np.ndarray:
    """``group_key`` of the names of ``codes`` (``(codes,)`` uint64), the names made Python strings
    ``KEY_CHUNK`` at a time (not one a component at once); uint64 straight from the keys: a list held a Python
    int a component (~40 B) before the column was made."""
    chunks = (names.take(pa.array(codes[i : i + KEY_CHUNK])).to_pylist() for i in range(0, len(codes), KEY_CHUNK))
    return np.fromiter((group_key(seed, name) for chunk in chunks for name in chunk), np.uint64, len(codes))


def most_common_by(codes: np.ndarray, size: int, values: pd.Series) -> np.ndarray:
    """Per key code ``0 .. size - 1`` (``codes``: one a row), the most frequent non-null value of ``values`` as a
    string (ties: the smallest), None where every value is null (``(size,)`` object). Values as sorted integer
    codes, each (key, value) pair counted by one ``np.unique`` of their combined code and the winner of each key
    chosen by one sort: no Python function per group (~6 s at 100k components), and no frame of the pairs'
    strings (~570 B a row at its peak)."""
    known = values.notna().to_numpy()
    if not known.any():  # no value (a pretraining source's labels): no pair to count
        return np.full(size, None, dtype=object)
    value_codes, value_names = pd.factorize(values.to_numpy(object)[known])
    # the values as strings: distinct values with one string (1 and "1") are one value
    as_text, value_names = pd.factorize(np.asarray([str(v) for v in value_names], dtype=object), sort=True)
    width = max(len(value_names), 1)
    pairs, counts = np.unique(codes[known].astype(np.int64) * width + as_text[value_codes], return_counts=True)
    key, value = pairs // width, pairs % width
    order = np.lexsort((value, -counts, key))  # by key, then the largest count, then the smallest value
    first = order[np.r_[True, key[order][1:] != key[order][:-1]]] if len(order) else order
    out = np.full(size, None, dtype=object)
    out[key[first]] = np.asarray(value_names, dtype=object)[value[first]]
    return out


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


def fill_stratum(
    members: pd.DataFrame, chosen: dict[int, str], plan: StratumPlan, cfg: SplitParams
) -> tuple[np.ndarray, list[str]]:
    """Assign the free components of one stratum (those not in ``chosen``): their codes and splits, in one order;
    fixed ones count toward their split's target (``counts``, in the split's unit) and toward a test cap
    (``kept_in``: kept docs per split)."""
    counts, kept_in = Counter(), Counter()
    for name, docs, kept in zip(members.index, members["docs"], members["kept"]):
        if name in chosen:
            counts[chosen[name]] += kept if plan.units.get(chosen[name]) == "kept" else docs
            kept_in[chosen[name]] += kept
    # isin(list(chosen)) hashed every name again; only the columns a fill reads are copied
    columns = ["docs", "kept", "key"] + (["date"] if "date" in members else [])
    free = members.loc[[name not in chosen for name in members.index], columns]
    if cfg.mode == "temporal":
        ordered = free.sort_values(["date", "key"])
        return ordered.index.to_numpy(), fill_in_order(ordered, plan, counts, kept_in)
    if cfg.assignment == "hash":
        return free.index.to_numpy(), hash_buckets(free, plan.fractions, plan.splits)
    ordered = free.sort_values("key")
    return ordered.index.to_numpy(), first_fit(ordered, plan, counts, kept_in)


def rest_within_cap(kept: int, plan: StratumPlan, kept_in: Counter) -> str:
    """The rest split, or ``LEFT_OUT`` when ``kept`` more docs would take its kept docs (``kept_in``) past the
    plan's ``rest_cap``."""
    if plan.rest_cap is not None and kept_in[plan.rest] + kept > plan.rest_cap:
        return LEFT_OUT
    return plan.rest


def first_fit(ordered: pd.DataFrame, plan: StratumPlan, counts: Counter, kept_in: Counter) -> list[str]:
    """Key order; each component to the first bounded split it fits (its size in the split's unit <= what is
    left of the target), else the rest split (fractions: eval splits bounded, train the rest; study: dev, test
    and the train pool bounded, test the rest within its cap). A shipped-train component may only go to train or
    the rest."""
    out = []
    for name, docs, kept in zip(ordered.index, ordered["docs"], ordered["kept"]):
        size = {"docs": docs, "kept": kept}
        fits = (s for s in plan.allowed(name) if counts[s] + size[plan.units[s]] <= plan.targets[s])
        split = next(fits, None) or rest_within_cap(kept, plan, kept_in)  # a bounded fit is never capped
        counts[split] += size[plan.units.get(split, "docs")]
        kept_in[split] += kept
        out.append(split)
    return out


def fill_in_order(ordered: pd.DataFrame, plan: StratumPlan, counts: Counter, kept_in: Counter) -> list[str]:
    """Temporal fill: splits in params order (train first); move on once the next component overshoots. A
    shipped-train component past the train pool goes to the last split (within its cap: the newest are left out)."""
    splits, out, current = plan.splits, [], 0
    for name, docs, kept in zip(ordered.index, ordered["docs"], ordered["kept"]):
        size = {"docs": docs, "kept": kept}
        while (
            current < len(splits) - 1
            and counts[splits[current]] + size[plan.units[splits[current]]] > plan.targets[splits[current]]
        ):
            current += 1
        shipped_past_pool = name in plan.shipped_train and splits[current] != "train"
        split = splits[-1] if shipped_past_pool else splits[current]
        split = rest_within_cap(kept, plan, kept_in) if split == plan.rest else split
        counts[split] += size[plan.units.get(split, "docs")]
        kept_in[split] += kept
        out.append(split)
    return out


def hash_buckets(free: pd.DataFrame, fractions: dict[str, float], splits: tuple[str, ...]) -> list[str]:
    """Pure bucket: ``key / 2**64`` against cumulative fractions (eval splits first, then train)."""
    ordered_splits = [s for s in splits if s != "train"] + ["train"]
    edges, total = [], 0.0
    for split in ordered_splits:
        total += fractions[split]
        edges.append(total)
    out = []
    for key in free["key"]:
        u = key / 2**64
        out.append(next((s for s, edge in zip(ordered_splits, edges) if u < edge), "train"))
    return out
