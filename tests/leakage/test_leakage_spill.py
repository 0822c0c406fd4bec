"""The Ray engine's kept-store keys (``semantic.spill``): read a row group at a time, they are the keys
``store.load`` gives, sorted, with its checks; ``KeySet`` answers membership for 16-byte keys, those ending in
zero bytes included (an ``S16`` element read back as bytes loses them)."""

from __future__ import annotations

import numpy as np

from tasks.leakage.semantic import spill
from tasks.leakage.semantic import store as embedding_store

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
