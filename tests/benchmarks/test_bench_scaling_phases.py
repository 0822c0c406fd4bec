"""benchmarks/_scaling_phases: the semantic pass's own growth from a run's phases, and leakage's projected driver
bounded by the lexical audit's projection plus that growth; the expected figures are worked by hand below."""

from __future__ import annotations

from benchmarks import _scaling_phases, _scaling_tables

# (message, rss_mib, peak_rss_mib): the pass's lines start with "leakage semantic:"
PHASES = [
    ("leakage: 10 training docs vs 2 eval docs, engine ray", 200.0, 200.0),
    ("leakage planted: 0 of 9 copies from the cache", 500.0, 520.0),
    ("leakage semantic: 0 window vectors kept from the last run", 800.0, 800.0),
    ("leakage semantic: 2 of 2 eval docs embedded", 900.0, 1_000.0),
    ("leakage semantic: 0 windows from the store, 9 embedded", 950.0, 960.0),
    ("leakage: 3 matching pairs", 700.0, 2_000.0),  # after the pass: not its growth
    ("(end)", 650.0, 700.0),
]


def _phases(growth: float = 0.0) -> list[dict]:
    return [
        {"message": m, "seconds": float(i), "rss_mib": rss, "peak_rss_mib": peak + growth * (i in (3, 4)), "hwm_mib": 0}
        for i, (m, rss, peak) in enumerate(PHASES)
    ]


def _run(docs: int, driver_mib: float, **extra) -> dict:
    return {
        "stage": "leakage",
        "engine": "ray",
        "scale": docs // 1000,
        "docs": docs,
        "seconds": 1.0,
        "docs_per_s": 200.0,
        "docs_per_s_per_core": 100.0,
        "peak_rss_mib": driver_mib,
        "peak_tree_rss_mib": driver_mib,
    } | extra


def test_the_pass_grows_from_the_line_before_it_to_its_largest_sample():
    # before: the planting's line, 500 MiB; the pass's phases peak at 1,000 MiB (the eval side's); the 2,000 MiB
    # after the pass and the 520 MiB inside the planting are not the pass's
    growth = _scaling_phases.pass_growth({"phases": _phases()})
    # the encoder's load: 500 -> 800 MiB at the pass's first line; its work: 800 -> 1,000
    assert growth == {
        "before_mib": 500.0,
        "start_mib": 800.0,
        "pass_mib": 1_000.0,
        "load_mib": 300.0,
        "work_mib": 200.0,
        "growth_mib": 500.0,
    }


def test_a_run_without_phases_or_without_the_pass_has_no_growth():
    assert _scaling_phases.pass_growth({"docs": 1}) is None
    lexical_only = [p for p in _phases() if not p["message"].startswith("leakage semantic:")]
    assert _scaling_phases.pass_growth({"phases": lexical_only}) is None


def _stand_in(docs: int, growth: float) -> dict:
    # the whole driver peak (4,000 MiB) would project far past 64 GiB: only the phases' bound is used
    extra = {"semantic_pass": True, "semantic_encoder": "stand-in", "phases": _phases(growth)}
    return _run(docs, 1_000.0 + docs / 10, **extra)


LEXICAL = [
    _run(100_000, 600.0, semantic_pass=False),
    _run(1_000_000, 1_000.0, semantic_pass=False),
]


def test_leakage_with_the_pass_is_bounded_by_the_lexical_projection_plus_the_pass_growth():
    # lexical: 600 -> 1,000 MiB from 10^5 to 10^6 docs, 400 MiB / 900,000 docs: at 10^7 1,000 + 4,000 = 5,000 MiB,
    # at 10^8 1,000 + 44,000 = 45,000 MiB. The pass grows 500 MiB at 10,000 and 530 at 40,000 docs: 1 MiB a
    # 1,000 docs; at 10^7 530 + 9,960 = 10,490 MiB, at 10^8 530 + 99,960 = 100,490 MiB. Sums: 15,490 MiB =
    # 15.13 GiB and 145,490 MiB = 142.08 GiB; at 10^9 (1,000 + 444,000) + (530 + 999,960) = 1,445,490 MiB =
    # 1,411.6 GiB
    runs = LEXICAL + [_stand_in(10_000, 0.0), _stand_in(40_000, 30.0)]
    rows = [r for r in _scaling_tables.projection(runs) if r.startswith(f"| {_scaling_tables.STAND_IN} |")]
    cells = [[c.strip() for c in r.split("|")[1:-1]] for r in rows]
    assert [c[6] for c in cells] == ["≤ 15.1", "≤ 142.1", "≤ 1,411.6"]
    # a bound above 64 GiB shows neither that it fits nor that it does not
    assert [c[8] for c in cells] == ["yes", "not shown", "not shown"]


