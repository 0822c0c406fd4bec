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


def test_the_driver_is_its_own_peak_not_the_largest_worker():
    # Ray's largest process is a worker (object-store pages); the driver stays at 300 -> 310 MiB from 1,000 to
    # 11,000 docs: 1,048.576 bytes a doc; 10^7: 0.3027 + 9.7549 = 10.06 GiB, 10^8: 0.3027 + 97.6467 = 97.95 GiB
    runs = [
        _run("dedup", "ray", 1_000, 900.0, 2_000.0, 100.0) | {"driver_peak_rss_mib": 300.0},
        _run("dedup", "ray", 11_000, 5_000.0, 9_000.0, 100.0) | {"driver_peak_rss_mib": 310.0},
    ]
    assert [row[6] for row in _rows(_scaling_tables.projection(runs), "dedup")][:2] == ["10.1", "97.9"]
    assert "| dedup | ray | 11,000 | 1 | 200 | 100 | 310 | 9,000 | n/a |" in _scaling_tables.tables({"runs": runs})


def test_leakage_without_its_semantic_pass_is_a_stage_of_its_own():
    lexical = [
        _run("leakage", "ray", 1_000, 500.0, 900.0, 100.0) | {"semantic_pass": False},
        _run("leakage", "ray", 11_000, 510.0, 900.0, 100.0) | {"semantic_pass": False},
    ]
    full = [_run("leakage", "ray", 1_000, 900.0, 900.0, 10.0)]  # one size: not projected
    table = _scaling_tables.projection(lexical + full)
    assert _rows(table, "leakage") == [] and len(_rows(table, "leakage, semantic pass off")) == 3
    measured = _scaling_tables.tables({"runs": lexical + full})
    assert "| leakage | ray | 1,000 |" in measured and "| leakage, semantic pass off | ray | 11,000 |" in measured


def test_a_stage_measured_at_one_size_is_not_projected():
    table = _scaling_tables.projection([_run("tokenize", "local", 1_000, 300.0, 300.0, 10.0)])
    assert _rows(table, "tokenize") == []


MINILM_L6 = {"num_hidden_layers": 6, "hidden_size": 384, "intermediate_size": 1536}


def test_minilm_forward_flops_a_window_by_hand():
    # per layer 4 x 384^2 + 2 x 384 x 1536 = 589,824 + 1,179,648 weights; 6 layers = 10,616,832; per token
    # 2 x that = 21,233,664 plus 4 x 6 x 384 x 128 = 1,179,648 for the scores -> 22,413,312; x 128 tokens
    assert _scaling_tables.encoder_forward_flops(MINILM_L6, 128) == 2_868_903_936


def test_the_semantic_pass_is_projected_from_the_largest_leakage_run_on_gpus():
    small = _run("leakage", "ray", 1_000, 500.0, 900.0, 100.0) | {"semantic_corpus_windows": 1_000}
    large = _run("leakage", "ray", 10_000, 500.0, 900.0, 100.0) | {"semantic_corpus_windows": 30_000, "cores": 2}
    # measured on the CPU: 6,000 windows embedded in 100 s on 2 cores = 30 windows/s a core
    large |= {"semantic_windows_embedded": 6_000, "semantic_embed_seconds": 100.0}
    table = _scaling_tables.semantic_projection([small, large])
    head = "3.00 windows a training doc (10,000 docs measured), 2.87 GFLOP a window"
    rows = _rows(table, head)
    assert len(rows) == 3 and "H100 SXM-hours at 30% MFU" in table[0]
    # 10^9 docs: 3e9 windows x 2.8689 GFLOP = 8,607 PFLOP; at 0.30 x 989.4 TFLOP/s = 296.82 TFLOP/s that is
    # 28,996 s = 8.05 H100-hours, 1.01 hours on 8 GPUs; on CPUs 3e9 / 30 / 3600 = 27,778 core-hours
    assert rows[2][1:] == ["10^9", "3,000,000,000", "8,607", "27,778", "8.1", "1.01"]
    assert "30.0 windows/s a core (measured)" in table[0]


def test_a_run_without_the_pass_timing_projects_gpus_only():
    run = _run("leakage", "ray", 1_000, 500.0, 900.0, 100.0) | {"semantic_corpus_windows": 2_000, "cores": 2}
    table = _scaling_tables.semantic_projection([run | {"semantic_windows_embedded": 2_000}])
    assert "n/a windows/s a core" in table[0] and table[2].split("|")[5].strip() == "n/a"


def test_no_semantic_projection_without_a_run_that_recorded_the_pass():
    assert _scaling_tables.semantic_projection([_run("leakage", "ray", 1_000, 500.0, 900.0, 100.0)]) == []


def test_a_second_path_of_a_stage_measured_at_two_sizes_is_projected_too():
    # tokenize from scratch is flat at 800 MiB; its incremental run grows 800 -> 810 MiB from 1,000 to 11,000 docs:
    # 1,048.576 bytes a doc beyond 810 MiB (0.7910 GiB): 10^7 0.7910 + 9.7549 = 10.55 GiB, 10^8 0.7910 + 97.6467 =
    # 98.44 GiB, which no 64 GiB driver holds, 10^9 0.7910 + 976.5511 = 977.34 GiB
    full = [
        _run("tokenize", "local", 1_000, 800.0, 800.0, 100.0),
        _run("tokenize", "local", 11_000, 800.0, 800.0, 100.0),
    ]
    again = [
        _run("tokenize", "local, incremental", 1_000, 800.0, 800.0, 100.0),
        _run("tokenize", "local, incremental", 11_000, 810.0, 810.0, 100.0),
    ]
    once = [_run("tokenize", "local, other", 1_000, 800.0, 800.0, 100.0)]  # one size: no line to draw
    rows = _rows(_scaling_tables.projection(full + again + once), "tokenize")
    assert [row[1] for row in rows] == ["local"] * 3 + ["local, incremental"] * 3
    assert [row[6] for row in rows] == ["0.8"] * 3 + ["10.5", "98.4", "977.3"]
    assert [row[8] for row in rows] == ["yes"] * 3 + ["yes", "**no**", "**no**"]
