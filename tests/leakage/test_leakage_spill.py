"""The Ray engine's facts of the semantic pass: the kept-store keys (``semantic.spill``), read a row group at a
time, are the keys ``store.load`` gives, sorted, with its checks; ``KeySet`` answers membership for 16-byte keys,
those ending in zero bytes included (an ``S16`` element read back as bytes loses them); a corpus block laid out by
a task (``semantic.corpus_layout``) is what ``Encoder.layout`` lays out, counted as ``Encoder.count`` counts."""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq

from leakage_fixtures import filler, semantic_params
from leakage_fixtures import params as leakage_params
from tasks.leakage.semantic import corpus_layout, spill
from tasks.leakage.semantic import store as embedding_store
from tasks.leakage.semantic.encoder import Encoder

KEY = {"precision": "fp32", "code": "c1"}


def unit_rows(n: int, dim: int, seed: int) -> np.ndarray:
    rows = np.random.default_rng(seed).normal(size=(n, dim)).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def keys_with_zero_tails(n: int) -> list[bytes]:
    """``n`` distinct 16-byte keys, some ending in one or more zero bytes, some equal but for their zero tail."""
    rng = np.random.default_rng(7)
    keys = [bytes(rng.integers(0, 256, 16, dtype=np.uint8)) for _ in range(n - 4)]
    return keys + [b"a" * 15 + b"\0", b"a" * 14 + b"\0\0", b"a" * 14 + b"\0b", b"\0" * 16]


def test_stored_keys_are_the_loaded_keys_sorted_read_a_row_group_at_a_time(tmp_path, monkeypatch):
    keys = keys_with_zero_tails(11)
    monkeypatch.setattr(embedding_store, "STORE_ROWS", 3)  # 4 row groups
    embedding_store.save(tmp_path, dict(zip(keys, unit_rows(11, 8, 1))), KEY)
    got, reason = spill.stored_keys(tmp_path, KEY, True, 8)
    assert reason == "store found" and got.dtype == np.dtype("S16")
    assert got.tobytes() == b"".join(sorted(keys))  # the zero tails kept, in bytes order
    loaded, _ = embedding_store.load(tmp_path, KEY, True, 8)
    assert sorted(loaded) == sorted(keys)
    kept = spill.KeySet(got)
    assert len(kept) == 11 and all(k in kept for k in keys)
    assert b"a" * 13 + b"\0\0\0" not in kept and b"a" * 15 + b"b" not in kept and b"\xff" * 16 not in kept
    assert kept.isin(np.array([keys[0], b"\x01" * 16, keys[-2]], "S16")).tolist() == [True, False, True]
    assert not spill.KeySet(np.zeros(0, "S16")).isin(np.array([keys[0]], "S16")).any()


def test_stored_keys_refuse_what_store_load_refuses(tmp_path, monkeypatch):
    keys = keys_with_zero_tails(8)
    monkeypatch.setattr(embedding_store, "STORE_ROWS", 3)
    vectors = unit_rows(8, 8, 2)
    assert spill.stored_keys(tmp_path, KEY, True, 8)[1] == f"no cache in {tmp_path}"
    embedding_store.save(tmp_path, dict(zip(keys, vectors)), KEY)
    assert spill.stored_keys(tmp_path, KEY, False, 8)[1] == "leakage.incremental: false"
    assert len(spill.stored_keys(tmp_path, {**KEY, "precision": "int8"}, True, 8)[0]) == 0
    changed = spill.stored_keys(tmp_path, {**KEY, "code": "c2"}, True, 8)
    assert len(changed[0]) == 0 and changed[1] == "the cache fingerprint changed (code)"
    assert len(spill.stored_keys(tmp_path, KEY, True, 16)[0]) == 0  # another width
    for bad in (np.nan, 2.0):  # a NaN, a vector not of unit length, in the last row group
        damaged = vectors.copy()
        damaged[-1] = bad
        embedding_store.save(tmp_path, dict(zip(sorted(keys), damaged)), KEY)
        got, reason = spill.stored_keys(tmp_path, KEY, True, 8)
        assert len(got) == 0 and reason.endswith("cannot be used (keys or vectors not as written)")
        assert embedding_store.load(tmp_path, KEY, True, 8)[0] == {}
    (tmp_path / embedding_store.STORE).write_bytes(b"not parquet")
    got, reason = spill.stored_keys(tmp_path, KEY, True, 8)
    assert len(got) == 0 and reason.startswith("the cache ") and "cannot be used" in reason


