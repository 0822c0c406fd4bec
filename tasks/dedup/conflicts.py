"""What dedup's merges cost in labelled data: label and tag conflicts inside a cluster, the entities of removed
rows, and the largest cluster (which the split stage keeps in one split as a single group).

Conflicts. Only task rows take part (a pretraining row's label or tags are not used by any model). A cluster
has a *label conflict* when its task rows with a ``label`` carry two or more distinct labels (near copies too:
a label belongs to the whole document). It has a *tags conflict* when two task rows with the same normalized
text carry different ``tags`` lists (copies of one sentence tagged differently); near copies with other
words are not compared, since their tags cannot be aligned position by position. ``dedup.conflict_policy``:
``keep_one`` keeps the best row as in any cluster (its labels win, silently but counted); ``drop_all`` drops
every row of the keep unit holding the disagreeing rows (kind ``conflict``): the cluster's task rows under
``keep_one_per: role``, the whole cluster under ``keep_one_per: cluster``.

Entities are IOB2 chunks counted as conlleval (CoNLL-2000 ``conlleval`` ``startOfChunk``) counts them: a chunk
starts at every ``B-`` tag and at an ``I-`` tag whose predecessor is ``O``, the sentence start or a tag of
another type.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tasks.config.dedup import DedupParams
    from tasks.dedup import Corpus, DocSignatures
    from tasks.dedup.outputs import RowLabels


def entity_count(tags: list[str] | None) -> int:
    """Number of IOB2 chunks in ``tags`` (conlleval's chunk starts; see the module docstring); 0 for None."""
    count, previous_prefix, previous_type = 0, "O", ""
    for tag in tags or []:
        prefix, _, kind = tag.partition("-")
        if prefix == "B" or (prefix == "I" and (previous_prefix == "O" or previous_type != kind)):
            count += 1
        previous_prefix, previous_type = prefix, kind
    return count


def tags_digest(tags: list[str] | None) -> str | None:
    """First 16 hex digits of the md5 of the tags as a JSON list (equal tags, equal digest); None without tags."""
    if tags is None:
        return None
    return hashlib.md5(json.dumps(list(tags)).encode("utf-8")).hexdigest()[:16]


@dataclass(frozen=True)
class Conflicts:
    """Cluster roots (row index of the cluster's first row in keep order) with each kind of conflict."""

    labels: set[int]
    tags: set[int]

    def any(self) -> set[int]:
        """Roots with either kind."""
        return self.labels | self.tags


def find_conflicts(corpus: Corpus, docs: DocSignatures, labels: RowLabels) -> Conflicts:
    """Label and tags conflicts of every cluster (see the module docstring)."""
    label_sets: dict[int, set[str]] = defaultdict(set)
    tag_sets: dict[tuple[int, str], set[tuple[str, ...]]] = defaultdict(set)
    for i, root in enumerate(labels.cluster):
        if corpus.role[i] != "task":
            continue
        if corpus.label[i] is not None:
            label_sets[root].add(corpus.label[i])
        if corpus.tags[i] is not None:
            tag_sets[(root, docs.text_hash[i])].add(tuple(corpus.tags[i]))
    return Conflicts(
        labels={root for root, values in label_sets.items() if len(values) > 1},
        tags={root for (root, _), values in tag_sets.items() if len(values) > 1},
    )


def drop_conflicting(corpus: Corpus, labels: RowLabels, conflicts: Conflicts, cfg: DedupParams) -> None:
    """Under ``conflict_policy: drop_all``, set the kind of every row of a conflicting keep unit to ``conflict``."""
    if cfg.conflict_policy != "drop_all":
        return
    roots = conflicts.any()
    for i, root in enumerate(labels.cluster):
        if root in roots and (cfg.keep_one_per == "cluster" or corpus.role[i] == "task"):
            labels.kind[i] = "conflict"


def largest_component(corpus: Corpus, labels: RowLabels) -> dict[str, Any]:
    """The cluster with the most rows (ties: smallest ``cluster_id``): ``{cluster_id, docs, sources, groups}``.

    ``groups`` counts its distinct ``(source, group)`` pairs (a row without a group is its own), the units the
    split stage would otherwise have been free to place apart.
    """
    members: dict[int, list[int]] = defaultdict(list)
    for i, root in enumerate(labels.cluster):
        members[root].append(i)
    if not members:
        return {"cluster_id": None, "docs": 0, "sources": 0, "groups": 0}
    root = min(members, key=lambda r: (-len(members[r]), corpus.doc_id[r]))
    rows = members[root]
    groups = {(corpus.source[i], corpus.doc_id[i] if corpus.group[i] is None else corpus.group[i]) for i in rows}
    return {
        "cluster_id": corpus.doc_id[root],
        "docs": len(rows),
        "sources": len({corpus.source[i] for i in rows}),
        "groups": len(groups),
    }
