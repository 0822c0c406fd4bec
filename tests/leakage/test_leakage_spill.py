"""The Ray engine's facts of the semantic pass: the kept-store keys (``semantic.cluster.spill``), read a row group at a
time, are the keys ``store.load`` gives, sorted, with its checks; ``KeySet`` answers membership for 16-byte keys,
those ending in zero bytes included (an ``S16`` element read back as bytes loses them); a corpus block laid out by
a task (``semantic.cluster.corpus_layout``) is what ``Encoder.layout`` lays out, counted as ``Encoder.count`` counts; a
row group's task lays out its kept pretraining rows, read by itself; the texts a driver without them reads."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from leakage_fixtures import filler, frame, semantic_params
from leakage_fixtures import params as leakage_params
from tasks.leakage.outputs import SplitShards, read_sources, task_train_rows, train_rows
from tasks.leakage.semantic import store as embedding_store
from tasks.leakage.semantic.cluster import corpus_keys, corpus_layout, spill
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
    texts: window counts, keys, the windows' ids and the layout rows ``store.save_layouts`` writes; ``joined``
    over two blocks places each doc's windows as ``Layout.doc`` does; ``CorpusWindows.text_of`` gives
    ``Windows.text_of``'s text for every window, its token range found again from its doc's text."""
    cfg = leakage_params(semantic=semantic_params(tiny_encoder, window_tokens=16, stride_tokens=6)).semantic
    texts = [filler(40, 1), "", "Ｆｕｌｌ width and a ZW\u200bSP, normalised first", filler(40, 1), filler(9, 2), "x"]
    enc = Encoder(cfg, leakage_params().hardware)
    laid = enc.layout(texts)
    parts = [
        corpus_layout.lay_out_block(tmp_path, str(tiny_encoder), 16, 6, b, texts[lo:hi])
        for b, (lo, hi) in enumerate([(0, 4), (4, 6)])
    ]
    assert np.concatenate([p[1] for p in parts]).tobytes() == b"".join(laid.keys)
    assert {k: t.tolist() for p in parts for k, t in zip(p[1].tolist(), p[2])} == {
        k.rstrip(b"\0"): v.tolist() for k, v in laid.pieces.items()
    }
    joined = corpus_layout.joined([(p[0], b"") for p in parts], texts, tmp_path)
    assert joined.doc_of(np.arange(joined.n)).tolist() == laid.doc and joined.n == len(laid.keys)
    assert parts[0][0].tolist()[1] == 0 and len(set(laid.keys)) < len(laid.keys)  # an empty text; a repeated one
    layouts = pq.read_table(tmp_path / "layouts" / "000000.parquet").to_pylist()
    layouts += pq.read_table(tmp_path / "layouts" / "000001.parquet").to_pylist()
    expected = {d: (n, b"".join(keys), first) for d, (n, keys, first) in enc.layouts_used.items()}
    assert {r["md5"]: (r["n_tokens"], r["keys"], r["first"]) for r in layouts} == expected
    local = enc.embedded(laid)
    windows = corpus_layout.CorpusWindows(None, joined, enc, 14, 6)
    assert len(windows.doc) == joined.n and windows.doc[np.array([0, joined.n - 1])].tolist() == [0, 5]
    assert [windows.text_of(w, 50) for w in range(joined.n)] == [local.text_of(w, 50) for w in range(joined.n)]
    assert all(windows.of_doc(d).tolist() == local.of_doc(d).tolist() for d in range(len(texts)))


def test_a_corpus_block_of_empty_texts_lays_out_no_window(tiny_encoder, tmp_path):
    """A block whose texts are all "" (the tokenizer raises on an empty batch): no window, an empty layout file,
    and ``joined`` after a block with windows still places that block's docs (the local engine's ``layout`` of
    the same texts, ``Encoder.tokenize`` of no text, gives none either)."""
    cfg = leakage_params(semantic=semantic_params(tiny_encoder, window_tokens=16, stride_tokens=6)).semantic
    counts, keys, tokens = corpus_layout.lay_out_block(tmp_path, str(tiny_encoder), 16, 6, 1, ["", ""])
    assert counts.tolist() == [0, 0] and len(keys) == 0 and tokens == []
    assert pq.read_table(tmp_path / "layouts" / "000001.parquet").num_rows == 0
    first = corpus_layout.lay_out_block(tmp_path, str(tiny_encoder), 16, 6, 0, [filler(40, 1)])
    joined = corpus_layout.joined([(first[0], b""), (counts, b"")], [filler(40, 1), "", ""], tmp_path)
    laid = Encoder(cfg, leakage_params().hardware).layout([filler(40, 1), "", ""])
    assert joined.doc_of(np.arange(joined.n)).tolist() == laid.doc
    assert joined.doc_starts.tolist() == [0, len(laid.keys), len(laid.keys), len(laid.keys)]
    assert joined.group_starts.tolist() == [0, len(laid.keys), len(laid.keys)]


