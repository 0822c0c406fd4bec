"""The benchmark table of docs/benchmarks.md is generated from benchmarks/results/*.json (benchmarks/_table.py), never
typed; each row shows what it measured (commit, machine) and is marked stale once that code has changed."""

import json
import sys

import pytest

from benchmarks import _provenance, _table
from tasks.common.imports import closure_fingerprint

KEYS = {
    "benchmark",
    "case",
    "unit",
    "ours",
    "best_peer",
    "best_peer_value",
    "ratio_vs_best_peer",
    "limit",
    "fraction_of_limit",
    "goal",
    "meets_goal",
}
OPTIONAL = {"ours_spread", "peer_spread", "ratio_best_of_n", "provenance"}


def test_docs_table_is_the_one_generated_from_the_results_files():
    # the status column says what it was when the page was written (a later code change alters it, not the figures)
    generated = _table.without_status(_table.markdown(_table.load_rows()))
    assert _table.without_status(_table.docs_table()) == generated, "run: .venv/bin/python benchmarks/_table.py --docs"


def test_the_status_column_alone_is_left_out_of_the_docs_comparison():
    cells = ["| `dedup`", "1x", "5 docs/s", "peer: 4", "1.25×", "9", "55%", "goal: met", "`abc1234`", "cpu"]
    current, stale = " | ".join(cells + ["current |"]), " | ".join(cells + ["**stale** |"])
    assert _table.without_status(current) == _table.without_status(stale) == [cells]  # the status cell, no other
    other = " | ".join(cells[:2] + ["6 docs/s"] + cells[3:] + ["current |"])
    assert _table.without_status(other) != _table.without_status(current)  # a figure still counts


def test_every_results_file_has_the_headline_ratios():
    rows = _table.load_rows()
    assert {row["benchmark"] for row in rows} == {
        "dedup",
        "leakage",
        "tokenize",
        "pretrain",
        "fine_tune",
        "scaling",
        "scheduled",
        "document_mask",
        "gpu_recipe_curve",
    }
    for row in rows:
        assert KEYS <= set(row) <= KEYS | OPTIONAL, set(row) ^ KEYS
        if row["ratio_vs_best_peer"] is not None:  # the ratio is the two figures' quotient, not a typed number
            assert abs(row["ratio_vs_best_peer"] - row["ours"] / row["best_peer_value"]) < 1e-9 * row["ours"]
        if row["fraction_of_limit"] is not None:
            assert abs(row["fraction_of_limit"] - row["ours"] / row["limit"]) < 1e-9 * row["ours"]
        if row.get("ours_spread"):  # medians of alternated runs: the figures are the spreads' medians
            assert row["ours"] == row["ours_spread"]["median"] and row["ours_spread"]["n"] >= 1
            if row.get("peer_spread"):
                assert row["best_peer_value"] == row["peer_spread"]["median"]
                best = row["ours_spread"]["max"] / row["peer_spread"]["max"]
                assert abs(row["ratio_best_of_n"] - best) < 1e-9 * best


def test_markdown_row_formatting():
    row = {
        "benchmark": "dedup",
        "case": "1x",
        "unit": "docs/s",
        "ours": 2345.6,
        "best_peer": "text-dedup",
        "best_peer_value": 480.0,
        "ratio_vs_best_peer": 2345.6 / 480,
        "limit": None,
        "fraction_of_limit": None,
        "goal": ">= 2x",
        "meets_goal": True,
    }
    line = _table.markdown([row]).splitlines()[2]
    assert line == (
        "| `dedup` | 1x | 2,346 docs/s | text-dedup: 480 | 4.89× | n/a | n/a | >= 2x: met | unknown"
        " | unknown | **unknown provenance** |"
    )


def test_a_row_without_a_goal_reads_as_information():
    row = {
        "benchmark": "tokenize",
        "case": "num_proc 2",
        "unit": "tokens/s",
        "ours": 500000.0,
        "best_peer": "HF run_mlm recipe",
        "best_peer_value": 250000.0,
        "ratio_vs_best_peer": 2.0,
        "limit": 800000.0,
        "fraction_of_limit": 0.625,
        "goal": None,
        "meets_goal": None,
    }
    line = _table.markdown([row]).splitlines()[2]
    assert line.endswith("| 2.00× | 800,000 | 62% | none (information) | unknown | unknown | **unknown provenance** |")


def test_leakage_differences_count_as_explained_only_when_every_one_has_a_named_cause():
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_leakage", _table.REPO / "benchmarks" / "leakage.py")
    leakage = importlib.util.module_from_spec(spec)
    saved = list(sys.path)  # the script puts the repo root in sys.path[0]: spawned test workers need tests/ there
    try:
        spec.loader.exec_module(leakage)
    finally:
        sys.path[:] = saved
    train = ["a short tweet", "the long text with an_underscore in it", "plain words only here", "x"]
    ours = {
        "flagged": [0, 1, 3],
        "flagged_by_13_grams": [1, 3],
        "span": {"0": "a short tweet", "1": "an_underscore", "3": "x"},
    }
    peer = {"flagged": [2, 3], "ngram": {"2": "plain words only here", "3": "x"}}
    # only ours: 0 (short eval doc, not via 13-grams) and 1 (13-grams, "_" in the text); only the peer: 2 (no "_")
    got = leakage.compare(ours, peer, {"train": train})
    assert (got["only_ours"], got["only_peer"], got["same"], got["explained"]) == (2, 1, False, False)
    train[2] = "plain_words only here"
    assert leakage.compare(ours, peer, {"train": train})["explained"] is True