def test_a_corpus_block_laid_out_by_a_task_is_what_the_encoder_lays_out(tiny_encoder, tmp_path):
    """``corpus_layout.lay_out_block`` (a Ray task's body, run here) against ``Encoder.layout`` of the same
    texts: window counts, token ranges, keys, the windows' ids and the layout rows ``store.save_layouts`` writes;
    and ``joined`` / ``count`` / ``todo_of`` over two blocks give ``Layout``'s docs and ``Encoder.count``'s."""
    cfg = leakage_params(semantic=semantic_params(tiny_encoder, window_tokens=16, stride_tokens=6)).semantic
    texts = [filler(40, 1), "", "Ｆｕｌｌ width and a ZW\u200bSP, normalised first", filler(40, 1), filler(9, 2), "x"]
    enc = Encoder(cfg, leakage_params().hardware)
    laid = enc.layout(texts)
    parts = [
        corpus_layout.lay_out_block(tmp_path, str(tiny_encoder), 16, 6, b, texts[lo:hi])
        for b, (lo, hi) in enumerate([(0, 4), (4, 6)])
    ]
    joined = corpus_layout.joined(parts, texts, tmp_path)
    assert joined.doc.tolist() == laid.doc and [tuple(b) for b in joined.bounds.tolist()] == laid.bounds
    assert joined.keys.tobytes() == b"".join(laid.keys) and joined.starts.tolist()[-1] == len(laid.keys)
    assert parts[0][0].tolist()[1] == 0 and len(set(laid.keys)) < len(laid.keys)  # an empty text; a repeated one
    rows = np.arange(len(laid.keys))
    todo = {k: v for b in range(2) for k, v in corpus_layout.todo_of(joined, rows, b).items()}
    assert {k: v.tolist() for k, v in todo.items()} == {k: v.tolist() for k, v in laid.pieces.items()}
    layouts = pq.read_table(tmp_path / "layouts" / "000000.parquet").to_pylist()
    layouts += pq.read_table(tmp_path / "layouts" / "000001.parquet").to_pylist()
    expected = {d: (n, b"".join(keys), first) for d, (n, keys, first) in enc.layouts_used.items()}
    assert {r["md5"]: (r["n_tokens"], r["keys"], r["first"]) for r in layouts} == expected
    stats = {"windows_from_cache": 0, "windows_embedded": 0, "tokens_embedded": 0}
    store_stats = {"windows_stored": 0, "windows_computed": 0}
    cached, kept = laid.keys[:2], spill.KeySet(np.array(sorted(laid.keys[5:7]), "S16"))
    corpus_layout.count(joined, cached, kept, stats, store_stats)
    enc.cache, enc.stored = dict.fromkeys(cached), dict.fromkeys(laid.keys[5:7])  # type: ignore[assignment]
    enc.count(laid.keys, [e - s for s, e in laid.bounds])
    assert stats == {k: enc.stats[k] for k in stats} and store_stats == enc.store_stats


def test_a_corpus_block_of_empty_texts_lays_out_no_window(tiny_encoder, tmp_path):
    """A block whose texts are all "" (the tokenizer raises on an empty batch): no window, empty files, and
    ``joined`` after a block with windows still places that block's windows (the local engine's ``layout`` of
    the same texts, ``Encoder.tokenize`` of no text, gives none either)."""
    cfg = leakage_params(semantic=semantic_params(tiny_encoder, window_tokens=16, stride_tokens=6)).semantic
    counts, bounds, keys = corpus_layout.lay_out_block(tmp_path, str(tiny_encoder), 16, 6, 1, ["", ""])
    assert counts.tolist() == [0, 0] and bounds.shape == (0, 2) and len(keys) == 0
    assert pq.read_table(tmp_path / "pieces" / "000001.parquet").num_rows == 0
    assert pq.read_table(tmp_path / "layouts" / "000001.parquet").num_rows == 0
    first = corpus_layout.lay_out_block(tmp_path, str(tiny_encoder), 16, 6, 0, [filler(40, 1)])
    joined = corpus_layout.joined([first, (counts, bounds, keys)], [filler(40, 1), "", ""], tmp_path)
    laid = Encoder(cfg, leakage_params().hardware).layout([filler(40, 1), "", ""])
    assert joined.doc.tolist() == laid.doc and joined.starts.tolist() == [0, len(laid.keys), len(laid.keys)]
    assert corpus_layout.todo_of(joined, np.arange(len(laid.keys)), 1) == {}
