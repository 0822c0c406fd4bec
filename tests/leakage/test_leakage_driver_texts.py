"""The leakage driver without the training texts (``engine: ray``): the split rows read without them
(``outputs.read_split(train_text=False)``) and the planted filler's texts fetched as the plants read them
(``outputs.Fetched``); expected values written out by hand or made from the texts themselves."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest

from tasks.leakage import outputs
from tasks.leakage.planted.filler import FillerRing


def split_row(doc_id: str, role: str, split: str, duplicate: bool = False) -> dict:
    return {"doc_id": doc_id, "source": role, "role": role, "text": f"text of {doc_id}", "split": split,
            "is_duplicate": duplicate}  # fmt: skip


def test_read_split_without_training_texts_gives_the_same_rows_and_eval_rows(tmp_path):
    shards = {
        "a": [split_row("a1", "task", "dev"), split_row("a2", "task", "train"), split_row("a3", "task", "test")],
        "b": [split_row("b1", "pretrain", "train"), split_row("b2", "pretrain", "train")],
    }
    for name, rows in shards.items():
        pd.DataFrame(rows).to_parquet(tmp_path / f"{name}.parquet", index=False)
    rows, evals, trains = outputs.read_split(tmp_path, train_text=False)
    assert list(rows["doc_id"]) == ["a1", "a2", "a3", "b1", "b2"] and "text" not in rows
    assert list(evals["doc_id"]) == ["a1", "a3"] and list(evals["text"]) == ["text of a1", "text of a3"]
    assert list(trains["doc_id"]) == ["a2", "b1", "b2"] and list(trains) == ["doc_id", "source", "role"]
    assert list(rows) == ["doc_id", "source"] and list(rows["source"]) == ["task"] * 3 + ["pretrain"] * 2
    assert list(trains["role"]) == ["task", "pretrain", "pretrain"] and list(trains.index) == [0, 1, 2]


def ring_texts() -> tuple[list[str], list[str]]:
    texts = [" ".join(f"w{d}_{k}" for k in range(3 + d % 5)) for d in range(40)]
    texts[7] = "   "  # no whitespace token: off the ring
    return texts, [f"d{d}" for d in range(40)]


def test_fetched_texts_give_the_streams_the_texts_give_and_fetch_only_what_they_read():
    texts, ids = ring_texts()
    asked: list[list[str]] = []

    def fetch(wanted: list[str]) -> dict[str, str]:
        asked.append(wanted)
        return {d: texts[ids.index(d)] for d in wanted}

    def streams(ring: FillerRing) -> list[list[str]]:
        return [list(itertools.islice(ring.stream(f"plant {p}"), 9)) for p in range(4)]

    fetched = outputs.Fetched(ids, np.array([len(t.split()) for t in texts]), fetch)
    made = fetched.filled(lambda: streams(FillerRing(fetched, ids, 3, fetched.words > 0)))
    assert made == streams(FillerRing(texts, ids, 3))
    assert len(asked) >= 1 and sorted(fetched.texts) == sorted(set().union(*asked))
    assert "d7" not in fetched.texts and len(fetched.texts) < len(texts)  # 4 streams of 9 words: a few docs read


def test_fetched_texts_refuse_a_fetch_that_leaves_a_doc_out():
    texts, ids = ring_texts()
    fetched = outputs.Fetched(ids, np.array([len(t.split()) for t in texts]), lambda wanted: {})
    with pytest.raises(ValueError, match="no text for 1 doc ids"):
        fetched.filled(lambda: fetched[0])
