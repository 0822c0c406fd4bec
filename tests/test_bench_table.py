"""The README's benchmark table is generated from benchmarks/results/*.json (benchmarks/_table.py), never typed."""

import sys

from benchmarks import _table


def test_readme_table_is_the_one_generated_from_the_results_files():
    assert _table.readme_table() == _table.markdown(_table.load_rows()), "run: .venv/bin/python benchmarks/_table.py --readme"


def test_every_results_file_has_the_headline_ratios():
    rows = _table.load_rows()
    assert {row["benchmark"] for row in rows} == {"dedup", "leakage", "tokenize", "pretrain", "fine_tune", "scaling",
                                                "scheduled", "document_mask", "gpu_recipe_curve"}
    for row in rows:
        assert set(row) == {"benchmark", "case", "unit", "ours", "best_peer", "best_peer_value", "ratio_vs_best_peer",
                            "limit", "fraction_of_limit", "goal", "meets_goal"}  # fmt: skip
        if row["ratio_vs_best_peer"] is not None:  # the ratio is the two figures' quotient, not a typed number
            assert abs(row["ratio_vs_best_peer"] - row["ours"] / row["best_peer_value"]) < 1e-9 * row["ours"]
        if row["fraction_of_limit"] is not None:
            assert abs(row["fraction_of_limit"] - row["ours"] / row["limit"]) < 1e-9 * row["ours"]


def test_markdown_row_formatting():
    row = {"benchmark": "dedup", "case": "1x", "unit": "docs/s", "ours": 2345.6, "best_peer": "text-dedup",
           "best_peer_value": 480.0, "ratio_vs_best_peer": 2345.6 / 480, "limit": None, "fraction_of_limit": None,
           "goal": ">= 2x", "meets_goal": True}  # fmt: skip
    line = _table.markdown([row]).splitlines()[2]
    assert line == "| `dedup` | 1x | 2,346 docs/s | text-dedup: 480 | 4.89× | n/a | n/a | >= 2x: met |"


def test_a_row_without_a_goal_reads_as_information():
    row = {"benchmark": "tokenize", "case": "num_proc 2", "unit": "tokens/s", "ours": 500000.0,
           "best_peer": "HF run_mlm recipe", "best_peer_value": 250000.0, "ratio_vs_best_peer": 2.0,
           "limit": 800000.0, "fraction_of_limit": 0.625, "goal": None, "meets_goal": None}  # fmt: skip
    line = _table.markdown([row]).splitlines()[2]
    assert line.endswith("| 2.00× | 800,000 | 62% | none (information) |")


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
    ours = {"flagged": [0, 1, 3], "flagged_by_13_grams": [1, 3], "span": {"0": "a short tweet", "1": "an_underscore",
            "3": "x"}}  # fmt: skip
    peer = {"flagged": [2, 3], "ngram": {"2": "plain words only here", "3": "x"}}
    # only ours: 0 (short eval doc, not via 13-grams) and 1 (13-grams, "_" in the text); only the peer: 2 (no "_")
    got = leakage.compare(ours, peer, {"train": train})
    assert (got["only_ours"], got["only_peer"], got["same"], got["explained"]) == (2, 1, False, False)
    train[2] = "plain_words only here"
    assert leakage.compare(ours, peer, {"train": train})["explained"] is True
