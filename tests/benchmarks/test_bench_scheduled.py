"""benchmarks/scheduled.py's own logic: the arrival batches and the checks that decide "outputs equal apart
from the counted bridges" and "no document moved" (the benchmark itself runs the stages; not here)."""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from benchmarks import _table
from benchmarks._scheduled_compare import moved_docs

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def scheduled():
    spec = importlib.util.spec_from_file_location("bench_scheduled", REPO / "benchmarks" / "scheduled.py")
    module = importlib.util.module_from_spec(spec)
    saved = list(sys.path)  # the script rearranges sys.path: spawned test workers need tests/ there
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path[:] = saved
    return module


def test_batches_partition_the_corpus_deterministically(scheduled):
    records = [{"id": f"doc{k}"} for k in range(4000)]
    got = scheduled.batches(records, nights=5, new_fraction=0.05)
    ids = [r["id"] for batch in got for r in batch]
    assert sorted(ids) == sorted(r["id"] for r in records)  # every doc once, none invented
    assert [[r["id"] for r in b] for b in got] == [[r["id"] for r in b] for b in scheduled.batches(records, 5, 0.05)]
    sizes = [len(b) for b in got]
    assert abs(sizes[0] - 0.8 * 4000) < 100 and all(abs(s - 200) < 50 for s in sizes[1:])  # 80%, then 5% a night
    order = {r["id"]: k for k, r in enumerate(records)}
    assert all([order[r["id"]] for r in b] == sorted(order[r["id"]] for r in b) for b in got)  # input order kept
    # a doc's night depends on its own id alone: the same id arrives the same night in every source
    assert scheduled.night_of("doc7", 5, 0.05) == scheduled.night_of("doc7", 5, 0.05)
    with pytest.raises(ValueError, match="night 0 would hold no documents"):
        scheduled.night_of("doc7", 21, 0.05)


def test_night_boundaries_by_hand(scheduled, monkeypatch):
    """night_of maps the md5 draw u to nights: [0, 0.8) -> 0, [0.8, 0.85) -> 1, ..., [0.95, 1) -> 4."""
    draws = {"a": 0.0, "b": 0.7999, "c": 0.8001, "d": 0.8499, "e": 0.8501, "f": 0.9999}

    class FakeMd5:
        def __init__(self, data: bytes):
            self.u = draws[data.decode().split(":", 1)[1]]

        def hexdigest(self) -> str:
            return f"{int(self.u * 2**128):032x}"

    monkeypatch.setattr(scheduled.hashlib, "md5", FakeMd5)
    assert {k: scheduled.night_of(k, 5, 0.05) for k in draws} == {"a": 0, "b": 0, "c": 1, "d": 1, "e": 2, "f": 4}


def write_outputs(
    root: Path, manifest: dict[str, str], dropped: list[str], split_metrics: dict, texts: dict[str, str] | None = None
) -> None:
    """The files compare_night reads: data/{ingest,dedup,split} (the split rows also as docs.parquet, text
    ``texts[doc]`` or ``t-<doc>``), metrics/{ingest,dedup,split}.json."""
    for stage in ("ingest", "dedup", "split"):
        (root / "data" / stage).mkdir(parents=True, exist_ok=True)
    (root / "metrics").mkdir(exist_ok=True)
    (root / "data/ingest/docs.parquet").write_bytes(b"ingest rows")
    (root / "data/dedup/docs.parquet").write_bytes(b"dedup rows")
    (root / "metrics/ingest.json").write_text("{}")
    (root / "metrics/dedup.json").write_text("{}")
    (root / "metrics/split.json").write_text(json.dumps(split_metrics))
    lines = "".join(f"{doc}\t{split}\n" for doc, split in sorted(manifest.items()))
    (root / "data/split/manifest.tsv").write_text("doc_id\tsplit\n" + lines)
    docs = sorted(manifest)
    pq.write_table(
        pa.table(
            {
                "doc_id": docs,
                "text": [(texts or {}).get(d, f"t-{d}") for d in docs],
                "split": [manifest[d] for d in docs],
            }
        ),
        root / "data/split/docs.parquet",
    )
    (root / "data/split/dropped.jsonl").write_text(
        "".join(
            json.dumps({"source": "docs", "doc_id": d, "reason": "bridges_splits", "detail": ""}) + "\n"
            for d in dropped
        )
    )


