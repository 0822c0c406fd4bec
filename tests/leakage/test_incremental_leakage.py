"""Incremental leakage (issue 35 items 1-2): a run after new training docs arrive audits only their texts, a changed
eval set is audited for its added docs alone, a removed doc leaves the outputs, and every output (files and metrics)
equals a from-scratch run with ``leakage.incremental: false`` (the scan as it was before the cache) byte for byte.

Each test keeps two roots: ``inc`` is run before and after the change (the second run is the incremental one),
``full`` only after it, with the cache off.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from leakage_fixtures import PARAGRAPH, TRAIN_TEXT, filler, frame, night, outputs, params, run
from stage_helpers import RecordingLog
from tasks.common.matching import minhash
from tasks.leakage.lexical import residual
from tasks.leakage.lexical.words import make_side, tokenize
from tasks.leakage.outputs import eval_rows
from tasks.leakage.planted import cache as plant_cache
from tasks.leakage.planted import recall
from tasks.leakage.planted.variants import make as make_plants
from tasks.leakage.scan import incremental
from tasks.leakage.scan.incremental import Result, gram_rows

NEW_EVAL = " ".join(filler(300, 4).split()[100:140])  # an eval doc added later, quoted by the cached doc "held"


def from_scratch(tmp_path, frames) -> dict:
    metrics, logged = run(tmp_path / "full", frames, incremental=False)
    assert logged["leakage.mode"] == "full" and logged["leakage.reason"] == "leakage.incremental: false"
    return outputs(tmp_path / "full", metrics)


@pytest.fixture()
def inc(tmp_path):
    """A root audited once (no cache yet: a full audit of its 6 distinct training texts)."""
    _, logged = run(tmp_path / "inc", night())
    assert logged["leakage.mode"] == "full" and logged["incremental"] == {"texts_audited": 6, "full": 1}
    return tmp_path / "inc"


def test_new_docs_alone_are_audited_and_outputs_equal_a_from_scratch_run(inc, tmp_path):
    new = [
        ("new-copy", "train", PARAGRAPH + " " + filler(20, 5)),  # leaks: removed
        ("new-clean", "heldout", filler(100, 6)),
        ("tr-1-copy", "train", TRAIN_TEXT),  # a task train text, now pretraining: cached, and removed
        ("common-again", "train", filler(200, 3)),
    ]
    frames = night(new)
    metrics, logged = run(inc, frames)
    assert logged["leakage.mode"] == "incremental"
    assert logged["incremental"] == {
        "texts_audited": 2,
        "full": 0,
        "texts_rescanned": 0,
        "eval_docs_added": 0,
        "eval_docs_removed": 0,
    }  # new-copy and new-clean; the eval sets as they were
    assert outputs(inc, metrics) == from_scratch(tmp_path, frames)
    removed = [json.loads(line)["doc_id"] for line in (inc / "data/leakage/removed.jsonl").read_text().splitlines()]
    assert removed == ["new-copy", "rewrapped", "tr-1-copy", "verbatim"]
    assert run(inc, frames)[1]["incremental"]["texts_audited"] == 0  # nothing new: nothing audited


def test_an_edited_eval_doc_is_forgotten_and_its_new_text_scanned_against_every_cached_text(inc, tmp_path):
    frames = night(eval_text=PARAGRAPH.replace("Tuesday", "Wednesday"))
    metrics, logged = run(inc, frames)
    assert logged["leakage.mode"] == "incremental"
    assert logged["incremental"] == {
        "texts_audited": 0,
        "full": 0,
        "texts_rescanned": 6,
        "eval_docs_added": 1,
        "eval_docs_removed": 1,
    }  # ev-par's new text in, its old text out
    assert outputs(inc, metrics) == from_scratch(tmp_path, frames)


def test_eval_docs_added_and_removed_with_new_training_docs_equal_a_from_scratch_run(inc, tmp_path):
    """A night where the eval sets gain a doc (quoted by a cached pretraining doc and by a new one) and lose one
    (whose matches and residual n-grams must leave the cache), while training docs arrive and leave."""
    frames = night(
        [
            ("quotes-new-eval", "train", filler(25, 7) + " " + NEW_EVAL + " " + filler(25, 8)),
            ("tr-copy", "train", TRAIN_TEXT),
        ],
        removed=("common",),
    )
    task = frames[0]
    frames[0] = pd.concat(
        [task[task["doc_id"] != "ev-short"], frame("task", "task", [("ev-new", "test", NEW_EVAL)])], ignore_index=True
    )
    metrics, logged = run(inc, frames)
    assert logged["incremental"] == {
        "texts_audited": 1,
        "full": 0,
        "texts_rescanned": 6,
        "eval_docs_added": 1,
        "eval_docs_removed": 1,
    }  # common's text is same-as-common's: all 6 still present
    assert outputs(inc, metrics) == from_scratch(tmp_path, frames)
    table = pd.read_parquet(inc / "data/leakage/table.parquet")
    assert set(table["eval_doc"]) == {"ev-par", "ev-new"}
    assert {"quotes-new-eval", "held"} <= set(table.loc[table["eval_doc"] == "ev-new", "train_doc"])
    cached = set(pq.read_table(inc / "data/leakage_cache/matches.parquet").column("eval_doc").to_pylist())
    assert cached == {"ev-par", "ev-new"}  # ev-short's matches forgotten
    assert pq.read_table(inc / "data/leakage_cache/evals.parquet").column("doc_id").to_pylist() == ["ev-new", "ev-par"]
    run(tmp_path / "fresh", frames)  # no cache yet: every text scanned, the cache written from fresh results
    for name in ("texts.parquet", "grams.parquet", "matches.parquet"):  # the rows mapped from the old cache's
        assert pq.read_table(inc / "data/leakage_cache" / name).equals(
            pq.read_table(tmp_path / "fresh/data/leakage_cache" / name)
        )


def test_changed_detector_param_forces_a_full_audit_and_another_does_not(inc):
    assert run(inc, night(), pretrain_action="flag")[1]["incremental"]["texts_audited"] == 0
    logged = run(inc, night(), passage_threshold=0.6)[1]
    assert logged["leakage.reason"] == "the cache fingerprint changed (params)"


def test_removed_doc_leaves_the_outputs_and_the_cache(inc, tmp_path):
    frames = night(removed=("verbatim",))
    metrics, logged = run(inc, frames)
    assert logged["incremental"]["texts_audited"] == 0
    assert outputs(inc, metrics) == from_scratch(tmp_path, frames)
    assert pq.read_table(inc / "data/leakage_cache/texts.parquet").num_rows == 5
    matched = set(pq.read_table(inc / "data/leakage_cache/matches.parquet").column("eval_doc").to_pylist())
    assert matched == {"ev-par", "ev-short"}  # rewrapped and tr-1 still match


def test_a_damaged_or_missing_matches_file_forces_a_full_audit(inc, tmp_path):
    matches = inc / "data/leakage_cache/matches.parquet"
    data = bytearray(matches.read_bytes())
    data[len(data) // 3] ^= 0x01  # a page of the matches (written with page CRCs), not the texts' stamp
    matches.write_bytes(bytes(data))
    metrics, logged = run(inc, night())
    assert logged["leakage.mode"] == "full" and "matches.parquet cannot be used" in logged["leakage.reason"]
    assert outputs(inc, metrics) == from_scratch(tmp_path, night())
    (inc / "data/leakage_cache/matches.parquet").unlink()
    assert run(inc, night())[1]["incremental"] == {"texts_audited": 6, "full": 1}
    (inc / "data/leakage_cache/evals.parquet").unlink()  # a cache from before the eval docs were kept
    logged = run(inc, night())[1]
    assert logged["incremental"] == {"texts_audited": 6, "full": 1} and "evals.parquet" in logged["leakage.reason"]


def test_the_residual_n_grams_round_trip_through_the_gram_table(inc, tmp_path):
    import pyarrow as pa

    folder = inc / "data/leakage_cache"
    vocabulary = pq.read_table(folder / "grams.parquet").column("gram").to_pylist()
    texts = pq.read_table(folder / "texts.parquet")
    assert vocabulary == sorted(vocabulary) and len(vocabulary) == len(set(vocabulary)) > 0
    assert {len(g.split(residual.SEP)) for g in vocabulary} == {8}  # residual.ngram_words words each
    held = [sorted(vocabulary[k] for k in rows) for rows in texts.column("grams").to_pylist()]
    loaded = incremental.text_results(texts, vocabulary)
    assert [sorted(r.grams) for r in loaded.values()] == held
    bad = texts.set_column(
        texts.schema.get_field_index("grams"),
        "grams",
        pa.array([[len(vocabulary)]] * texts.num_rows, pa.list_(pa.int32())),
    )
    pq.write_table(bad.replace_schema_metadata(texts.schema.metadata), folder / "texts.parquet")
    logged = run(inc, night())[1]  # a row number past the gram table: a full audit, not a wrong n-gram
    assert logged["leakage.mode"] == "full" and "texts.parquet cannot be used" in logged["leakage.reason"]
    (folder / "grams.parquet").unlink()
    logged = run(inc, night())[1]
    assert logged["leakage.mode"] == "full" and "grams.parquet cannot be used" in logged["leakage.reason"]


def test_gram_rows_map_the_rows_read_onto_a_vocabulary_that_grew_before_them():
    old = ["b", "d", "f"]
    read = {"b", "f"}
    kept = Result([], True, read, None, (read, np.array([0, 2]), old))
    replaced = Result([], True, {"a", "d"}, None, ({"d"}, np.array([1]), old))  # its set changed since read
    fresh = Result([], True, {"f"}, None)
    rows = gram_rows([kept, replaced, fresh], ["a", "b", "d", "f"])
    assert [list(r) for r in rows] == [[1, 3], [0, 2], [3]]


def plants_of(eval_text: str = PARAGRAPH):
    """The eval rows of ``night(eval_text=...)``, their detector side and their planted copies."""
    rows = pd.concat(night(eval_text=eval_text), ignore_index=True)
    evals = eval_rows(rows)
    side = make_side([tokenize(t) for t in evals["text"]], minhash.WordHashes())
    pre = rows[rows["role"] == "pretrain"]
    plants, _ = make_plants(evals, list(pre["text"]), list(pre["doc_id"]), params().planted, {}.get)
    return evals, side, plants


def test_planted_copies_seen_before_are_taken_from_the_cache_and_equal_a_fresh_scan(tmp_path):
    evals, side, plants = plants_of()
    fresh = recall.found_by(plants, side, params().lexical, tokenize)
    assert any(fresh) and len(plants) > 4
    log = RecordingLog()
    assert plant_cache.found_by(plants, evals, side, params(), tokenize, tmp_path, log) == fresh
    assert log.logged["planted_cache"] == {"plants_stored": 0, "plants_scanned": len(plants)}
    assert plant_cache.found_by(plants, evals, side, params(), tokenize, tmp_path, log) == fresh
    assert log.logged["planted_cache"] == {"plants_stored": len(plants), "plants_scanned": 0}
    # one eval doc's text changes: its copies (new texts, and keyed by the new eval text) alone are scanned
    evals2, side2, plants2 = plants_of(PARAGRAPH.replace("Tuesday", "Wednesday"))
    changed = evals2["text"].tolist().index(PARAGRAPH.replace("Tuesday", "Wednesday"))
    got = plant_cache.found_by(plants2, evals2, side2, params(), tokenize, tmp_path, log)
    assert got == recall.found_by(plants2, side2, params().lexical, tokenize)
    assert log.logged["planted_cache"]["plants_scanned"] == sum(p.eval_index == changed for p in plants2) > 0
    # the old copies against the changed eval text: keyed by both texts, they are scanned again, except those
    # whose text a new copy of that doc has too (the variants that do not hold the changed word)
    got = plant_cache.found_by(plants, evals2, side2, params(), tokenize, tmp_path, log)
    assert got == recall.found_by(plants, side2, params().lexical, tokenize)
    kept = {p.text for p in plants2 if p.eval_index == changed}
    again = sum(p.eval_index == changed and p.text not in kept for p in plants)
    assert log.logged["planted_cache"]["plants_scanned"] == again > 0
    # a changed detector param, or incremental off (the file is removed), scans every copy
    plant_cache.found_by(plants2, evals2, side2, params(passage_threshold=0.6), tokenize, tmp_path, log)
    assert log.logged["planted_cache"]["plants_scanned"] == len(plants2)
    assert log.logged["leakage.planted_cache_reason"] == "the cache fingerprint changed (params)"
    plant_cache.found_by(plants2, evals2, side2, params(incremental=False), tokenize, tmp_path, log)
    assert log.logged["planted_cache"]["plants_scanned"] == len(plants2)
    assert not (tmp_path / plant_cache.PLANTS).exists()


def test_the_lexical_cache_rewrite_keeps_the_planted_cache_and_a_stage_rerun_scans_no_copy(inc):
    assert (inc / "data/leakage_cache/plants.parquet").is_file()
    assert run(inc, night())[1]["planted_cache"]["plants_scanned"] == 0


@pytest.mark.parametrize(
    "methods",
    [pa.array(["ngram"]), pa.array([None], pa.list_(pa.string())), pa.array([["ngram", None]], pa.list_(pa.string()))],
)
def test_a_plant_cache_of_another_column_type_or_with_nulls_is_not_used(tmp_path, methods):
    from tasks.common.files.stamped import stamp, write_cache

    evals, side, plants = plants_of()
    key = plant_cache.plant_keys(plants[:1], evals["text"])[0]
    write_cache(
        stamp(pa.table({"key": pa.array([key], pa.binary(32)), "methods": methods}), plant_cache.fingerprint(params())),
        tmp_path / plant_cache.PLANTS,
    )
    stored, reason = plant_cache.load(tmp_path, plant_cache.fingerprint(params()), True)
    assert stored == {} and "cannot be used" in reason
    log = RecordingLog()
    got = plant_cache.found_by(plants, evals, side, params(), tokenize, tmp_path, log)
    assert got == recall.found_by(plants, side, params().lexical, tokenize)
    assert log.logged["planted_cache"]["plants_scanned"] == len(plants)
