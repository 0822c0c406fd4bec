"""The split's checks over the written rows: ``count_straddling`` (groups and clusters in more than one split of a
role: must be none outside bridged components, else ``assign.SplitLeakError``) and ``cross_role_clusters``
(clusters in both roles, counted only). Labels, roles and splits are compared as integer codes, never a frame of a
label string a row."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd


def count_straddling(rows: pd.DataFrame) -> list[str]:
    """Labels of raw groups and clusters found in more than one split of a role (independent re-check), sorted
    by role and label within each kind. A group's label is ``<source>|<group>``; labels and splits are compared as
    integer codes (no frame of a label string a row: ~390 B a row at its peak)."""
    has_group = rows["group"].notna().to_numpy()
    role, split = rows["role"].to_numpy(object), rows["split"].to_numpy(object)
    clusters, cluster_names = pd.factorize(rows["cluster_id"].to_numpy(object))
    checks = (
        ("group", has_group, group_label_codes(rows["source"][has_group], rows["group"][has_group])),
        ("cluster", np.ones(len(rows), bool), (clusters, cluster_names.__getitem__)),
    )
    straddling = []
    for kind, part, (labels, label_of) in checks:
        found = in_several_splits(role[part], labels, split[part])
        straddling += [f"{kind}:{r}:{label}" for r, label in sorted((r, label_of(code)) for r, code in found)]
    return straddling


def group_label_codes(source: pd.Series, group: pd.Series) -> tuple[np.ndarray, Callable[[int], str]]:
    """``(codes, label)``: per row the code of its label ``f"{source}|{group}"``, and the label of a code. Codes of
    the distinct (source, group) pairs; where every source and group is a string without ``|``, distinct pairs are
    distinct labels and no label is built (a string a row); else the pairs' labels are built and factorized."""
    sources, source_names = pd.factorize(source.to_numpy(object), use_na_sentinel=False)
    groups, group_names = pd.factorize(group.to_numpy(object), use_na_sentinel=False)
    width = max(len(group_names), 1)
    pairs, pair_values = pd.factorize(sources.astype(np.int64) * width + groups)

    def text(pair: int) -> str:
        return f"{source_names[pair // width]}|{group_names[pair % width]}"

    if all(type(name) is str and "|" not in name for names in (source_names, group_names) for name in names):
        return pairs, lambda code: text(int(pair_values[code]))
    label_of_pair, labels = pd.factorize(np.asarray([text(p) for p in pair_values.tolist()], dtype=object))
    return label_of_pair[pairs], labels.__getitem__


def in_several_splits(role: np.ndarray, labels: np.ndarray, split: np.ndarray) -> list[tuple]:
    """``(role, label code)`` of each (role, label) pair whose rows lie in more than one distinct split (a null
    split counts as one; a null role or label code, -1, is left out, as ``groupby`` leaves nulls out)."""
    roles, role_names = pd.factorize(role)
    splits, split_names = pd.factorize(split, use_na_sentinel=False)
    known = (roles >= 0) & (labels >= 0)
    width, kinds = int(labels.max(initial=0)) + 1, max(len(split_names), 1)
    key = roles[known].astype(np.int64) * width + labels[known]
    pairs = np.unique(key * kinds + splits[known])
    keys, counts = np.unique(pairs // kinds, return_counts=True)
    return [(role_names[k // width], int(k % width)) for k in keys[counts > 1].tolist()]


def cross_role_clusters(rows: pd.DataFrame) -> int:
    """Clusters with rows in both roles (left to the leakage stage, which removes eval twins); a null cluster id
    or role is left out. Clusters and roles as integer codes, each (cluster, role) pair counted once."""
    clusters, _ = pd.factorize(rows["cluster_id"].to_numpy(object))
    roles, role_names = pd.factorize(rows["role"].to_numpy(object))
    known, width = (clusters >= 0) & (roles >= 0), max(len(role_names), 1)
    pairs = np.unique(clusters[known].astype(np.int64) * width + roles[known])
    _, counts = np.unique(pairs // width, return_counts=True)
    return int((counts > 1).sum())
