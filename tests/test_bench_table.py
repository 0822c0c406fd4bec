"""The README's benchmark table is generated from benchmarks/results/*.json (benchmarks/_table.py), never typed."""

from benchmarks import _table


def test_readme_table_is_the_one_generated_from_the_results_files():
    assert _table.readme_table() == _table.markdown(_table.load_rows()), "run: .venv/bin/python benchmarks/_table.py --readme"


def test_every_results_file_has_the_headline_ratios():
    rows = _table.load_rows()
    assert {row["benchmark"] for row in rows} == {"dedup", "leakage", "tokenize", "pretrain"}
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
