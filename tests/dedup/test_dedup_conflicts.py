"""dedup label and tag conflicts decided by evidence (``conflict_policy: majority``: label votes, most entities,
a tie drops) and by ``drop_all``; every expected value worked out by hand from the small inputs built here
(``text(p, n)``: ``n`` distinct words, 5-word shingles, so ``n`` words give ``n - 4`` shingles)."""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

import pytest

from dedup_fixtures import make_cfg, text, write_rows
from tasks.config import ParamsError, load_params

ROOT = Path(__file__).resolve().parents[2]
NO_RULES = {"majority": 0, "most_entities": 0, "tie": 0, "no_common_winner": 0, "drop_all": 0}


def majority_corpus(tmp_path: Path) -> tuple[list[str], list[str]]:
    """Task: X+ (X with a 21st word: the longest, first in keep order) labelled politics, X sport twice, Y tech.
    J(X+, X) = 16 / 17 shingles = 0.94: one cluster. Pretrain: X+ and Y labelled business (pretraining rows never
    vote: Y's cluster has no conflict)."""
    x, y = text("x", 20), text("y", 20)
    task = write_rows(
        tmp_path,
        "cls",
        [
            {"text": text("x", 21), "label": "politics"},
            {"text": x, "label": "sport"},
            {"text": x, "label": "sport"},
            {"text": y, "label": "tech"},
        ],
    )
    pre = write_rows(
        tmp_path, "pre", [{"text": text("x", 21), "label": "business"}, {"text": y, "label": "business"}], "pretrain"
    )
    return task, pre


def test_label_conflict_keeps_the_majority_label_not_the_first_row_in_keep_order(tmp_path, caplog, run_dedup):
    task, pre = majority_corpus(tmp_path)
    with caplog.at_level(logging.WARNING, logger="clozeline.dedup"):
        metrics, duplicate, records = run_dedup(tmp_path, make_cfg()).flags()
    # votes politics 1, sport 2: the longest row (politics) loses; the kept row is the first sport row
    assert [duplicate[d] for d in task + pre] == [True, False, True, False, False, False]
    record = records[task[0]]  # cluster_id: the first row in keep order before the vote
    assert record["kept"] == {"task": task[1], "pretrain": pre[0]}
    assert [(m["doc_id"], m["kind"]) for m in record["members"]] == [
        (task[1], "kept"),
        (pre[0], "kept"),
        (task[0], "near"),
        (task[2], "exact"),
    ]
    assert (record["label_conflict"], record["label_conflict_exact"], record["tags_conflict"]) == (True, False, False)
    assert (record["label_votes"], record["conflict_rule"]) == ({"politics": 1, "sport": 2}, "majority")
    assert (records[task[3]]["label_votes"], records[task[3]]["conflict_rule"]) == ({}, None)
    cls = metrics["sources"]["cls"]
    assert (
        cls["label_conflict_clusters"],
        cls["label_conflict_clusters_exact"],
        cls["label_conflict_clusters_near"],
    ) == (1, 0, 1)
    assert (cls["near_duplicates"], cls["exact_duplicates"], cls["conflict_dropped"]) == (1, 1, 0)
    assert cls["lost_vote_docs"] == 1
    assert cls["docs_in"] == cls["docs_kept"] + cls["docs_removed"] == 2 + 2
    assert metrics["sources"]["pre"]["label_conflict_clusters"] == 0  # its row does not take part
    assert metrics["all"]["conflict_rules"] == {**NO_RULES, "majority": 1}
    (warning,) = [r for r in caplog.records if r.levelno == logging.WARNING]
    want = "1 cluster(s) with disagreeing labels (0 between copies of one text) and 0 with disagreeing tags "
    assert want + "(conflict_policy=majority: majority 1)" in warning.message

    # keep_one_per: cluster: one row for the cluster, still the first sport row; the pretraining copy goes
    metrics, duplicate, records = run_dedup(tmp_path, make_cfg(keep_one_per="cluster")).flags()
    assert [duplicate[d] for d in task + pre] == [True, False, True, False, True, True]
    assert records[task[0]]["kept"] == {"task": task[1]}
    assert metrics["sources"]["cls"]["lost_vote_docs"] == 1


def tie_corpus(tmp_path: Path) -> tuple[list[str], list[str]]:
    """Task: Z labelled b, a, c, a (four exact copies); W labelled a, b. Pretrain: W labelled a."""
    z, w = text("z", 20), text("w", 20)
    rows = [{"text": z, "label": label} for label in "baca"] + [{"text": w, "label": label} for label in "ab"]
    return write_rows(tmp_path, "cls", rows), write_rows(tmp_path, "pre", [{"text": w, "label": "a"}], "pretrain")