def shard_rows() -> pd.DataFrame:
    """12 split rows in one shard: pretraining rows (one removed, one empty, one repeated) around task rows."""
    pre = frame("mixed", "pretrain", [(f"p{k}", "train", filler(10 + 7 * k, k)) for k in range(8)])
    pre.loc[3, "text"], pre.loc[6, "text"] = "", pre.loc[1, "text"]
    task = frame("mixed", "task", [(f"t{k}", s, filler(12, 40 + k)) for k, s in enumerate(["train", "dev"] * 2)])
    task.loc[2, "is_duplicate"] = True
    return pd.concat([pre.iloc[:3], task, pre.iloc[3:]], ignore_index=True)


def laid_out_shard(tiny_encoder, tmp_path):
    """``shard_rows`` in 3 row groups (5, 5, 2 rows), blocks of 2 rows, laid out by ``lay_out_row_group`` into
    ``tmp_path / "spill"`` (p2 and t0 removed): ``(row groups, their tasks' results, kept (doc id, text))``."""
    rows, shard = shard_rows(), tmp_path / "mixed.parquet"
    pq.write_table(pa.Table.from_pandas(rows, preserve_index=False), shard, row_group_size=5)
    groups = corpus_layout.row_groups([shard], 2)
    out = tmp_path / "spill"
    removed = pa.array(["p2", "t0"])  # a task row is never corpus, removed or not
    tasks = [corpus_layout.lay_out_row_group(out, str(tiny_encoder), 16, 6, g, removed) for g in groups]
    kept = [(d, t) for d, r, t in zip(rows["doc_id"], rows["role"], rows["text"]) if r == "pretrain" and d != "p2"]
    return groups, tasks, kept


def test_a_row_group_task_lays_out_the_kept_pretraining_rows_it_reads(tiny_encoder, tmp_path):
    """``row_groups`` numbers the groups and the blocks of 2 rows of 3 row groups (5, 5, 2 rows: blocks 3 + 3 +
    1), and the tasks of ``lay_out_row_group`` (run here) give, joined, ``Encoder.layout`` of the pretraining texts
    not removed, in row order: each group's run holds its windows sorted by key (their ids, their place in the
    group), each block's layout file named by its number."""
    cfg = leakage_params(semantic=semantic_params(tiny_encoder, window_tokens=16, stride_tokens=6)).semantic
    groups, tasks, kept = laid_out_shard(tiny_encoder, tmp_path)
    assert [(g.group, g.index, g.first_block) for g in groups] == [(0, 0, 0), (1, 1, 3), (2, 2, 6)]
    corpus, ids = [t for _, t in kept], [d for d, _ in kept]  # row groups: p0 p1 [p2] t0 t1 | t2 t3 p3 p4 p5 | p6 p7
    assert len(corpus) == 7 and [len(c) for c, _ in tasks] == [2, 3, 2]
    assert [digest for _, digest in tasks] == [corpus_layout.ids_digest(x) for x in (ids[:2], ids[2:5], ids[5:])]
    assert corpus_layout.ids_digest(["ab", "c"]) != corpus_layout.ids_digest(["a", "bc"])
    shards = SplitShards([tmp_path / "mixed.parquet"], dict)
    removed = ["p2", "t0"]
    corpus_layout.check_laid_out(tasks, corpus_layout.SplitCorpus(shards, removed, pd.Series(ids)))
    for other in (ids[1:2] + ids[:1] + ids[2:], ids + ["p9"], ids[:-1]):  # another order, one more, one fewer
        with pytest.raises(ValueError, match="row group|corpus docs"):
            corpus_layout.check_laid_out(tasks, corpus_layout.SplitCorpus(shards, removed, pd.Series(other)))
    laid = Encoder(cfg, leakage_params().hardware).layout(corpus)
    out = tmp_path / "spill"
    joined = corpus_layout.joined(tasks, corpus, out)
    assert joined.doc_of(np.arange(joined.n)).tolist() == laid.doc and joined.n == len(laid.keys)
    windows = []
    for g in range(3):
        run = corpus_keys.read_run(out, g)
        keys = corpus_keys.key_view(run.column("key"))
        assert np.all(keys[:-1] <= keys[1:])
        windows += zip(joined.group_starts[g] + run.column("local").to_numpy(), keys, run.column("tokens").to_pylist())
    windows.sort(key=lambda w: w[0])
    assert [w for w, _, _ in windows] == list(range(joined.n))
    assert np.array([k for _, k, _ in windows], "S16").tobytes() == b"".join(laid.keys)  # zero tails kept
    assert all(t == laid.pieces[laid.keys[w]].tolist() for w, _, t in windows)
    assert sorted(f.name for f in (out / "layouts").iterdir()) == [f"{b:06d}.parquet" for b in range(7)]


