"""Union-find (disjoint sets) shared by dedup (clusters of rows) and split (groups merged with clusters).

Path halving, union by a caller-given priority: the member with the lowest priority is always the root, so the name of a
set does not depend on the order in which pairs were merged (determinism). ``UnionTimes`` answers, for many pairs at
once, whether they were connected at a given point of a sequence of unions. ``joining_pairs`` finds which of a long
sequence of pairs join two sets (compiled: ``tasks/common/matching/compiled.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, MutableSequence, Sequence
from typing import Any, Generic, TypeVar

import numpy as np

from tasks.common.matching import compiled

Node = TypeVar("Node", bound=Hashable)


class UnionFind(Generic[Node]):
    """Disjoint sets over hashable nodes, added on first sight; each set's root is its lowest-priority node.

    ``priority`` maps a node to a sortable value (default: the node itself, so the smallest label wins).
    """

    def __init__(self, priority: Callable[[Node], Any] = lambda node: node) -> None:
        self.priority = priority
        self.parent: dict[Node, Node] = {}

    def find(self, node: Node) -> Node:
        """The root of ``node``'s set (``node`` is added as a singleton when new)."""
        parent = self.parent
        up = parent.setdefault(node, node)
        while up != node:
            parent[node] = up = parent[up]
            node, up = up, parent[up]
        return node

    def union(self, a: Node, b: Node) -> None:
        """Merge the sets of ``a`` and ``b``; the root of lower priority stays root."""
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            low, high = (ra, rb) if self.priority(ra) < self.priority(rb) else (rb, ra)
            self.parent[high] = low


class UnionTimes:
    """When two of the nodes ``0..n-1`` became connected, for unions made in time order.

    A union-by-size forest without path compression (depth <= log2 n): a root attached at time ``t`` carries
    every older edge of its tree below it, so edge times grow towards the roots and the time two nodes became
    connected is the latest edge time on the tree path between them (the Kruskal reconstruction tree's idea).
    """

    def __init__(self, n: int) -> None:
        self.parent, self.time, self.size = list(range(n)), [-1] * n, [1] * n

    def _root(self, node: int) -> int:
        while self.parent[node] != node:
            node = self.parent[node]
        return node

    def union(self, a: int, b: int, time: int) -> None:
        """Connect ``a`` and ``b`` at ``time`` (no later than any earlier union's time)."""
        ra, rb = self._root(a), self._root(b)
        if ra == rb:
            return
        if self.size[ra] < self.size[rb]:
            ra, rb = rb, ra
        self.parent[rb], self.time[rb] = ra, time
        self.size[ra] += self.size[rb]

    def connected_before(self, u: np.ndarray, v: np.ndarray, when: np.ndarray) -> np.ndarray:
        """``(pairs,)`` bool: whether ``u[k]`` and ``v[k]`` were connected by unions made before ``when[k]``."""
        parent, time = np.asarray(self.parent, np.int64), np.asarray(self.time, np.int64)
        depth = _depths(parent)
        u, v = np.array(u, np.int64), np.array(v, np.int64)
        latest = np.full(len(u), -1, np.int64)
        for a, b in ((u, v), (v, u)):  # lift the deeper end to the other's depth
            while (deeper := depth[a] > depth[b]).any():
                latest[deeper] = np.maximum(latest[deeper], time[a[deeper]])
                a[deeper] = parent[a[deeper]]
        while (apart := (u != v) & (depth[u] > 0)).any():  # equal depths: climb together to the common ancestor
            latest[apart] = np.maximum(latest[apart], np.maximum(time[u[apart]], time[v[apart]]))
            u[apart], v[apart] = parent[u[apart]], parent[v[apart]]
        return (u == v) & (latest < np.asarray(when))


def _depths(parent: np.ndarray) -> np.ndarray:
    depth, node = np.zeros(len(parent), np.int64), np.arange(len(parent))
    while (moving := parent[node] != node).any():
        depth += moving
        node = parent[node]
    return depth


def joining_pairs(roots: list[int], left: np.ndarray, right: np.ndarray, skip: np.ndarray | None = None) -> np.ndarray:
    """Indices ``k`` of the pairs that join two sets when ``(left[k], right[k])`` are unioned in order (the
    edges Kruskal's algorithm keeps), starting from the sets ``roots`` (``(nodes,)``: each node's root), with
    the pairs where ``skip[k]`` passed over (neither tested nor unioned). ``(joins,)`` int64, ascending.

    Only connectivity decides, so the answer does not depend on which node a union makes root. Run compiled
    for a long sequence (``compiled.worth_compiling``), in Python over lists otherwise; ``roots`` is not changed.
    Raises ``ValueError`` when ``left``, ``right`` and ``skip`` differ in length, ``IndexError`` for a node
    outside ``0..len(roots)-1`` (the compiled loop checks no bounds).
    """
    left, right = np.asarray(left, np.int64), np.asarray(right, np.int64)
    skip = np.zeros(len(left), np.bool_) if skip is None else np.asarray(skip, np.bool_)
    if not left.shape == right.shape == skip.shape == (len(left),):
        raise ValueError(f"left {left.shape}, right {right.shape} and skip {skip.shape} must be one length, 1-d")
    for side in (left, right):
        if len(side) and (side.min() < 0 or side.max() >= len(roots)):
            bad = side.min() if side.min() < 0 else side.max()
            raise IndexError(f"node {bad} is outside the {len(roots)} nodes")
    out = np.zeros(len(left), np.bool_)
    if compiled.worth_compiling(len(left)):
        compiled.jit(_joins)(np.array(roots, np.int64), left, right, skip, out)
    else:
        _joins(list(roots), left.tolist(), right.tolist(), skip.tolist(), out)
    return np.flatnonzero(out)


def _joins(
    parent: MutableSequence[int] | np.ndarray,
    left: Sequence[int] | np.ndarray,
    right: Sequence[int] | np.ndarray,
    skip: Sequence[bool] | np.ndarray,
    out: np.ndarray,
) -> None:
    """``joining_pairs``' loop over a forest ``parent`` (path halving; a joining pair puts ``left``'s root under
    ``right``'s): sets ``out[k]`` for each joining pair. Plain Python that numba compiles unchanged."""
    for k in range(len(left)):
        if skip[k]:
            continue
        a, b = left[k], right[k]
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        while parent[b] != b:
            parent[b] = parent[parent[b]]
            b = parent[b]
        if a != b:
            parent[a] = b
            out[k] = True
