"""What keeps the leakage driver's memory down without changing a result: the split rows read shard by shard
(``outputs.read_split``), training texts read where they lie (``outputs.Picked``) and the semantic pass's texts
tokenized in chunks (``semantic.encoder.TOKENIZE_TEXTS``); expected values written out by hand."""

from __future__ import annotations

import numpy as np
import pandas as pd

from leakage_fixtures import params as leakage_params
from leakage_fixtures import semantic_params
from tasks.leakage import outputs
from tasks.leakage.semantic import encoder as semantic_encoder


def split_row(doc_id: str, role: str, split: str, duplicate: bool = False, **more) -> dict:
    source = "task" if role == "task" else "pre"
    return {"doc_id": doc_id, "source": source, "role": role, "text": f"text of {doc_id}", "split": split,
            "is_duplicate": duplicate, **more}  # fmt: skip


def test_read_split_gives_the_rows_without_text_and_the_eval_and_training_rows_with_it(tmp_path):
    shards = {
        "a": [split_row("a1", "task", "dev"), split_row("a2", "task", "test", True), split_row("a3", "task", "test")],
        "b": [
            split_row("b1", "pretrain", "train"),
            split_row("b2", "task", "train"),
            split_row("b3", "pretrain", "dev"),
        ],
        "c": [split_row("c1", "task", "train", label="x"), split_row("c2", "task", "dev", label="y")],
    }
    for name, rows in shards.items():  # shard a: no training row; only shard c has a label column
        pd.DataFrame(rows).to_parquet(tmp_path / f"{name}.parquet", index=False)
    rows, evals, trains = outputs.read_split(tmp_path)
    assert list(rows["doc_id"]) == ["a1", "a2", "a3", "b1", "b2", "b3", "c1", "c2"] and "text" not in rows
    assert list(evals["doc_id"]) == ["a1", "a3", "c2"] and list(evals.index) == [0, 1, 2]
    assert list(trains["doc_id"]) == ["b1", "b2", "b3", "c1"] and list(trains.index) == [0, 1, 2, 3]
    assert list(trains["text"]) == ["text of b1", "text of b2", "text of b3", "text of c1"]
    assert list(evals["label"].fillna("-")) == ["-", "-", "y"]


def test_picked_reads_the_chosen_rows_of_a_column_by_index_and_in_blocks(monkeypatch):
    column = pd.Series([f"t{k}" for k in range(10)], dtype="str")
    picked = outputs.Picked(column, np.array([7, 2, 2, 9, 0]))
    monkeypatch.setattr(outputs, "ITER_ROWS", 2)  # blocks [7, 2], [2, 9], [0]
    assert len(picked) == 5 and picked[0] == "t7" and picked[4] == "t0"
    assert list(picked) == ["t7", "t2", "t2", "t9", "t0"]


def test_tokenizing_in_chunks_lays_out_the_windows_one_call_does(tiny_encoder, monkeypatch):
    cfg = leakage_params(semantic=semantic_params(tiny_encoder, window_tokens=8, stride_tokens=6))
    words = "the cat sat on a mat while dogs ran far away across green fields of grass".split()
    texts = [" ".join(words[k : k + 3 + k % 9]) for k in range(12)] + ["", words[0] + " " + words[1]]
    spans = [(0, -1)] * 13 + [(4, 7)]  # the last: only the windows over its second word

    def layout(chunk: int):
        monkeypatch.setattr(semantic_encoder, "TOKENIZE_TEXTS", chunk)
        enc = semantic_encoder.Encoder(cfg.semantic, cfg.hardware)
        laid = enc.layout(texts, spans)
        return laid.doc, laid.bounds, laid.keys, {k: v.tolist() for k, v in laid.pieces.items()}, enc.layouts_used

    whole, chunked = layout(10_000), layout(3)
    assert chunked == whole and 12 not in whole[0] and len(set(whole[0])) == 13


def test_the_store_written_in_blocks_of_rows_reads_back_every_vector(tmp_path, monkeypatch):
    import pyarrow.parquet as pq

    from tasks.leakage.semantic import store

    rng = np.random.default_rng(5)
    vectors = {bytes([k]) * 16: v / np.linalg.norm(v) for k, v in enumerate(rng.normal(size=(5, 4)).astype(np.float32))}
    monkeypatch.setattr(store, "STORE_ROWS", 2)  # rows [k0 k1] [k2 k3] [k4]
    key = {"precision": "fp32", "code": "c"}
    store.save(tmp_path / "s", vectors, key)
    assert pq.ParquetFile(tmp_path / "s" / store.STORE).metadata.num_row_groups == 3
    loaded, reason = store.load(tmp_path / "s", key, True, 4)
    assert reason == "store found" and list(loaded) == sorted(vectors)
    assert all(np.array_equal(loaded[k], vectors[k]) for k in vectors)


def test_the_calibration_scores_blocks_of_at_most_block_bytes_with_the_same_pairs(monkeypatch):
    from tasks.leakage.semantic import method
    from tasks.leakage.semantic.windows import Windows

    rng = np.random.default_rng(4)
    docs = np.sort(rng.integers(0, 30, size=90))
    vectors = rng.integers(-2, 3, size=(90, 6)).astype(np.float32)  # small integers: every dot product exact
    windows = Windows(vectors, docs, np.zeros((90, 2), int), [], None)
    groups, clusters = [f"g{d % 2}" for d in range(30)], [f"c{d // 2}" for d in range(30)]
    whole = method.clean_pair_scores(windows, groups, clusters)
    seen, inner = [], method._nearest_outside_cluster
    monkeypatch.setattr(method, "BLOCK_BYTES", 4 * 50 * 3)  # 3 rows of a 50-window group
    monkeypatch.setattr(
        method, "_nearest_outside_cluster", lambda v, o, c, rows: seen.append(rows) or inner(v, o, c, rows)
    )
    cut = method.clean_pair_scores(windows, groups, clusters)
    assert all(rows * 4 * len(docs) <= 4 * 50 * 3 * 2 for rows in seen) and min(seen) <= 3 < 4096
    assert np.array_equal(cut[0], whole[0]) and np.array_equal(cut[1], whole[1]) and (whole[1] >= 0).sum() > 20