def test_the_buckets_plan_what_the_encoder_embeds_and_counts(tiny_encoder, tmp_path):
    """``corpus_keys.plan_bucket`` over 3 buckets of the laid-out shard, with some corpus keys the eval side's
    and some stored: the used keys are the distinct side and corpus keys, each corpus window is routed once, to
    its own key, the ``todo`` files hold each key neither stored nor the side's once, with its ids, and the
    summed ``BucketCounts`` count as ``Encoder.count`` counts the same windows."""
    cfg = leakage_params(semantic=semantic_params(tiny_encoder, window_tokens=16, stride_tokens=6)).semantic
    groups, tasks, kept = laid_out_shard(tiny_encoder, tmp_path)
    out, corpus = tmp_path / "spill", [t for _, t in kept]
    enc = Encoder(cfg, leakage_params().hardware)
    laid = enc.layout(corpus)
    distinct = sorted(set(laid.keys))
    side = sorted(distinct[::3] + [b"\xff" * 15 + b"\0"])  # a third of them, and one key only the side has
    stored = sorted(distinct[1::4])
    joined = corpus_layout.joined(tasks, corpus, out)
    n = 3
    counts = []
    for b in range(n):
        mine = [k for k in side if spill.bucket_of(k, n) == b]
        held = [k for k in stored if spill.bucket_of(k, n) == b]
        counts.append(corpus_keys.plan_bucket(out, b, n, joined.group_starts, b"".join(mine), b"".join(held)))
    used, route, todo = [], [], {}
    for b in range(n):
        plan = pq.read_table(out / "plan" / f"{b:06d}.parquet").to_pylist()
        assert all(spill.bucket_of(r["key"], n) == b for r in plan)
        assert [r["side"] for r in plan] == [r["key"] in side for r in plan]
        rows = pq.read_table(out / "plan" / f"{b:06d}-route.parquet").to_pylist()
        route += [(r["position"], plan[r["used"]]["key"]) for r in rows]
        used += [r["key"] for r in plan]
        todo.update((r["key"], r["tokens"]) for r in pq.read_table(out / "todo" / f"{b:06d}.parquet").to_pylist())
    assert used == sorted(set(side) | set(distinct))
    assert sorted(route) == list(enumerate(laid.keys))
    new = [k for k in distinct if k not in side and k not in stored]
    assert sorted(todo) == new and all(todo[k] == laid.pieces[k].tolist() for k in new)
    total = corpus_keys.BucketCounts.summed(counts)
    assert total.embed == len(new) and total.distinct == len(distinct)
    stats = {"windows_from_cache": 0, "windows_embedded": 0, "tokens_embedded": 0}
    store_stats = {"windows_stored": 0, "windows_computed": 0}
    cached = side[::2]  # the side's windows embedded before the corpus: some of the side's keys
    total.count(joined.n, spill.KeySet(np.array(cached, "S16")), stats, store_stats)
    enc.cache, enc.stored = dict.fromkeys(cached), dict.fromkeys(stored)  # type: ignore[assignment]
    enc.count(laid.keys, [e - s for s, e in laid.bounds])
    assert stats == {k: enc.stats[k] for k in stats} and store_stats == enc.store_stats
    assert store_stats["windows_stored"] > 0 and stats["windows_from_cache"] > 0


