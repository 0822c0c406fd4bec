"""tokenize streams its pretraining rows (issue 63 item 3): the rows come in ``read_pretraining_rows``' order
(doc_id, ties in source then file order) whether a file is in order or sorted outside memory in runs, and the
length statistics computed from counts equal numpy's from the lengths."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from tasks.common.files.parquet import read_pretraining_rows
from tasks.config.corpus.split import PRETRAIN_SPLITS
from tasks.tokenize import pretrain_rows
from tasks.tokenize.pretrain_rows import PretrainRows
from tasks.tokenize.tables import length_stats, length_stats_of_counts
from tokenizer_fixtures import make_paths, write_source


def shuffled_rows(prefix: str, n: int, rng: np.random.Generator) -> list[dict]:
    """``n`` rows in a random order, some doc_ids repeated (a tie the merge must keep in file order), a few
    duplicates (left out) and, for a task source, train/dev/test splits."""
    rows = []
    for k in rng.permutation(n).tolist():
        doc_id = f"{prefix}:{k % (n - 5):04d}"  # the last five ids repeat earlier ones
        role = "task" if prefix == "t" else "pretrain"
        split = ["train", "dev", "test"][k % 3] if role == "task" else ["train", "heldout"][k % 4 == 0]
        rows.append({"doc_id": doc_id, "role": role, "split": split, "text": f"text {prefix} {k}"})
        rows[-1]["is_duplicate"] = bool(k % 17 == 0)
    return rows


@pytest.mark.parametrize(
    ("sort_run_rows", "batch_chars", "fanin"), [(7, 10**6, 16), (10_000, 10**6, 16), (7, 20, 16), (7, 10**6, 2)]
)
def test_streamed_rows_come_in_the_order_of_the_frame_read_whole(
    tmp_path, monkeypatch, sort_run_rows, batch_chars, fanin
):
    """Several spilled runs a file, or one; batches of 4 documents, or cut at 20 characters (2-3 texts of 8-11);
    runs merged 2 at a time, pass after pass, into at most 2 a file (spilled record batches of ~40 bytes: 2-3
    rows)."""
    monkeypatch.setattr(pretrain_rows, "SORT_RUN_ROWS", sort_run_rows)
    monkeypatch.setattr(pretrain_rows, "MERGE_FANIN", fanin)
    monkeypatch.setattr(pretrain_rows, "SPILL_BYTES", 40 if fanin == 2 else 1 << 20)
    monkeypatch.setattr(pretrain_rows, "READ_ROWS", 5)
    monkeypatch.setattr(pretrain_rows, "BATCH_CHARS", batch_chars)
    rng = np.random.default_rng(3)
    paths = make_paths(tmp_path)
    write_source(paths, "a", shuffled_rows("x", 60, rng))  # shares doc ids with b: ties across sources
    write_source(paths, "b", shuffled_rows("x", 40, rng))
    write_source(paths, "t", shuffled_rows("t", 50, rng))
    in_order = sorted(shuffled_rows("y", 30, rng), key=lambda r: r["doc_id"])
    write_source(paths, "c", in_order)  # merged as read, not spilled
    for name in ("a", "c"):  # row groups of 4 rows, read one at a time
        path = paths.data / "leakage" / f"{name}.parquet"
        pq.write_table(pq.read_table(path), path, row_group_size=4)
    whole = read_pretraining_rows(paths.data, ["a", "b", "c", "t"])
    with PretrainRows(paths.data, ["t", "c", "b", "a"], tmp_path / "spill") as rows:
        assert ("c", "train") not in {(p.stem, s) for p, s in rows.runs} and ("a", "train") in {
            (p.stem, s) for p, s in rows.runs
        }
        names = {(p.stem, s): sorted(r.name for r in v) for (p, s), v in rows.runs.items()}
        if sort_run_rows == 7 and fanin == 16:  # a: row groups of 4 rows, a run ends at 8 rows: its train rows in 6
            assert names["a", "train"] == [f"run-{i:05d}.arrow" for i in range(6)]
        elif fanin == 2:  # 6 runs -> 3 -> 2 (two passes), and b's 4 -> 2; the inputs of a merge removed
            assert names["a", "train"] == ["merge-2-00000.arrow", "merge-2-00001.arrow"]
            assert names["b", "train"] == ["merge-1-00000.arrow", "merge-1-00001.arrow"]
            assert sorted(f.name for f in (tmp_path / "spill" / "a-train").iterdir()) == names["a", "train"]
        for split in PRETRAIN_SPLITS:
            batches = list(rows.batches(split, 4))
            assert {len(b.texts) for b in batches[:-1]} <= ({4} if batch_chars > 100 else {2, 3})
            streamed = [r for b in batches for r in zip(b.doc_ids, b.texts, b.sources)]
            part = whole[whole["split"] == split]
            assert streamed == list(zip(part["doc_id"], part["text"], part["source"]))
            assert len(streamed) > 10
    assert not (tmp_path / "spill").exists()


def test_a_source_without_its_file_or_a_contract_column_is_a_one_line_error(tmp_path):
    paths = make_paths(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"leakage/a\.parquet: no such file"):
        PretrainRows(paths.data, ["a"], tmp_path / "spill")
    write_source(paths, "a", [{"doc_id": "a:1", "role": "pretrain", "split": "train", "text": "x"}])
    path = paths.data / "leakage" / "a.parquet"
    pd.read_parquet(path).drop(columns=["is_duplicate"]).to_parquet(path)
    with pytest.raises(ValueError, match=r"a\.parquet: missing contract columns \['is_duplicate'\]"):
        PretrainRows(paths.data, ["a"], tmp_path / "spill")


@pytest.mark.parametrize("n", [1, 2, 3, 19, 20, 21, 999, 5_000])
def test_length_stats_from_counts_equal_numpys_from_the_lengths(n):
    rng = np.random.default_rng(n)
    for high in (2, 40, 3_000):
        lengths = rng.integers(0, high, n)
        assert length_stats_of_counts(np.bincount(lengths)) == length_stats(lengths)
    assert length_stats_of_counts(np.zeros(0, np.int64)) == length_stats(np.zeros(0, np.int64))
