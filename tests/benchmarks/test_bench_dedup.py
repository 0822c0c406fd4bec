"""The dedup benchmark's ground truth and scoring (benchmarks/_dedup_corpus.py) on hand-computed cases."""

import sys

import pytest

from benchmarks import _dedup_corpus as corpora
from benchmarks._measure import TimedOut, run_measured

TEN = " ".join(f"w{k}" for k in range(10))  # 10 words: 6 five-gram shingles


def test_truth_is_the_exact_shingle_jaccard_within_groups_and_of_similar_rows():
    edited = TEN.replace("w9", "x9")  # shares 5 of 6 shingles with TEN: J = 5 / 7
    unrelated = " ".join(f"u{k}" for k in range(10))
    corpus = corpora.Corpus([TEN, edited, unrelated, TEN.upper()], rows=2)  # 2 rows, 1 variant each
    truth = corpora.truth(corpus, 5)
    assert truth.jaccard[(0, 1)] == pytest.approx(5 / 7)  # rows 0 and 1: similar rows, cross pair
    assert truth.jaccard[(1, 3)] == pytest.approx(5 / 7)  # row 1 and the variant of row 1 (upper case TEN)
    assert truth.jaccard[(0, 2)] == 0.0  # row 0 and its "variant" 2, which shares nothing
    assert truth.jaccard[(0, 3)] == 1.0  # the same normalized text (a cross pair of the similar rows' groups)
    assert truth.duplicates_of(0.8) == {0: {3}, 3: {0}}
    assert truth.duplicates_of(0.7) == {0: {1, 3}, 1: {0, 3}, 3: {0, 1}}


def test_score_counts_clusters_found_whichever_row_is_kept():
    corpus = corpora.Corpus([TEN, "a b c", TEN, "a b c d"], rows=2)  # doc 2 copies row 0
    truth = corpora.Truth.of({(0, 2): 1.0, (1, 3): 0.5, (0, 1): 0.0})
    want = {
        "clusters": 1,
        "docs_in_clusters": 2,
        "precision": 1.0,
        "recall": 1.0,
        "recall_planted": 1.0,
        "pairs_found": 1,
        "true_pairs": 1,
        "true_planted_pairs": 1,
    }
    assert corpora.score([[0, 2]], corpus, truth, 0.8) == want
    # keeping the other copy changes what is removed, not the score
    assert corpora.score([[2, 0]], corpus, truth, 0.8, removed={0}) == {**want, "docs_removed": 1}
    wrong = corpora.score([[0, 1], [2, 3]], corpus, truth, 0.8)  # both clusters hold no true pair
    assert (wrong["precision"], wrong["recall"], wrong["pairs_found"]) == (0.0, 0.0, 0)
    chained = corpora.score([[0, 1, 2]], corpus, truth, 0.8)  # 1 joined without a true partner in its cluster
    assert (chained["precision"], chained["recall"]) == (2 / 3, 1.0)


def test_clusters_of_labels():
    assert corpora.clusters_of([0, 1, 0, 3, 3, 5]) == [[0, 2], [3, 4]]


def test_variants_replace_one_word_in_every_step():
    rows = [" ".join(f"w{k}" for k in range(120))]
    corpus = corpora.planted(rows, 5, seed=0)
    changed = [sum(a != b for a, b in zip(rows[0].split(), text.split())) for text in corpus.texts[1:]]
    # steps 60, 60, 60, 30: 2, 2, 2 and 4 positions (a replacement word can equal the old one: at most)
    assert all(c <= limit for c, limit in zip(changed, (2, 2, 2, 4))) and sum(changed) >= 8


def test_run_measured_sees_a_child_peak_and_kills_one_past_its_limit(tmp_path):
    # 300 MiB touched by a grandchild: the tree's largest process is at least that (the parent's own size does
    # not leak in through fork + exec)
    grow = (
        "import subprocess, sys; subprocess.run([sys.executable, '-c', "
        "'import time; b = bytearray(300 * 2**20); time.sleep(0.5)'], check=True)"
    )
    measured = run_measured([sys.executable, "-c", grow], cwd=tmp_path)
    assert 300 <= measured["peak_rss_mib"] < 400 and measured["peak_tree_rss_mib"] >= 300
    assert measured["driver_peak_rss_mib"] < 100  # the spawned process is a bare interpreter: not its grandchild
    # the driver's own 300 MiB, with a small child beside it
    own = "import subprocess, sys, time; b = bytearray(300 * 2**20); time.sleep(0.3); subprocess.run(['true'])"
    assert 300 <= run_measured([sys.executable, "-c", own], cwd=tmp_path)["driver_peak_rss_mib"] < 400
    with pytest.raises(TimedOut):
        run_measured(["sleep", "30"], cwd=tmp_path, timeout_s=0.3)


def test_every_stage_round_starts_without_the_incremental_index(tmp_path, monkeypatch):
    # a second round on the same folder would otherwise reuse every signature and Jaccard of the first
    from benchmarks import dedup as bench

    index = tmp_path / "data" / "dedup_index"
    index.mkdir(parents=True)
    (index / "entries.parquet").write_bytes(b"from an earlier round")
    (tmp_path / "stage.json").write_text('{"clusters": [], "removed": []}')
    index_at_spawn = []
    monkeypatch.setattr(bench, "run_measured", lambda command, **kw: index_at_spawn.append(index.exists()) or {})
    monkeypatch.setattr(bench, "stage_clusters", lambda work: {})
    bench._part("stage", tmp_path)
    assert index_at_spawn == [False]


def test_stage_clusters_are_read_from_its_outputs_after_the_measured_run(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from benchmarks import dedup as bench

    (tmp_path / "data" / "dedup").mkdir(parents=True)
    rows = {
        "doc_id": ["0000000", "0000001", "0000002", "0000003", "0000004"],
        "cluster_id": ["0000001", "0000001", "0000002", "0000001", "0000004"],
        "is_duplicate": [True, False, False, True, False],
    }
    pq.write_table(pa.table(rows), tmp_path / "data" / "dedup" / "bench.parquet")
    assert bench.stage_clusters(tmp_path) == {"removed": [0, 3], "clusters": [[0, 1, 3]]}
