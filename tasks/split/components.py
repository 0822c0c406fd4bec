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

from tasks.common.runtime.heap import give_back_freed_memory
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
    size = sum(len(order) for *_, order in parts)
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
    code and distinct rests (``sorted_codes``; Arrow: ``str(cluster_id)``, ``<source>|<group>``). A part's rests
    are made Arrow strings alone, and the pages its encoding freed given back before the next part."""
    has_group = group_mask(rows)
    roles = as_text(rows["role"].to_numpy(object))
    columns = {name: rows[name].to_numpy(object) for name in ("source", "group", "cluster_id")}
    rests = {
        "cluster": (np.ones(len(rows), bool), lambda mine: texts(columns["cluster_id"][mine])),
        "group": (has_group, lambda mine: group_rests(columns["source"][mine], columns["group"][mine])),
    }
    codes = {kind: np.empty(int(mask.sum()), np.int64) for kind, (mask, _) in rests.items()}
    kinds_roles = {(kind, role) for kind, (mask, _) in rests.items() for role in set(roles[mask])}
    parts, offset = [], 0
    for kind, role in sorted(kinds_roles, key=lambda kr: (groups_first and kr[0] == "cluster", f"{kr[1]}|{kr[0]}|")):
        mask, rest_of = rests[kind]
        mine = mask & (roles == role)
        found, distinct, order = sorted_codes(rest_of(mine))
        codes[kind][mine[mask]] = found + offset
        parts.append((f"{role}|{kind}|", offset, distinct, order))
        offset += len(order)
        give_back_freed_memory()  # the part's rests and hash table, kept by Arrow's pool otherwise
    return codes["cluster"], has_group, codes["group"], parts


def as_text(values: np.ndarray) -> np.ndarray:
    """``str`` of each value (``(n,)`` object): ``values`` itself where all are ``str``, else each made ``str``
    (``None`` is ``"None"``, as in ``assign.row_labels``)."""
    if pd.api.types.infer_dtype(values, skipna=False) == "string":
        return values
    return np.asarray([v if type(v) is str else str(v) for v in values], dtype=object)


def texts(values: np.ndarray) -> pa.Array:
    """``as_text`` of ``values`` as Arrow strings (``NAME_TYPE``): no Python object made where all are ``str``."""
    return pa.array(as_text(values), NAME_TYPE)


def group_rests(source: np.ndarray, group: np.ndarray) -> pa.Array:
    """``<source>|<group>`` of each row, in Arrow."""
    return pc.binary_join_element_wise(texts(source), texts(group), pa.scalar("|", NAME_TYPE))


def sorted_codes(values: pa.Array) -> tuple[np.ndarray, pa.Array, np.ndarray]:
    """``(codes, distinct, order)``: the distinct ``values`` (first-seen order), ``order`` the positions that sort
    them, and per value the sorted position of its own (``int64``). Not sorted by a copy: the names of the roots
    alone are taken in order (``label_names``)."""
    encoded = pc.dictionary_encode(values)
    order = pc.array_sort_indices(encoded.dictionary).to_numpy()
    rank = np.empty(len(order), np.int64)
    rank[order] = np.arange(len(order))
    return rank[encoded.indices.to_numpy(zero_copy_only=False)], encoded.dictionary, order


def label_names(parts: list, roots: np.ndarray) -> tuple[pa.Array, np.ndarray]:
    """``(names, rank)``: the labels of the codes ``roots`` (sorted, distinct; ``label_codes``' parts), sorted by
    label, and per root the position of its label there. Within a part codes are in label order; the parts are
    put in prefix order (hash mode codes group parts first)."""
    chunks, ranks, done = {}, np.empty(len(roots), np.int64), 0
    for prefix, start, distinct, order in parts:
        first, end = np.searchsorted(roots, [start, start + len(order)])
        picked = distinct.take(pa.array(order[roots[first:end] - start]))
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
