"""dedup per-source policies, entities removed and the largest cluster (conflicts: test_dedup_conflicts.py);
every expected value worked out by hand from the small inputs built here."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from dedup_fixtures import make_cfg, text, write_rows
from tasks.dedup import policy
from tasks.dedup.conflicts import entity_count

# ------------------------------------------------------------------------------------------- entity count


def test_entity_count_follows_conlleval_chunk_starts():
    # I-PER at the start: 1; I-PER continues; O; I-LOC after O: 2; B-LOC: 3; I-LOC continues; I-ORG after a
    # LOC tag: 4; B-ORG after I-ORG: 5.
    assert entity_count(["I-PER", "I-PER", "O", "I-LOC", "B-LOC", "I-LOC", "I-ORG", "B-ORG"]) == 5
    assert entity_count(["O", "O"]) == entity_count([]) == entity_count(None) == 0


# --------------------------------------------------------------------------------------- source policies


NER_ROWS = [
    {"tokens": ["Thanks", "John", "Smith"], "tags": ["O", "B-PER", "I-PER"]},  # boilerplate, 1 entity, 3 words
    {"tokens": ["Thanks", "John", "Smith"], "tags": ["O", "B-PER", "I-PER"]},
    {"tokens": ["thanks", "john", "smith"], "tags": ["O", "B-PER", "I-PER"]},
    {
        "tokens": "Alice Brown flew from Paris to Berlin on Monday".split(),
        "tags": ["B-PER", "I-PER", "O", "O", "B-LOC", "O", "B-LOC", "O", "O"],
    },  # 3 entities, 9 words
    {
        "tokens": "Alice Brown flew from Paris to Berlin on Monday".split(),
        "tags": ["B-PER", "I-PER", "O", "O", "B-LOC", "O", "B-LOC", "O", "O"],
    },
]


def test_exact_min_words_protects_short_ner_boilerplate_and_its_entities(tmp_path, run_dedup):
    ids = write_rows(tmp_path, "ner", NER_ROWS)
    metrics, duplicate, _ = run_dedup(tmp_path, make_cfg()).flags()
    # default policy: the two copies of the 3-word sentence and the copy of the 9-word one are removed,
    # with 1 + 1 + 3 entities; entities in the source: 3 x 1 + 2 x 3 = 9.
    counts = metrics["sources"]["ner"]
    assert [duplicate[d] for d in ids] == [False, True, True, False, True]
    assert (counts["entities_in"], counts["entities_removed"], counts["labelled_docs_removed"]) == (9, 5, 3)
    assert counts["exact_protected_docs"] == 0

    metrics, duplicate, _ = run_dedup(tmp_path, make_cfg(source_policy={"ner": {"exact_min_words": 4}})).flags()
    counts = metrics["sources"]["ner"]
    assert [duplicate[d] for d in ids] == [False, False, False, False, True]
    assert (counts["entities_in"], counts["entities_removed"], counts["labelled_docs_removed"]) == (9, 3, 1)
    assert (counts["exact_protected_docs"], counts["exact_duplicates"], counts["docs_kept"]) == (3, 1, 4)
    assert counts["policy"] == {"exact": True, "near": True, "exact_min_words": 4}


def policy_corpus(tmp_path: Path) -> dict[str, list[str]]:
    """``nonear``: U twice, W. ``noexact``: T twice. ``open`` (default policy): a near copy of U (Jaccard
    25/27: 30 words, the last one changed, 26 shingles each, 25 shared), W, T."""
    u, w, t = text("u", 30), text("w", 30), text("t", 30)
    return {
        "nonear": write_rows(tmp_path, "nonear", [{"text": u}, {"text": u}, {"text": w}]),
        "noexact": write_rows(tmp_path, "noexact", [{"text": t}, {"text": t}]),
        "open": write_rows(tmp_path, "open", [{"text": text("u", 30, {29: "zzz"})}, {"text": w}, {"text": t}]),
    }


def test_exact_off_and_near_off_per_source_and_pairs_need_both_policies(tmp_path, run_dedup):
    ids = policy_corpus(tmp_path)
    cfg = make_cfg(source_policy={"nonear": {"near": False}, "noexact": {"exact": False}})
    metrics, duplicate, records = run_dedup(tmp_path, cfg).flags()
    # nonear: its second U is an exact copy; open's near copy of U stays (nonear allows no near merge).
    # W: exact copy across nonear and open (both allow exact); nonear:002 < open:001 is kept.
    # T: noexact allows no exact merge, and identical texts are never near-merged: all three copies stay.
    assert [duplicate[d] for d in ids["nonear"]] == [False, True, False]
    assert [duplicate[d] for d in ids["noexact"]] == [False, False]
    assert [duplicate[d] for d in ids["open"]] == [False, True, False]
    assert [(m["doc_id"], m["kind"]) for m in records[ids["nonear"][2]]["members"]] == [
        (ids["nonear"][2], "kept"),
        (ids["open"][1], "exact"),
    ]
    assert metrics["sources"]["noexact"]["exact_protected_docs"] == 2
    assert metrics["sources"]["noexact"]["policy"] == {"exact": False, "near": True, "exact_min_words": 0}
    assert (metrics["all"]["exact_duplicates"], metrics["all"]["near_duplicates"]) == (2, 0)
    # the three T copies meet as LSH candidates (equal signatures) and are skipped; nothing else is signed
    # but open's U copy and W (nonear's rows have near off)
    assert (metrics["lsh"]["identical_text_pairs"], metrics["lsh"]["merged_pairs"]) == (3, 0)
    # the same corpus under the default policy: U copy (exact), U near copy, W copy, two T copies removed
    metrics, _, _ = run_dedup(tmp_path, make_cfg()).flags()
    assert (metrics["all"]["exact_duplicates"], metrics["all"]["near_duplicates"]) == (4, 1)


def test_source_policy_overrides_the_default_key_by_key_and_unknown_sources_fail(tmp_path, run_dedup):
    cfg = make_cfg(
        default_policy={"exact": True, "near": True, "exact_min_words": 4}, source_policy={"ner": {"near": False}}
    )
    resolved = policy.resolve(cfg, ["ner", "news"])
    assert resolved["ner"].model_dump() == {"exact": True, "near": False, "exact_min_words": 4}
    assert resolved["news"].model_dump() == {"exact": True, "near": True, "exact_min_words": 4}
    write_rows(tmp_path, "ner", NER_ROWS)
    with pytest.raises(ValueError, match=r"dedup\.source_policy\.nre: no ingest source of that name"):
        run_dedup(tmp_path, make_cfg(source_policy={"nre": {"exact": False}}))


# ----------------------------------------------------------------------------------------- largest cluster


def test_largest_component_of_a_chain_whose_ends_are_not_similar(tmp_path, caplog, run_dedup):
    # 100 fixed-width words, 96 shingles each. B = A with its last 6 words changed: 90 shared shingles,
    # J = 90 / 102 = 0.882. C = B with its first 6 changed: J(B, C) = 0.882, but J(A, C) = 84 / 108 = 0.778.
    a = text("w", 100)
    b = text("w", 100, {k: f"x{k:03d}" for k in range(94, 100)})
    c = text("w", 100, {**{k: f"x{k:03d}" for k in range(94, 100)}, **{k: f"y{k:03d}" for k in range(6)}})
    first = write_rows(
        tmp_path,
        "s1",
        [{"text": a, "group": "g1"}, {"text": b, "group": "g1"}, {"text": text("p", 20)}, {"text": text("p", 20)}],
    )
    second = write_rows(tmp_path, "s2", [{"text": c, "group": "g2"}])
    with caplog.at_level(logging.WARNING, logger="clozeline.dedup"):
        metrics, _, records = run_dedup(tmp_path, make_cfg(warn_component_docs=2)).flags()
    chain = records[first[0]]
    assert chain["edges"] == [[first[0], first[1], round(90 / 102, 6)], [first[1], second[0], round(90 / 102, 6)]]
    assert [first[0], second[0], round(84 / 108, 6)] in chain["pairs"]
    assert metrics["largest_component"] == {"cluster_id": first[0], "docs": 3, "sources": 2, "groups": 2}
    (warning,) = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert f"cluster {first[0]} chains 3 docs from 2 source(s) and 2 group(s)" in warning.message
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="clozeline.dedup"):
        run_dedup(tmp_path, make_cfg(warn_component_docs=3))
    assert not [r for r in caplog.records if r.levelno == logging.WARNING]