MANIFEST = {"a": "train", "b": "test", "c": "dev", "n": "train"}


def test_equal_outputs_and_no_move_pass(scheduled, tmp_path):
    for arm in ("inc", "scratch"):
        write_outputs(tmp_path / arm, MANIFEST, [], {"moved_since_previous": 0, "ledger_overrides": 0})
    got = scheduled.compare_night(tmp_path / "inc", tmp_path / "scratch", {"a": "train", "b": "test"})
    assert (got["differing_files"], got["unexplained"], got["moved_by_manifests"]) == ([], [], 0)


def test_a_night_without_its_from_scratch_copy_is_marked_uncompared(scheduled, tmp_path):
    write_outputs(tmp_path / "inc", MANIFEST, [], {"moved_since_previous": 0, "ledger_overrides": 3})
    got = scheduled.uncompared_night(tmp_path / "inc")
    assert (got["compared"], got["docs"], got["ledger_overrides"], got["manifest"]) == (False, 4, 3, MANIFEST)
    write_outputs(tmp_path / "scratch", MANIFEST, [], {"moved_since_previous": 0, "ledger_overrides": 0})
    assert scheduled.compare_night(tmp_path / "inc", tmp_path / "scratch", None)["compared"] is True


def test_a_counted_bridge_explains_its_difference_and_an_uncounted_one_does_not(scheduled, tmp_path):
    inc = {k: v for k, v in MANIFEST.items() if k != "n"}
    write_outputs(tmp_path / "inc", inc, ["n"], {"moved_since_previous": 0, "ledger_overrides": 0})
    write_outputs(tmp_path / "scratch", MANIFEST, [], {"moved_since_previous": 0, "ledger_overrides": 0})
    got = scheduled.compare_night(tmp_path / "inc", tmp_path / "scratch", None)
    assert got["differing_files"] == ["data/split/docs.parquet", "data/split/dropped.jsonl", "data/split/manifest.tsv"]
    assert (got["unexplained"], got["bridges_splits"]) == ([], 1)
    write_outputs(tmp_path / "inc", inc, [], {"moved_since_previous": 0, "ledger_overrides": 0})
    got = scheduled.compare_night(tmp_path / "inc", tmp_path / "scratch", None)
    assert got["unexplained"] == [
        "n: missing from the incremental run, not a counted bridge",
        "data/split/docs.parquet",
    ]


def test_a_differing_output_or_split_fails(scheduled, tmp_path):
    for arm in ("inc", "scratch"):
        write_outputs(tmp_path / arm, MANIFEST, [], {"moved_since_previous": 0, "ledger_overrides": 0})
    (tmp_path / "inc/data/dedup/docs.parquet").write_bytes(b"other dedup rows")
    assert scheduled.compare_night(tmp_path / "inc", tmp_path / "scratch", None)["unexplained"] == [
        "data/dedup/docs.parquet"
    ]
    (tmp_path / "inc/data/dedup/docs.parquet").write_bytes(b"dedup rows")
    write_outputs(tmp_path / "inc", {**MANIFEST, "c": "test"}, [], {"moved_since_previous": 0, "ledger_overrides": 0})
    got = scheduled.compare_night(tmp_path / "inc", tmp_path / "scratch", None)
    assert got["unexplained"] == ["1 docs in another split than from scratch, 0 counted: ['c']"]
    write_outputs(tmp_path / "inc", {**MANIFEST, "c": "test"}, [], {"moved_since_previous": 0, "ledger_overrides": 1})
    assert scheduled.compare_night(tmp_path / "inc", tmp_path / "scratch", None)["unexplained"] == []
    # a split row whose text differs is not explained by the counted override of its split
    write_outputs(
        tmp_path / "inc",
        {**MANIFEST, "c": "test"},
        [],
        {"moved_since_previous": 0, "ledger_overrides": 1},
        texts={"a": "edited"},
    )
    got = scheduled.compare_night(tmp_path / "inc", tmp_path / "scratch", None)["unexplained"]
    assert got == ["data/split/docs.parquet"]


