"""What dedup's merges cost in labelled data: label and tag conflicts inside a cluster, how they are decided,
the entities of removed rows, and the largest cluster (which the split stage keeps in one split as a single
group).

Conflicts. Only task rows take part (a pretraining row's label or tags are not used by any model); a cluster's
task rows are always one keep unit (under ``keep_one_per: role`` its task side, under ``cluster`` the whole
cluster). A cluster has a *label conflict* when its task rows with a ``label`` carry two or more distinct
labels (near copies too: a label belongs to the whole document); the conflict is *exact* when two task rows
of one normalized text disagree (the same document labelled twice), else *near* (only rows with different
words disagree). It has a *tags conflict* when two task rows with the same normalized text carry different
``tags`` lists (copies of one sentence tagged differently); near copies with other words are not compared,
since their tags cannot be aligned position by position.

``dedup.conflict_policy`` decides them by evidence, never by row order:

- ``majority`` (default). Label conflict: each task row with a label is one vote; the label with strictly
  more votes than any other wins (a plurality: 2 of A, 1 of B, 1 of C gives A). Tags conflict: within each
  text with disagreeing copies, the copies with the most entities win (a copy that lost an entity loses).
  Rows that lose either vote (a row without a label also loses a label vote) cannot be kept; the kept task
  row is the first in keep order among the rest, and the losers stay ``exact`` / ``near`` duplicates of
  their unit (their text is a copy; only which copy survives is decided here). A tie for the most label votes,
  a tie for the most entities between copies with different tags, or no row winning both votes leaves no
  evidence: every row of the keep unit is dropped (kind ``conflict``).
- ``drop_all``: every conflicting cluster's keep unit is dropped (kind ``conflict``).

Dropping a keep unit drops the cluster's task rows under ``keep_one_per: role`` (its pretraining copies stay
pretraining text) and the whole cluster under ``keep_one_per: cluster``. Each conflicting cluster gets a rule:
``majority`` (a label vote decided it; a tags conflict in it, if any, was decided by entities), ``most_entities``
(tags only), ``tie``, ``no_common_winner`` (the label and the entity votes chose different rows) or
``drop_all``; the first two keep a task row, the others drop the unit.

Entities are IOB2 chunks counted as conlleval (CoNLL-2000 ``conlleval`` ``startOfChunk``) counts them: a chunk
starts at every ``B-`` tag and at an ``I-`` tag whose predecessor is ``O``, the sentence start or a tag of
another type.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from tasks.config.corpus.dedup import DedupParams
    from tasks.dedup.corpus import Corpus
    from tasks.dedup.labels import RowLabels
    from tasks.dedup.signatures import DocSignatures

KEEPING_RULES = ("majority", "most_entities")  # rules that keep a task row; the others drop the keep unit
RULES = (*KEEPING_RULES, "tie", "no_common_winner", "drop_all")  # every conflict_rule, in metrics order


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
    """Cluster roots (row index of the cluster's first row in keep order) with each kind of conflict.

    ``votes``: per label-conflict root, ``{label: task rows of the cluster carrying it}``. ``tag_groups``: per
    tags conflict, ``(root, text md5) -> [task rows of that normalized text with tags]`` (row order)."""

    labels: set[int]
    labels_exact: set[int]  # the label conflicts where two task rows of one normalized text disagree
    tags: set[int]
    votes: dict[int, dict[str, int]]
    tag_groups: dict[tuple[int, str], list[int]]
    row_tags: dict[int, list[str]]  # the tags of every task row that has them

    def any(self) -> set[int]:
        """Roots with either kind."""
        return self.labels | self.tags


def find_conflicts(corpus: Corpus, docs: DocSignatures, cluster: np.ndarray) -> Conflicts:
    """Label and tags conflicts of every cluster (see the module docstring); ``cluster[i]`` is row ``i``'s root."""
    label_rows: dict[int, list[int]] = defaultdict(list)
    tag_rows: dict[tuple[int, str], list[int]] = defaultdict(list)
    task = [i for i, role in enumerate(corpus.role) if role == "task"]
    row_tags = {i: tags for i, tags in zip(task, corpus.tags_at(task)) if tags is not None}
    for i in task:
        root = int(cluster[i])
        if corpus.label[i] is not None:
            label_rows[root].append(i)
        if i in row_tags:
            tag_rows[(root, docs.text_hash[i])].append(i)
    labels = {root for root, rows in label_rows.items() if len({corpus.label[i] for i in rows}) > 1}
    by_text: dict[tuple[int, str], set[str]] = defaultdict(set)
    for root in labels:
        for i in label_rows[root]:
            by_text[(root, docs.text_hash[i])].add(corpus.label[i])
    tag_groups = {key: rows for key, rows in tag_rows.items() if len({tuple(row_tags[i]) for i in rows}) > 1}
    return Conflicts(
        labels=labels,
        labels_exact={root for (root, _), values in by_text.items() if len(values) > 1},
        tags={root for root, _ in tag_groups},
        votes={root: dict(sorted(Counter(corpus.label[i] for i in label_rows[root]).items())) for root in labels},
        tag_groups=tag_groups,
        row_tags=row_tags,
    )


@dataclass(frozen=True)
class Resolution:
    """What ``conflict_policy`` decided: ``losers`` (``(rows,)`` bool, rows that may not be kept), the roots whose
    keep unit is dropped, and the rule of each conflicting root (see the module docstring)."""

    losers: np.ndarray
    dropped: set[int]
    rule: dict[int, str]


def resolve(corpus: Corpus, cluster: np.ndarray, conflicts: Conflicts, cfg: DedupParams) -> Resolution:
    """Decide every conflicting cluster under ``cfg.conflict_policy`` (``majority`` or ``drop_all``)."""
    losers = np.zeros(len(cluster), dtype=bool)
    if cfg.conflict_policy == "drop_all":
        return Resolution(losers, conflicts.any(), dict.fromkeys(conflicts.any(), "drop_all"))
    tied = set()
    winner = {}
    for root, votes in conflicts.votes.items():
        most = max(votes.values())
        leaders = [label for label, n in votes.items() if n == most]
        if len(leaders) > 1:
            tied.add(root)
        winner[root] = leaders[0]
    for (root, _), rows in conflicts.tag_groups.items():
        entities = [entity_count(conflicts.row_tags[i]) for i in rows]
        most = max(entities)
        if len({tuple(conflicts.row_tags[i]) for i, n in zip(rows, entities) if n == most}) > 1:
            tied.add(root)
        losers[[i for i, n in zip(rows, entities) if n < most]] = True
    has_winner = set()
    for i in np.flatnonzero(np.isin(cluster, list(conflicts.any()))).tolist():  # the rows of conflicting clusters
        root = int(cluster[i])
        if root in winner and corpus.role[i] == "task" and corpus.label[i] != winner[root]:
            losers[i] = True
        if corpus.role[i] == "task" and not losers[i]:
            has_winner.add(root)
    rule = {}
    for root in conflicts.any():
        if root in tied:
            rule[root] = "tie"
        elif root not in has_winner:
            rule[root] = "no_common_winner"
        else:
            rule[root] = "majority" if root in conflicts.labels else "most_entities"
    return Resolution(losers, {root for root, r in rule.items() if r not in KEEPING_RULES}, rule)


def drop_conflicting(corpus: Corpus, labels: RowLabels, dropped: set[int], cfg: DedupParams) -> None:
    """Set the kind of every row of a dropped keep unit (``Resolution.dropped``) to ``conflict``: the cluster's
    task rows under ``keep_one_per: role``, all its rows under ``cluster``."""
    hit = np.isin(labels.cluster, list(dropped))
    if cfg.keep_one_per != "cluster":
        hit &= np.asarray(corpus.role, object) == "task"
    labels.kind[hit] = "conflict"


def largest_component(corpus: Corpus, labels: RowLabels) -> dict[str, Any]:
    """The cluster with the most rows (ties: smallest ``cluster_id``): ``{cluster_id, docs, sources, groups}``.

    ``groups`` counts its distinct ``(source, group)`` pairs (a row without a group is its own), the units the
    split stage would otherwise have been free to place apart.
    """
    if not len(labels.cluster):
        return {"cluster_id": None, "docs": 0, "sources": 0, "groups": 0}
    size = np.bincount(labels.cluster, minlength=len(labels.cluster))
    root = min(np.flatnonzero(size == size.max()).tolist(), key=lambda r: corpus.doc_id[r])
    rows = np.flatnonzero(labels.cluster == root).tolist()
    groups = {(corpus.source[i], corpus.doc_id[i] if g is None else g) for i, g in zip(rows, corpus.group_at(rows))}
    return {
        "cluster_id": corpus.doc_id[root],
        "docs": len(rows),
        "sources": len({corpus.source[i] for i in rows}),
        "groups": len(groups),
    }
