"""The cleaned shards (``tasks.leakage.cleaned``): the split shard's rows less the removed ones, with
``leak_flag``, streamed in blocks; expected frames written out by hand."""

from __future__ import annotations

import pandas as pd
import pyarrow.parquet as pq

from tasks.leakage import cleaned


def test_a_cleaned_shard_is_the_split_frame_less_the_removed_rows_with_leak_flag(tmp_path, monkeypatch):
    split = pd.DataFrame(
        {
            "doc_id": [f"d{k}" for k in range(7)],
            "text": ["a b", "c", "d e f", "g", "h", "i j", "k"],
            "tokens": [["a", "b"], ["c"], ["d", "e", "f"], ["g"], ["h"], ["i", "j"], ["k"]],
            "is_duplicate": [False, True, False, False, False, False, True],
        }
    )
    split.to_parquet(tmp_path / "s.parquet", index=False)
    monkeypatch.setattr(cleaned, "BLOCK_ROWS", 3)  # blocks d0-d2, d3-d5 (all removed: no row group), d6
    out = tmp_path / "out.parquet"
    removed, flagged = {"d1", "d3", "d4", "d5", "absent"}, {"d0", "d1", "d6", "other"}
    assert cleaned.clean_shard(tmp_path / "s.parquet", out, removed, flagged) == 3
    want = pd.DataFrame(
        {
            "doc_id": ["d0", "d2", "d6"],
            "text": ["a b", "d e f", "k"],
            "tokens": [["a", "b"], ["d", "e", "f"], ["k"]],
            "is_duplicate": [False, False, True],
            "leak_flag": [True, False, True],
        }
    )
    got = pd.read_parquet(out)
    assert list(got.columns) == list(want.columns) and got["leak_flag"].dtype == bool
    assert got.drop(columns="tokens").equals(want.drop(columns="tokens"))
    assert [list(t) for t in got["tokens"]] == list(want["tokens"])
    assert pq.ParquetFile(out).metadata.num_row_groups == 2
    empty = tmp_path / "empty.parquet"
    assert cleaned.clean_shard(tmp_path / "s.parquet", empty, set(split["doc_id"]), set()) == 0
    assert list(pd.read_parquet(empty).columns) == list(want.columns) and len(pd.read_parquet(empty)) == 0
