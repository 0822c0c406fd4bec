"""The unions of each row's group and cluster labels, the split's components (``merge_groups``): an integer code
a row and one name a component, the names in Arrow, not Python strings.

A row's labels are ``<role>|cluster|<cluster_id>`` and, with a group, ``<role>|group|<source>|<group>``
(``assign.row_labels``). A label is its *part*'s prefix ``<role>|<kind>|`` and a *rest*; as a role holds no ``|``,
no prefix begins another, so labels sort by prefix, then rest, and each part is dictionary-encoded and sorted
alone (Arrow sorts UTF-8 bytes: code point order, Python's string order). A component is named by its smallest
label (``groups_first``: its smallest group label, hash mode) and coded by its name's rank among the names, so an
order of codes is the order of names.

Memory: no Python string a row. The rests are Arrow strings (``pa.array`` of the row's ``str`` values: the
object column's own strings, only out-of-contract values such as a null cluster id made ``str`` first), the
codes numpy integers; per row the driver keeps an ``int64`` code (8 B), per component an Arrow name (its bytes
and an 8 B offset). A Python list of the rests and a factorize of them sorted held ~400 B a row at 10^6 rows.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from scipy import sparse
from scipy.sparse.csgraph import connected_components

from tasks.split.ledger import group_mask

#: names of components: ``large_string`` (10^8 names of ~60 B pass the 2 GiB of ``string``'s 32-bit offsets)
NAME_TYPE = pa.large_string()


def merge_groups(rows: pd.DataFrame, groups_first: bool = False) -> tuple[np.ndarray, pa.Array]:
    """``(code, names)``: per row (``(rows,)`` int64) the code of its component, and the components' names
    (``large_string``, sorted: code ``i`` is ``names[i]``); a component is the union of ``(role, source, group)``
    and ``(role, cluster_id)`` labels.

    Groups are source-local names (author "smith" of two sources is not one person); clusters are global
    but merged only within a role (see the package docstring). A row without a group is its cluster alone.
    The name is the smallest label, with ``groups_first`` the smallest group label (hash mode: a new doc's
    cluster id does not rename its group). The labels (``label_codes``) get integer codes in that order, the
    row's (cluster, group) pairs are the edges of a graph whose connected components (scipy) are the unions, and
    each component is named by its smallest code: the root a union-find by that priority keeps."""
    own, has_group, linked, parts = label_codes(rows, groups_first)
    size = sum(len(rests) for _, _, rests in parts)
    edges = sparse.coo_matrix((np.ones(len(linked), np.int8), (own[has_group], linked)), shape=(size, size))
    _, component = connected_components(edges, directed=False)
    root = np.full(component.max(initial=-1) + 1, size, np.int64)
    np.minimum.at(root, component, np.arange(size))
    roots, row_root = np.unique(root[component[own]], return_inverse=True)
    names, rank = label_names(parts, roots)
    return rank[row_root], names


def label_codes(rows: pd.DataFrame, groups_first: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray, list]:
    """The labels as integer codes in label order (``groups_first``: group labels first, each kind in label
    order): ``(cluster, has_group, group, parts)``, the cluster label's code per row, ``ledger.group_mask``, the
    group label's code per row that has one, and per ``(role, kind)`` part its prefix ``<role>|<kind>|``, first
    code and sorted rests (Arrow: ``str(cluster_id)``, ``<source>|<group>``)."""
    has_group = group_mask(rows)
    roles = rows["role"].map(str).to_numpy(object)
    groups = pc.binary_join_element_wise(
        texts(rows["source"].to_numpy(object)[has_group]),
        texts(rows["group"].to_numpy(object)[has_group]),
        pa.scalar("|", NAME_TYPE),
    )
    clusters = texts(rows["cluster_id"].to_numpy(object))
    rests = {"cluster": (np.ones(len(rows), bool), clusters), "group": (has_group, groups)}
    codes = {kind: np.empty(len(rest), np.int64) for kind, (_, rest) in rests.items()}
    kinds_roles = {(kind, role) for kind, (mask, _) in rests.items() for role in set(roles[mask])}
    parts, offset = [], 0
    for kind, role in sorted(kinds_roles, key=lambda kr: (groups_first and kr[0] == "cluster", f"{kr[1]}|{kr[0]}|")):
        mask, rest = rests[kind]
        mine = roles[mask] == role
        found, names = sorted_codes(rest.filter(pa.array(mine)))
        codes[kind][mine] = found + offset
        parts.append((f"{role}|{kind}|", offset, names))
        offset += len(names)
    return codes["cluster"], has_group, codes["group"], parts


def texts(values: np.ndarray) -> pa.Array:
    """``str`` of each value (``(n,)`` object) as Arrow strings: the strings themselves where all are ``str`` (no
    Python object made), else each made ``str`` first (``None`` is ``"None"``, as in ``assign.row_labels``)."""
    if pd.api.types.infer_dtype(values, skipna=False) != "string":
        values = np.asarray([v if type(v) is str else str(v) for v in values], dtype=object)
    return pa.array(values, NAME_TYPE)


def sorted_codes(values: pa.Array) -> tuple[np.ndarray, pa.Array]:
    """``(codes, names)``: the distinct ``values`` sorted, and per value the position of its own (``int64``)."""
    encoded = pc.dictionary_encode(values)
    order = pc.array_sort_indices(encoded.dictionary).to_numpy()
    rank = np.empty(len(order), np.int64)
    rank[order] = np.arange(len(order))
    return rank[encoded.indices.to_numpy(zero_copy_only=False)], encoded.dictionary.take(pa.array(order))


def label_names(parts: list, roots: np.ndarray) -> tuple[pa.Array, np.ndarray]:
    """``(names, rank)``: the labels of the codes ``roots`` (sorted, distinct; ``label_codes``' parts), sorted by
    label, and per root the position of its label there. Within a part codes are in label order; the parts are
    put in prefix order (hash mode codes group parts first)."""
    chunks, ranks, done = {}, np.empty(len(roots), np.int64), 0
    for prefix, start, rests in parts:
        first, end = np.searchsorted(roots, [start, start + len(rests)])
        picked = rests.take(pa.array(roots[first:end] - start))
        chunks[prefix] = (
            first,
            end,
            pc.binary_join_element_wise(pa.scalar(prefix, NAME_TYPE), picked, pa.scalar("", NAME_TYPE)),
        )
    for prefix in sorted(chunks):
        first, end, _ = chunks[prefix]
        ranks[first:end] = np.arange(done, done + end - first)
        done += end - first
    names = pa.chunked_array([chunks[prefix][2] for prefix in sorted(chunks)], NAME_TYPE).combine_chunks()
    return names, ranks