def test_a_flat_growth_fits_where_the_lexical_audit_fits():
    # the pass adds 500 MiB at both sizes: at 10^8 45,000 + 500 = 45,500 MiB = 44.43 GiB, a 64 GiB driver holds it
    runs = LEXICAL + [_stand_in(10_000, 0.0), _stand_in(40_000, 0.0)]
    rows = [r for r in _scaling_tables.projection(runs) if r.startswith(f"| {_scaling_tables.STAND_IN} |")]
    assert "| ≤ 44.4 |" in rows[1] and rows[1].endswith("| yes |")


def test_without_phases_the_whole_peak_is_projected_and_the_growth_table_is_empty():
    # 2,000 -> 5,000 MiB from 10,000 to 40,000 docs: 0.1 MiB a doc; at 10^7 5,000 + 996,000 MiB = 977.5 GiB
    runs = LEXICAL + [
        _run(d, 1_000.0 + d / 10, semantic_pass=True, semantic_encoder="stand-in") for d in (10**4, 4 * 10**4)
    ]
    rows = [r for r in _scaling_tables.projection(runs) if r.startswith(f"| {_scaling_tables.STAND_IN} |")]
    assert "| 977.5 |" in rows[0]
    assert _scaling_phases.table(runs) == []


def test_the_growth_table_lists_each_run_with_phases():
    table = _scaling_phases.table([_stand_in(40_000, 30.0) | {"semantic_corpus_docs": 35_000}, _stand_in(10_000, 0.0)])
    # before 500, the load 300 (to 800), the work 200 and 230 (to 1,000 and 1,030 MiB)
    assert table[2] == "| stand-in encoder | ray | 10,000 | n/a | 500 | 300 | 200 | 500 |"
    assert table[3] == "| stand-in encoder | ray | 40,000 | 35,000 | 500 | 300 | 230 | 530 |"


def _load_and_work(docs: int, before: float, start: float, peak: float) -> dict:
    phases = [
        {"message": "leakage planted: 0 copies", "seconds": 0.0, "rss_mib": before, "peak_rss_mib": before},
        {"message": "leakage semantic: 0 kept", "seconds": 1.0, "rss_mib": start, "peak_rss_mib": start},
        {"message": "leakage semantic: 9 embedded", "seconds": 2.0, "rss_mib": start, "peak_rss_mib": peak},
    ]
    return _run(docs, peak, semantic_pass=True, semantic_encoder="stand-in", phases=phases)


def test_a_shrinking_load_does_not_hide_a_growing_work():
    # the load falls 300 -> 250 MiB (allocator reuse) while the work grows 200 -> 250 MiB: growth is 500 MiB at
    # both sizes, flat, but the work's line is 50 MiB / 30,000 docs. At 10^7: the load 250 + the work 250 +
    # 50 x 9,960,000 / 30,000 = 16,600, so 17,100 MiB; with the lexical audit's 5,000 MiB, 22,100 MiB = 21.58 GiB
    runs = LEXICAL + [_load_and_work(10_000, 500.0, 800.0, 1_000.0), _load_and_work(40_000, 600.0, 850.0, 1_100.0)]
    rows = [r for r in _scaling_tables.projection(runs) if r.startswith(f"| {_scaling_tables.STAND_IN} |")]
    assert "| ≤ 21.6 |" in rows[0]


def test_a_log_that_opens_with_the_pass_has_no_line_before_it_and_no_growth():
    # no line before the pass's first one: its RSS before the encoder loaded is unknown, so no load is made up
    opens_with_the_pass = [p for p in _phases() if p["message"].startswith("leakage semantic:")]
    assert _scaling_phases.pass_growth({"phases": opens_with_the_pass}) is None


def test_the_bound_takes_the_lexical_audit_of_its_own_engine_only():
    # the same lexical runs on engine local only: the Ray runs with the pass have no lexical projection of their
    # engine, so their whole peak is projected (1,000 + 40,000 / 10 = 5,000 MiB at 40,000 docs, 0.1 MiB a doc:
    # at 10^7 5,000 + 996,000 MiB = 977.5 GiB), not a bound on local's audit
    local = [r | {"engine": "local"} for r in LEXICAL]
    runs = local + [_stand_in(10_000, 0.0), _stand_in(40_000, 30.0)]
    rows = [r for r in _scaling_tables.projection(runs) if r.startswith(f"| {_scaling_tables.STAND_IN} | ray |")]
    assert "| 977.5 |" in rows[0] and "≤" not in rows[0]