def _results(folder, fingerprint, **extra):
    row = {
        "benchmark": "dedup",
        "case": "1x",
        "unit": "docs/s",
        "ours": 4907.0,
        "best_peer": "rensa",
        "best_peer_value": 3755.0,
        "ratio_vs_best_peer": 4907 / 3755,
        "limit": None,
        "fraction_of_limit": None,
        "goal": None,
        "meets_goal": None,
        **extra,
    }
    recorded = {
        "commit": "0123456789abcdef",
        "code_dirty": False,
        "code_modules": ["tasks.dedup"],
        "code_fingerprint": fingerprint,
        "gpu": None,
        "smoke": False,
        "cpu": {"model": "Intel(R) Xeon(R) Platinum 8480+", "flags": ["avx2", "amx_bf16"]},
    }
    path = folder / "dedup.json"
    path.write_text(json.dumps({"rows": [row], "provenance": recorded}), encoding="utf-8")
    return path


def test_a_row_whose_measured_code_changed_since_is_marked_stale(tmp_path):
    now = closure_fingerprint(["tasks.dedup"])
    _results(tmp_path, now)
    [line] = _table.markdown(_table.load_rows(tmp_path)).splitlines()[2:]
    assert line.endswith("| `0123456` | Intel(R) Xeon(R) Platinum 8480+ (avx2, amx_bf16) | current |")
    _results(tmp_path, "f" * 64)  # what the code hashed to when it was measured: not what it is now
    [line] = _table.markdown(_table.load_rows(tmp_path)).splitlines()[2:]
    assert line.endswith("| `0123456` | Intel(R) Xeon(R) Platinum 8480+ (avx2, amx_bf16) | **stale** |")


def test_the_median_spread_and_best_of_n_are_shown_labelled(tmp_path):
    ratio = _provenance.ratio_fields([4907.0, 5342.0, 4100.0], [3755.0, 4863.0, 3000.0])
    _results(tmp_path, closure_fingerprint(["tasks.dedup"]), **ratio)
    [line] = _table.markdown(_table.load_rows(tmp_path)).splitlines()[2:]
    cells = line.split(" | ")
    assert cells[2:5] == [
        "4,907 docs/s (4,100–5,342, median of 3)",
        "rensa: 3,755 (3,000–4,863, median of 3)",
        "1.31× (best of N: 1.10×)",
    ]


def test_a_smoke_runs_results_are_refused_in_the_results_folder(tmp_path, monkeypatch):
    path = _results(tmp_path, "0" * 64)
    body = json.loads(path.read_text())
    body["provenance"]["smoke"] = True
    path.write_text(json.dumps(body))
    assert len(_table.load_rows(tmp_path)) == 1  # elsewhere (a smoke run's --out, the GPU check's dry run): read
    monkeypatch.setattr(_table, "RESULTS", tmp_path)
    with pytest.raises(ValueError, match="dedup.json: a --smoke run"):
        _table.load_rows(tmp_path)


def test_the_table_command_refuses_a_smoke_file_in_one_line(tmp_path, monkeypatch, capsys):
    path = _results(tmp_path, "0" * 64)
    body = json.loads(path.read_text())
    body["provenance"]["smoke"] = True
    path.write_text(json.dumps(body))
    monkeypatch.setattr(_table, "RESULTS", tmp_path)
    monkeypatch.setattr(sys, "argv", ["_table.py"])
    with pytest.raises(SystemExit, match=r"^_table.py: .*dedup.json: a --smoke run's results"):
        _table.main()


def test_a_smoke_run_of_scaling_never_writes_the_docs_page(tmp_path):
    from benchmarks import scaling

    assert scaling.smoke_doc(tmp_path / "scaling.json") == tmp_path / "scaling.md"
    assert scaling.smoke_doc(scaling.DOC.with_name("scaling_smoke.json")).name == "scaling_smoke.md"
    with pytest.raises(SystemExit, match="is the docs' page"):
        scaling.smoke_doc(scaling.DOC.with_suffix(".json"))


def test_provenance_records_the_code_and_the_cpu_flags(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(
        "processor\t: 0\nmodel name\t: Some CPU\nflags\t\t: fpu avx2 avx512f amx_tile amx_bf16\n\n"
        "processor\t: 1\nmodel name\t: other\n"
    )
    assert _provenance.cpu(cpuinfo) == {"model": "Some CPU", "flags": ["avx2", "avx512f", "amx_tile", "amx_bf16"]}
    got = _provenance.provenance(["tasks.dedup"], smoke=True)
    assert got["code_fingerprint"] == closure_fingerprint(["tasks.dedup"]) and got["smoke"] is True
    assert len(got["commit"]) == 40 and got["gpu"] is None and _table.staleness(got) == "current"
