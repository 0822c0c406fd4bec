"""docs/scaling.md's projection (benchmarks/_scaling_tables.projection): every data stage, the engine measured at
two sizes, and whether a 64 GiB driver holds it; the expected figures are worked by hand below."""

from __future__ import annotations

from benchmarks import _scaling_tables


def _run(stage: str, engine: str, docs: int, driver_mib: float, tree_mib: float, per_core: float) -> dict:
    return {
        "stage": stage,
        "engine": engine,
        "scale": docs // 1000,
        "docs": docs,
        "seconds": 1.0,
        "docs_per_s": 2 * per_core,
        "docs_per_s_per_core": per_core,
        "peak_rss_mib": driver_mib,
        "peak_tree_rss_mib": tree_mib,
    }


def _rows(table: list[str], stage: str) -> list[list[str]]:
    return [[cell.strip() for cell in line.split("|")[1:-1]] for line in table if line.startswith(f"| {stage} |")]


def test_a_line_through_the_two_largest_runs_projects_the_driver():
    # split, local: 100 -> 110 MiB from 1,000 to 11,000 docs = 10 MiB / 10,000 docs = 1,048.576 bytes a doc.
    # 10^7: 110 MiB + 1,048.576 x 9,989,000 B = 0.1074 + 9.7549 GiB = 9.86 GiB; 10^8: 0.1074 + 97.6467 = 97.75 GiB.
    runs = [_run("split", "local", 1_000, 100.0, 150.0, 1_000.0), _run("split", "local", 11_000, 110.0, 150.0, 500.0)]
    rows = _rows(_scaling_tables.projection(runs), "split")
    assert [row[1:3] for row in rows] == [["local", "10^7"], ["local", "10^8"], ["local", "10^9"]]
    assert [row[6] for row in rows[:2]] == ["9.9", "97.8"]
    assert [row[8] for row in rows] == ["yes", "**no**", "**no**"]
    # core-hours from the largest run's 500 docs/s per core: 10^7 / 500 / 3600 = 5.6 -> "6"; tree flat: 150 MiB
    assert rows[0][3] == "6" and rows[0][7] == "0"


def test_the_ray_engine_is_projected_where_it_ran_at_two_sizes_else_the_local_one():
    ray = [_run("dedup", "ray", 1_000, 400.0, 900.0, 100.0), _run("dedup", "ray", 11_000, 400.0, 1_900.0, 100.0)]
    local_only_once = [_run("leakage", "ray", 1_000, 500.0, 900.0, 100.0)]
    local = [_run("leakage", "local", 1_000, 500.0, 600.0, 100.0), _run("leakage", "local", 2_000, 600.0, 700.0, 50.0)]
    table = _scaling_tables.projection(ray + local_only_once + local)
    assert {row[1] for row in _rows(table, "dedup")} == {"ray"}
    assert {row[1] for row in _rows(table, "leakage")} == {"local"}
    # dedup's driver is flat at 400 MiB: 0.4 GiB at every size, which fits
    assert [row[6] for row in _rows(table, "dedup")] == ["0.4"] * 3
    assert "fits a 64 GiB driver" in table[0]


def test_a_stage_measured_at_one_size_is_not_projected():
    table = _scaling_tables.projection([_run("tokenize", "local", 1_000, 300.0, 300.0, 10.0)])
    assert _rows(table, "tokenize") == []
