"""Union-find (disjoint sets) shared by dedup (clusters of rows) and split (groups merged with clusters).

Path halving, union by a caller-given priority: the member with the lowest priority is always the root, so
the name of a set does not depend on the order in which pairs were merged (determinism).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any


class UnionFind:
    """Disjoint sets over hashable nodes, added on first sight; each set's root is its lowest-priority node.

    ``priority`` maps a node to a sortable value (default: the node itself, so the smallest label wins).
    """

    def __init__(self, priority: Callable[[Hashable], Any] = lambda node: node) -> None:
        self.priority = priority
        self.parent: dict[Hashable, Hashable] = {}

    def find(self, node: Hashable) -> Hashable:
        """The root of ``node``'s set (``node`` is added as a singleton when new)."""
        self.parent.setdefault(node, node)
        while self.parent[node] != node:
            self.parent[node] = self.parent[self.parent[node]]
            node = self.parent[node]
        return node

    def union(self, a: Hashable, b: Hashable) -> None:
        """Merge the sets of ``a`` and ``b``; the root of lower priority stays root."""
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            low, high = (ra, rb) if self.priority(ra) < self.priority(rb) else (rb, ra)
            self.parent[high] = low