def test_a_plurality_wins_and_a_tie_drops_the_keep_unit(tmp_path, run_dedup):
    task, pre = tie_corpus(tmp_path)
    metrics, duplicate, records = run_dedup(tmp_path, make_cfg()).flags()
    # Z: a 2, b 1, c 1: a wins with half the votes; kept: the first a row (cls:001). W: a 1, b 1: both task
    # rows dropped; the pretraining copy of W stays pretraining text under keep_one_per: role.
    assert [duplicate[d] for d in task + pre] == [True, False, True, True, True, True, False]
    z, w = records[task[0]], records[task[4]]
    assert (z["kept"], z["label_votes"]) == ({"task": task[1]}, {"a": 2, "b": 1, "c": 1})
    assert z["conflict_rule"] == "majority"
    assert (w["kept"], w["label_votes"], w["conflict_rule"]) == ({"pretrain": pre[0]}, {"a": 1, "b": 1}, "tie")
    # members: the unit's first rows in keep order first (dropped or not), then by role and doc_id
    assert [(m["doc_id"], m["kind"]) for m in w["members"]] == [
        (task[4], "conflict"),
        (pre[0], "kept"),
        (task[5], "conflict"),
    ]
    cls = metrics["sources"]["cls"]
    assert (cls["exact_duplicates"], cls["conflict_dropped"], cls["docs_removed"], cls["docs_kept"]) == (3, 2, 5, 1)
    assert (cls["label_conflict_clusters_exact"], cls["label_conflict_clusters_near"]) == (2, 0)
    assert cls["lost_vote_docs"] == 2  # cls:000 (b) and cls:002 (c)
    assert metrics["all"]["conflict_rules"] == {**NO_RULES, "majority": 1, "tie": 1}

    # the tie drops the whole cluster
    metrics, duplicate, _ = run_dedup(tmp_path, make_cfg(keep_one_per="cluster")).flags()
    assert [duplicate[d] for d in task + pre] == [True, False, True, True, True, True, True]
    assert metrics["sources"]["pre"]["conflict_dropped"] == 1

    metrics, duplicate, _ = run_dedup(tmp_path, make_cfg(conflict_policy="drop_all")).flags()
    assert [duplicate[d] for d in task + pre] == [True] * 6 + [False]
    cls = metrics["sources"]["cls"]
    assert (cls["conflict_dropped"], cls["exact_duplicates"], cls["lost_vote_docs"], cls["docs_kept"]) == (6, 0, 0, 0)
    assert metrics["all"]["conflict_rules"] == {**NO_RULES, "drop_all": 2}


def test_a_tags_conflict_keeps_the_copy_with_the_most_entities_and_a_tie_drops(tmp_path, run_dedup):
    paris, rome = ["Paris", "is", "nice"], ["Rome", "is", "far"]
    ids = write_rows(
        tmp_path,
        "ner",
        [
            {"tokens": paris, "tags": ["O", "O", "O"]},  # the entity missed, and first in keep order (doc_id)
            {"tokens": paris, "tags": ["B-LOC", "O", "O"]},
            {"tokens": [w.upper() for w in paris], "tags": ["B-LOC", "O", "O"]},  # same normalized text
            {"tokens": rome, "tags": ["B-LOC", "O", "O"]},
            {"tokens": rome, "tags": ["B-PER", "O", "O"]},  # one entity each, of another type: a tie
        ],
    )
    metrics, duplicate, records = run_dedup(tmp_path, make_cfg()).flags()
    assert [duplicate[d] for d in ids] == [True, False, True, True, True]
    digest = {
        tags: hashlib.md5(json.dumps(list(tags)).encode()).hexdigest()[:16]
        for tags in (("B-LOC", "O", "O"), ("O", "O", "O"))
    }
    record = records[ids[0]]
    assert (record["kept"], record["conflict_rule"], record["label_votes"]) == ({"task": ids[1]}, "most_entities", {})
    assert [(m["doc_id"], m["kind"], m["tags_digest"]) for m in record["members"]] == [
        (ids[1], "kept", digest[("B-LOC", "O", "O")]),
        (ids[0], "exact", digest[("O", "O", "O")]),
        (ids[2], "exact", digest[("B-LOC", "O", "O")]),
    ]
    assert (records[ids[3]]["kept"], records[ids[3]]["conflict_rule"]) == ({}, "tie")
    counts = metrics["sources"]["ner"]
    # entities: Paris 0 + 1 + 1, Rome 1 + 1 = 4; removed: ner:000 (0), ner:002 (1) and both Rome rows (2)
    assert (counts["tags_conflict_clusters"], counts["entities_in"], counts["entities_removed"]) == (2, 4, 3)
    assert (counts["exact_duplicates"], counts["conflict_dropped"], counts["lost_vote_docs"]) == (2, 2, 1)
    assert metrics["all"]["conflict_rules"] == {**NO_RULES, "most_entities": 1, "tie": 1}

    metrics, duplicate, _ = run_dedup(tmp_path, make_cfg(conflict_policy="drop_all")).flags()
    assert [duplicate[d] for d in ids] == [True] * 5
    counts = metrics["sources"]["ner"]
    assert (counts["conflict_dropped"], counts["exact_duplicates"], counts["entities_removed"]) == (5, 0, 4)
    assert counts["labelled_docs_removed"] == 5


def test_rows_with_labels_and_tags_whose_votes_pick_different_rows_are_dropped(tmp_path, run_dedup):
    anna = ["Anna", "is", "here"]
    ids = write_rows(
        tmp_path,
        "both",
        [
            {"tokens": anna, "label": "A", "tags": ["O", "O", "O"]},
            {"tokens": anna, "label": "A", "tags": ["O", "O", "O"]},
            {"tokens": anna, "label": "B", "tags": ["B-PER", "O", "O"]},
        ],
    )
    metrics, duplicate, records = run_dedup(tmp_path, make_cfg()).flags()
    # label vote: A (rows 0, 1); entity vote: row 2 (1 entity against 0): no row wins both
    assert [duplicate[d] for d in ids] == [True, True, True]
    assert records[ids[0]]["conflict_rule"] == "no_common_winner"
    assert metrics["sources"]["both"]["conflict_dropped"] == 3
    assert metrics["all"]["conflict_rules"] == {**NO_RULES, "no_common_winner": 1}


def test_keep_one_is_refused_with_the_key_named():
    with pytest.raises(ParamsError, match=r"dedup\.conflict_policy: Value error, 'keep_one' was removed"):
        load_params(ROOT / "params.yaml", overrides={"dedup.conflict_policy": "keep_one"})
    with pytest.raises(ParamsError, match=r"dedup\.conflict_policy: Input should be 'majority' or 'drop_all'"):
        load_params(ROOT / "params.yaml", overrides={"dedup.conflict_policy": "first"})