def test_leakage_is_compared_only_where_its_input_split_is_the_same(scheduled, tmp_path):
    stages = ("ingest", "dedup", "split", "leakage")
    for arm in ("inc", "scratch"):
        write_outputs(tmp_path / arm, MANIFEST, [], {"moved_since_previous": 0, "ledger_overrides": 0})
        (tmp_path / arm / "data/leakage").mkdir()
        (tmp_path / arm / "data/leakage/table.parquet").write_bytes(b"pairs")
        (tmp_path / arm / "metrics/leakage.json").write_text("{}")
    got = scheduled.compare_night(tmp_path / "inc", tmp_path / "scratch", None, stages)
    assert (got["leakage_compared"], got["leakage_differing_files"]) == (True, [])
    (tmp_path / "inc/metrics/leakage.json").write_text('{"x": 1}')
    got = scheduled.compare_night(tmp_path / "inc", tmp_path / "scratch", None, stages)
    assert got["leakage_differing_files"] == ["metrics/leakage.json"]
    write_outputs(tmp_path / "inc", {**MANIFEST, "c": "test"}, [], {"moved_since_previous": 0, "ledger_overrides": 1})
    got = scheduled.compare_night(tmp_path / "inc", tmp_path / "scratch", None, stages)
    assert (got["leakage_compared"], got["leakage_differing_files"], got["unexplained"]) == (False, [], [])
    assert "leakage_compared" not in scheduled.compare_night(tmp_path / "inc", tmp_path / "scratch", None)


def test_tokenize_is_compared_only_after_equal_leakage_outputs(scheduled, tmp_path):
    stages = ("ingest", "dedup", "split", "leakage", "tokenizer", "tokenize")
    for arm in ("inc", "scratch"):
        write_outputs(tmp_path / arm, MANIFEST, [], {"moved_since_previous": 0, "ledger_overrides": 0})
        for stage in ("leakage", "tokenize"):
            (tmp_path / arm / "data" / stage).mkdir()
            (tmp_path / arm / "data" / stage / "rows.arrow").write_bytes(b"rows")
        for stage in ("leakage", "tokenizer", "tokenize"):
            (tmp_path / arm / "metrics" / f"{stage}.json").write_text("{}")
        (tmp_path / arm / "models/tokenizer").mkdir(parents=True)
        (tmp_path / arm / "models/tokenizer/tokenizer.json").write_text("{}")
    got = scheduled.compare_night(tmp_path / "inc", tmp_path / "scratch", None, stages)
    assert [got[f"{s}_compared"] for s in stages[3:]] == [True] * 3 and got["tokenize_differing_files"] == []
    (tmp_path / "inc/models/tokenizer/tokenizer.json").write_text('{"vocab": 1}')  # another tokenizer ...
    got = scheduled.compare_night(tmp_path / "inc", tmp_path / "scratch", None, stages)
    assert got["tokenizer_differing_files"] == ["models/tokenizer/tokenizer.json"]
    assert got["tokenize_compared"] is False  # ... so tokenize's input differs
    (tmp_path / "inc/models/tokenizer/tokenizer.json").write_text("{}")
    (tmp_path / "inc/data/tokenize/rows.arrow").write_bytes(b"other rows")
    got = scheduled.compare_night(tmp_path / "inc", tmp_path / "scratch", None, stages)
    assert got["tokenize_differing_files"] == ["data/tokenize/rows.arrow"]
    (tmp_path / "inc/data/leakage/rows.arrow").write_bytes(b"other rows")  # tokenize's input differs: not compared
    got = scheduled.compare_night(tmp_path / "inc", tmp_path / "scratch", None, stages)
    assert got["leakage_differing_files"] == ["data/leakage/rows.arrow"]
    assert [got[f"{s}_compared"] for s in stages[4:]] == [False] * 2 and got["tokenize_differing_files"] == []