def test_the_task_train_rows_read_from_the_shards_are_the_training_frames(tmp_path):
    """``task_train_rows`` (a row group at a time) equals the kept task rows of ``train_rows`` over the shards read
    whole, the texts and labels included, the duplicate and the dev rows left out, with the training frame's
    columns in its order: ``cluster_id``, which only a later pretraining shard has, null."""
    rows = shard_rows().drop(columns="cluster_id")
    rows["label"] = [None if r == "pretrain" else f"y{k % 2}" for k, r in enumerate(rows["role"])]
    other = frame("zz", "pretrain", [(f"q{k}", "train", filler(8, 90 + k)) for k in range(3)])
    pq.write_table(pa.Table.from_pandas(rows, preserve_index=False), tmp_path / "mixed.parquet", row_group_size=4)
    other.to_parquet(tmp_path / "zz.parquet", index=False)
    got = task_train_rows(sorted(tmp_path.glob("*.parquet")))
    whole = train_rows(pd.concat(read_sources(tmp_path).values(), ignore_index=True))
    want = whole[(whole["role"] == "task") & ~whole["is_duplicate"]].reset_index(drop=True)
    assert got["doc_id"].tolist() == ["t0"] and got["label"].tolist() == ["y1"] and got["cluster_id"].isna().all()
    assert (
        list(got.columns)
        == list(want.columns)
        == ["doc_id", "source", "role", "text", "label", "is_duplicate", "split", "cluster_id"]
    )
    # the dtypes differ where a column is null in one shard (object in the concatenation): the values do not
    pd.testing.assert_frame_equal(got, want, check_dtype=False)


def test_a_split_corpus_reads_only_the_texts_it_holds():
    """``SplitCorpus``: a text not held raises ``KeyError``; ``hold`` asks the shards only for the docs not held
    yet, by doc id; a doc the shards lack raises ``ValueError``."""
    asked: list[list[str]] = []
    texts = {"a": "first", "b": "second", "c": "third"}

    def fetch(ids: list[str]) -> dict[str, str]:
        asked.append(ids)
        return {d: texts[d] for d in ids if d in texts}

    corpus = corpus_layout.SplitCorpus(SplitShards([], fetch), [], ["c", "a", "b", "zz"])
    with pytest.raises(KeyError, match="corpus doc a"):
        corpus[1]
    corpus.hold([2, 0])
    corpus.hold([0, 1])
    assert asked == [["b", "c"], ["a"]] and [corpus[d] for d in range(3)] == ["third", "first", "second"]
    with pytest.raises(ValueError, match="no text for 1 doc ids"):
        corpus.hold([3])


def test_a_bucket_gathers_its_kept_vectors_reading_its_row_groups_only(tmp_path, monkeypatch):
    """``spill.gather_bucket`` over 4 buckets of a kept store of 8 row groups (sorted keys, zero tails among
    them), each bucket using some of its keys: the eval side's vectors come back, the other row groups are skipped
    by their statistics (``_key_range``), and ``write_store`` of the sorted buckets, one of them without a key,
    writes the used vectors as ``store.save`` would."""
    import pyarrow.dataset as ds

    keys = sorted(set(keys_with_zero_tails(21) + [bytes([64 * k]) + bytes(15) for k in range(1, 4)]))  # 24
    vectors = dict(zip(keys, unit_rows(len(keys), 8, 3)))
    monkeypatch.setattr(embedding_store, "STORE_ROWS", 3)
    embedding_store.save(tmp_path, vectors, KEY)
    kept, folder, n = tmp_path / embedding_store.STORE, tmp_path / "spill", 4
    groups = next(ds.dataset(kept).get_fragments()).split_by_row_group()
    assert len(groups) == 8
    used = [k for k in keys if spill.bucket_of(k, n) != 2][::2]  # bucket 2 uses no key
    for b in range(n):
        mine = np.array([k for k in used if spill.bucket_of(k, n) == b], "S16")
        side = np.arange(len(mine)) % 2 == 0
        corpus_keys.write_plan(folder, b, mine, side, np.zeros(0, np.int64), np.zeros(0, np.int64))
        blob, matrix = spill.gather_bucket(folder, b, n, 16, kept)
        back = [mine.tobytes()[16 * i : 16 * i + 16] for i in np.flatnonzero(side)]
        assert spill.split16(blob) == back and np.array_equal(
            matrix.reshape(-1, 8), np.array([vectors[k] for k in back]).reshape(-1, 8)
        )
        read = next(ds.dataset(kept).get_fragments()).split_by_row_group(spill._key_range(b, n))
        spans = [
            (spill.bucket_of(keys[g], n), spill.bucket_of(keys[min(g + 2, len(keys) - 1)], n)) for g in range(0, 24, 3)
        ]
        assert len(read) == sum(lo <= b <= hi for lo, hi in spans) < 8  # the row groups whose key range meets b's
    (tmp_path / "again").mkdir()
    spill.write_store(folder, n, tmp_path / "again" / embedding_store.STORE, KEY)
    got, _ = embedding_store.load(tmp_path / "again", KEY, True, 8)
    assert sorted(got) == used and all(np.array_equal(got[k], vectors[k]) for k in used)
