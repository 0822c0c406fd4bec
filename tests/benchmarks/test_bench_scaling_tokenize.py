"""benchmarks/_scaling_tokenize.py's corpus, written in parts: the rows a one-frame build writes, in its order."""

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from benchmarks import _dedup_corpus, _scaling_tokenize


def _rows() -> pd.DataFrame:
    # two pretraining sources and a task source; a task row of a pretraining source too
    words = [f"w{i}" for i in range(40)]
    texts = [" ".join(words[k : k + 9]) for k in range(7)]
    return pd.DataFrame(
        {
            "doc_id": ["a3", "a1", "b2", "a2", "b1", "t1", "t2"],
            "source": ["a", "a", "b", "a", "b", "t", "a"],
            "role": ["pretrain"] * 5 + ["task"] * 2,
            "text": texts,
            "label": [None] * 5 + ["x", "y"],
            "is_duplicate": [False] * 7,
            "split": ["train", "heldout", "train", "train", "train", "train", "dev"],
        }
    )


def _one_frame(rows: pd.DataFrame, docs: int) -> dict[str, pd.DataFrame]:
    # the corpus as the builder wrote it before it wrote in parts: every copy at once (remixed), then grouped
    pre = rows[rows["role"] == "pretrain"].reset_index(drop=True)
    scale = -(-docs // len(pre))
    copies = pd.concat([pre] * scale, ignore_index=True)
    copies["text"] = _dedup_corpus.remixed(list(pre["text"]), scale, near_duplicates=False)
    copies["doc_id"] = [d if i < len(pre) else f"{d}~{i // len(pre)}" for i, d in enumerate(copies["doc_id"])]
    corpus = pd.concat([copies.iloc[:docs], rows[rows["role"] != "pretrain"]], ignore_index=True)
    corpus["is_duplicate"], corpus["leak_flag"] = False, False
    return {str(source): part for source, part in corpus.groupby("source", sort=True)}


def test_remixes_draw_the_random_stream_of_the_one_list_remix():
    # the one-list loop remixed ran before it took its copies from remixes: one generator, copy after copy
    texts = list(_rows()["text"])
    rng = np.random.default_rng(_dedup_corpus.REMIX_SEED)
    vocabulary = sorted({w for text in texts for w in text.split()})
    expected = list(texts)
    for _ in range(2):
        for k, text in enumerate(texts):
            expected.append(_dedup_corpus._variant(text, _dedup_corpus.REMIX_STEP, rng, vocabulary))
            if k % _dedup_corpus.NEAR_EVERY == 0:
                expected.append(_dedup_corpus._variant(expected[-1], _dedup_corpus.NEAR_STEP, rng, vocabulary))
    copies = _dedup_corpus.remixes(texts, near_duplicates=True)
    assert texts + next(copies) + next(copies) == expected == _dedup_corpus.remixed(texts, 3, near_duplicates=True)
    assert len(expected) == 7 + 2 * (7 + 1) and expected[7] != texts[0]


@pytest.mark.parametrize("docs", [3, 12])
def test_one_part_has_the_bytes_of_a_frame_written_whole(tmp_path, docs):
    (tmp_path / "parts").mkdir()
    _scaling_tokenize.write_corpus(_rows(), docs, tmp_path / "parts")
    for source, part in _one_frame(_rows(), docs).items():
        part.to_parquet(tmp_path / f"{source}.parquet", index=False)
        assert (tmp_path / "parts" / f"{source}.parquet").read_bytes() == (tmp_path / f"{source}.parquet").read_bytes()
    assert sorted(p.name for p in (tmp_path / "parts").iterdir()) == ["a.parquet", "b.parquet", "t.parquet"]


def test_parts_hold_the_same_rows_in_row_groups(tmp_path, monkeypatch):
    monkeypatch.setattr(_scaling_tokenize, "PART_ROWS", 4)  # a copy is 5 rows: a row group after each
    _scaling_tokenize.write_corpus(_rows(), 12, tmp_path)
    for source, part in _one_frame(_rows(), 12).items():
        written = pq.ParquetFile(tmp_path / f"{source}.parquet")
        assert written.read().to_pandas().equals(part.reset_index(drop=True)), source
        assert written.num_row_groups == {"a": 3, "b": 2, "t": 1}[source]
    ids = pq.read_table(tmp_path / "a.parquet").column("doc_id").to_pylist()
    assert ids == ["a3", "a1", "a2", "a3~1", "a1~1", "a2~1", "a3~2", "a1~2", "t2"]  # copy 2: its first 2 docs
    assert np.all(pq.read_table(tmp_path / "b.parquet").column("leak_flag").to_numpy() == False)  # noqa: E712
