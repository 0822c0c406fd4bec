"""dedup's flat shingle sets and signatures (tasks/dedup/signing.py), compiled and numpy, against the MinHash kit's
per-document functions (tasks/common/matching/minhash.py, themselves checked against datasketch in
tests/common/test_minhash.py)."""

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dedup_fixtures import make_cfg
from tasks.common.matching import minhash
from tasks.dedup import incremental, signatures, signing
from tasks.dedup.corpus import text_bytes_stored


def _docs():
    """Word hashes of 6 documents: ordinary, repeated shingles, 4 words (no 5-gram), empty, 5 words, long."""
    rng = np.random.default_rng(7)
    vocab = rng.integers(0, 2**64, 40, dtype=np.uint64)
    lengths = [30, 12, 4, 0, 5, 400]
    words = [vocab[rng.integers(0, 40 if n != 12 else 3, n)] for n in lengths]  # doc 1: 3 words, many repeats
    values = np.concatenate(words)
    doc = np.repeat(np.arange(len(lengths)), lengths)
    return values, doc, words


@pytest.mark.parametrize("compiled", [False, True])
def test_flat_sets_and_signatures_equal_the_per_document_kit(monkeypatch, compiled):
    monkeypatch.setattr(signing, "compiled_now", lambda: compiled)
    values, doc, words = _docs()
    flat, sizes = signing.shingle_sets(values, doc, len(words), 5)
    want = [np.unique(minhash.rolling_hashes(w, 5)) for w in words]
    assert sizes.tolist() == [len(w) for w in want] and sizes[2] == sizes[3] == 0 and sizes[4] == 1
    assert flat.dtype == np.uint64 and np.array_equal(flat, np.concatenate(want))
    a, b = minhash.permutations(128, 1)
    signed = signing.signatures(flat, sizes, a, b)
    assert signed.dtype == np.uint32 and np.array_equal(signed, minhash.signatures(want, a, b))
    assert (signed[2] == minhash.EMPTY).all() and (signed[3] == minhash.EMPTY).all()


def test_small_texts_keep_numba_unloaded_and_large_ones_load_the_kernels(monkeypatch):
    loaded = []
    monkeypatch.setattr(signing.compiled, "jit", lambda func: loaded.append(func.__name__) or (lambda *a: 0))
    monkeypatch.setattr(signing.scan, "prepare", lambda: loaded.append("scan"))
    signing.prepare(signing.COMPILE_MIN_BYTES - 1)
    assert loaded == []
    signing.prepare(signing.COMPILE_MIN_BYTES)
    assert sorted(loaded) == ["_sign", "scan"]


def test_the_stage_preloads_the_kernels_only_when_it_will_sign_every_long_text(tmp_path, monkeypatch):
    ingest, index = tmp_path / "ingest", tmp_path / "index"
    (ingest / "web").mkdir(parents=True)
    texts = ["ab", "héllo", "x" * 300]  # 2 + 6 + 300 UTF-8 bytes
    table = pa.table({"doc_id": ["1", "2", "3"], "text": texts})
    plain = {"use_dictionary": False, "compression": "none", "write_statistics": False}  # the values alone
    pq.write_table(table, ingest / "web" / "part-0.parquet", **plain)
    pq.write_table(table.slice(0, 1), ingest / "news.parquet", **plain)
    (ingest / "notes.parquet").write_text("not parquet")  # left to read_corpus to report
    stored = text_bytes_stored(ingest)
    # the texts' bytes (308 + 2) plus a 4-byte length each (4 values), and the two pages' headers
    assert 310 + 4 * 4 <= stored <= 310 + 4 * 4 + 2 * 64
    assert text_bytes_stored(tmp_path / "missing") == 0
    loads = []
    monkeypatch.setattr(signing, "prepare", loads.append)
    monkeypatch.setattr(signing, "COMPILE_MIN_BYTES", stored)
    loading = incremental.preload(ingest, make_cfg(), index)
    assert loading is not None and loading.result() is None and loads == [stored]
    assert incremental.preload(ingest, make_cfg(engine="ray"), index) is None  # the workers sign
    index.mkdir()
    (index / incremental.ENTRIES).write_bytes(b"")
    assert incremental.preload(ingest, make_cfg(), index) is None  # an index: maybe nothing to sign
    loading = incremental.preload(ingest, make_cfg(incremental=False), index)
    assert loading is not None and loading.result() is None and loads == [stored, stored]
    monkeypatch.setattr(signing, "COMPILE_MIN_BYTES", stored + 1)
    assert incremental.preload(ingest, make_cfg(incremental=False), index) is None  # too short to repay


def test_jaccards_of_packed_sets_equal_those_of_the_set_list(monkeypatch):
    from tasks.common.matching import pairjaccard

    monkeypatch.setattr(pairjaccard.compiled, "worth_compiling", lambda items: True)
    values, doc, words = _docs()
    flat, sizes = signing.shingle_sets(values, doc, len(words), 5)
    starts = np.cumsum(sizes) - sizes
    sets = [flat[s : s + n] for s, n in zip(starts, sizes)]
    left, right = np.array([0, 0, 1, 2, 5, 3]), np.array([5, 1, 4, 3, 0, 3])
    packed = pairjaccard.jaccards(sets, left, right, packed=(flat, starts, sizes))
    assert packed.tolist() == [minhash.jaccard(sets[i], sets[j]) for i, j in zip(left, right)]
    with pytest.raises(IndexError):
        pairjaccard.jaccards(sets, np.array([0]), np.array([6]), packed=(flat, starts, sizes))


def test_sets_written_in_place_or_sent_back_give_the_same_signatures(monkeypatch):
    texts = [f"doc {i} " + " ".join(f"w{(i * 7 + k) % 23}" for k in range(5 + 9 * i)) for i in range(12)] + ["", "a b"]
    cfg = make_cfg(shard_size_docs=4)
    in_place = signatures.sign_documents(texts, cfg)
    assert in_place.packed[0] is not None and len(in_place.packed[0]) > int(in_place.packed[2].sum())  # gaps
    monkeypatch.setattr(signatures, "_room", lambda sizes: 0)  # no shard fits: every one sends its sets back
    sent = signatures.sign_documents(texts, cfg)
    assert sent.text_hash == in_place.text_hash and np.array_equal(sent.signature, in_place.signature)
    assert [s.tolist() for s in sent.shingles] == [s.tolist() for s in in_place.shingles]
    assert np.array_equal(sent.packed[2], in_place.packed[2]) and len(sent.packed[0]) == int(sent.packed[2].sum())