def test_a_doc_that_moved_since_the_previous_night_is_found_in_the_manifests(scheduled, tmp_path):
    for arm in ("inc", "scratch"):
        write_outputs(tmp_path / arm, MANIFEST, [], {"moved_since_previous": 0, "ledger_overrides": 0})
    previous = {"a": "train", "b": "dev", "c": "dev", "gone": "test"}  # b moved dev -> test; gone left
    got = scheduled.compare_night(tmp_path / "inc", tmp_path / "scratch", previous)
    assert (got["moved_by_manifests"], got["moved_since_previous"]) == (1, 0)
    assert moved_docs(previous, MANIFEST) == ["b"]


def test_summary_rows_sum_the_arrival_nights_and_count_leakage_differences(scheduled):
    def night(k, inc, full, leak_diff=()):
        return {
            "night": k,
            "seconds": {"incremental": inc, "from_scratch": full, "startup": dict.fromkeys(inc, 1.0)},
            "moved_since_previous": 0,
            "moved_by_manifests": 0,
            "unexplained": [],
            "leakage_differing_files": list(leak_diff),
        }

    nights = [
        night(0, {"split": 9.0, "leakage": 90.0}, {"split": 9.0, "leakage": 90.0}),  # a first run: not summed
        night(1, {"split": 2.0, "leakage": 10.0}, {"split": 4.0, "leakage": 80.0}),
        night(2, {"split": 3.0, "leakage": 12.0}, {"split": 5.0, "leakage": 84.0}, ["metrics/leakage.json"]),
    ]
    args = argparse.Namespace(nights=3, new_fraction=0.05)
    run = scheduled.summarize(nights, 1, 100, args)
    total, leakage, startup, moved = run["rows"]
    assert (total["ours"], total["best_peer_value"]) == (27.0, 173.0)  # 2+10+3+12 vs 4+80+5+84
    assert "(split, leakage)" in total["case"] and total["meets_goal"] is None  # 1x: no goal
    assert (leakage["ours"], leakage["best_peer_value"]) == (22.0, 164.0)
    assert (startup["ours"], startup["limit"]) == (4.0, 27.0)
    assert (moved["ours"], moved["meets_goal"]) == (1, False)  # the differing leakage file
    assert run["not_run"] == "tokenizer, tokenize"
    assert run["command"].endswith("--with-leakage")


def test_kept_runs_keep_their_own_provenance(scheduled):
    row = {
        "benchmark": "scheduled",
        "case": "c",
        "unit": "s",
        "ours": 1.0,
        "best_peer": None,
        "best_peer_value": None,
        "ratio_vs_best_peer": None,
        "limit": None,
        "fraction_of_limit": None,
        "goal": None,
        "meets_goal": None,
    }
    fresh = scheduled.provenance(scheduled.MEASURED)
    runs = {"16": {"rows": [row | {"case": "old"}]}, "1": {"rows": [row | {"case": "new"}], "provenance": fresh}}
    merged = scheduled.merged_rows(runs)
    assert [(r["case"], r["provenance"]) for r in merged] == [("new", fresh), ("old", None)]
    lines = _table.markdown(merged).splitlines()[2:]
    assert lines[0].endswith("| current |") and lines[1].endswith("| unknown | unknown | **unknown provenance** |")
