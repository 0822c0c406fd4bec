"""The semantic detector's kept window vectors (issue 35: leakage does work in proportion to what is new):
fixed batch shapes give a window the same bits in any batch, a later run embeds only the windows the store
lacks and gets the vectors a from-scratch run computes, the fingerprint decides when the store is ignored,
and the leakage stage's outputs and metrics equal a from-scratch run's byte for byte.
"""

from __future__ import annotations

import numpy as np
import pytest

from leakage_fixtures import PARAGRAPH, filler, night, outputs, params, run, semantic_params
from tasks.leakage.semantic import audit as semantic_audit
from tasks.leakage.semantic import encoder as semantic_encoder
from tasks.leakage.semantic import store as embedding_store
from tasks.leakage.semantic.windows import normalize_text
from tasks.tracking import NullLog

OLD = ["the reservoir fell to its lowest level since records began in the dry summer", filler(150, 21), "a short one"]
NEW = ["the council voted to close the library on sundays after the budget cut", filler(90, 22)]


def encoder(folder, **changes) -> semantic_encoder.Encoder:
    cfg = params(semantic=semantic_params(folder, **changes))
    return semantic_encoder.Encoder(cfg.semantic, cfg.hardware)


def test_batch_width_rounds_a_window_up_to_16_tokens_within_the_window():
    assert [embedding_store.batch_width(n, 128) for n in (1, 14, 15, 30, 110, 126)] == [16, 16, 32, 32, 112, 128]
    assert embedding_store.batch_width(127, 130) == 130  # never past window_tokens (129 -> 144 -> 130) ...
    assert embedding_store.batch_width(40, 20) == 42  # ... nor under the window's own [CLS] + 40 + [SEP]


SENTENCES = [
    "the reservoir fell to its lowest level since records began",
    "rain at last",
    "the council voted to close the library on sundays after the budget cut was announced on monday",
    "shares rose",
    "the match was abandoned after an hour because of the floodlights failing twice",
    "new phone who dis",
    "a quiet night in the city centre",
    "the minister denied every charge",
]


@pytest.mark.slow
def test_a_window_gets_the_same_bits_alone_and_among_others():
    """On the packaged MiniLM: short windows embedded one at a time, then together beside a full 128-token
    window, equal bit for bit. A batch as wide as its longest window, or as tall as its count, does not: on this
    project's CPU 7 of 8 of these vectors then differ in the last bits (padded to 128 instead of 16 wide)."""
    enc = semantic_encoder.Encoder(
        params().semantic.model_copy(update={"batch_size": 4, "cpu_precision": "fp32"}), params().hardware
    )
    shorts = enc.tokenize(SENTENCES)[0]
    full = enc.tokenize([filler(200, 23)])[0][0][:126]
    alone = []
    for piece in shorts:
        alone.append(enc.embed([piece])[0])
        enc.cache.clear()
    mixed = enc.embed([full, *shorts])[1:]
    assert all(np.array_equal(m, a) for m, a in zip(mixed, alone, strict=True))


def test_a_later_run_embeds_only_the_windows_the_store_lacks(tiny_encoder, tmp_path):
    first = encoder(tiny_encoder)
    old_windows = first.windows(OLD)
    key = embedding_store.fingerprint(first)
    embedding_store.save(tmp_path, first.cache, key)

    later = encoder(tiny_encoder)
    later.stored, reason = embedding_store.load(tmp_path, embedding_store.fingerprint(later), incremental=True, dim=32)
    assert reason == "store found" and len(later.stored) == len(old_windows.doc)
    both = later.windows(OLD + NEW)
    scratch = encoder(tiny_encoder).windows(OLD + NEW)
    assert np.array_equal(both.vectors, scratch.vectors)  # bit for bit
    new_windows = int(np.isin(scratch.doc, [3, 4]).sum())
    assert later.store_stats == {"windows_stored": len(old_windows.doc), "windows_computed": new_windows}
    assert later.stats["windows_embedded"] == len(scratch.doc)  # what the metrics say: the same either way


def test_the_store_is_ignored_when_its_fingerprint_changes_or_it_is_damaged(tiny_encoder, tmp_path):
    enc = encoder(tiny_encoder)
    enc.windows(OLD)
    embedding_store.save(tmp_path, enc.cache, embedding_store.fingerprint(enc))
    for changes, what in (({"batch_size": 8}, "shape"), ({"window_tokens": 18}, "shape")):
        other = encoder(tiny_encoder, **changes)
        stored, reason = embedding_store.load(tmp_path, embedding_store.fingerprint(other), incremental=True, dim=32)
        assert stored == {} and reason == f"the cache fingerprint changed ({what})"
    same = embedding_store.fingerprint(encoder(tiny_encoder, min_words=9))  # changes no vector
    assert len(embedding_store.load(tmp_path, same, incremental=True, dim=32)[0]) == len(enc.cache)
    assert embedding_store.load(tmp_path, same, incremental=False, dim=32) == ({}, "leakage.incremental: false")
    good = dict(enc.cache)
    for damaged in (
        {**good, next(iter(good)): np.full(32, np.nan, np.float32)},  # a NaN vector
        {k: v[:16] / np.linalg.norm(v[:16]) for k, v in good.items()},
    ):  # another dimension
        embedding_store.save(tmp_path, damaged, embedding_store.fingerprint(enc))
        stored, reason = embedding_store.load(tmp_path, same, incremental=True, dim=32)
        assert stored == {} and reason.endswith("cannot be used (keys or vectors not as written)")
    int8 = encoder(tiny_encoder, cpu_precision="int8")  # its vectors depend on the batch: never kept
    assert embedding_store.load(tmp_path, embedding_store.fingerprint(int8), True, 32)[0] == {}
    (tmp_path / embedding_store.STORE).write_bytes(b"not parquet")
    stored, reason = embedding_store.load(tmp_path, same, incremental=True, dim=32)
    assert stored == {} and reason.startswith("the cache ") and "cannot be used" in reason


def test_the_store_keeps_only_the_windows_of_the_last_run(tiny_encoder, tmp_path):
    cfg = params(semantic=semantic_params(tiny_encoder))
    enc = encoder(tiny_encoder)
    key = semantic_audit.open_store(enc, tmp_path, True, NullLog())
    enc.windows(OLD)
    semantic_audit.close_store(enc, tmp_path, key, cfg.incremental, NullLog())
    again = encoder(tiny_encoder)
    key = semantic_audit.open_store(again, tmp_path, True, NullLog())
    again.windows(OLD[:1])  # the other two docs were removed
    semantic_audit.close_store(again, tmp_path, key, True, NullLog())
    kept, _ = embedding_store.load(tmp_path, key, incremental=True, dim=32)
    assert set(kept) == set(again.cache) and len(kept) == 1
    semantic_audit.close_store(again, tmp_path, key, False, NullLog())  # incremental false: written empty
    assert embedding_store.load(tmp_path, key, incremental=True, dim=32)[0] == {}


def test_leakage_with_the_store_equals_a_from_scratch_run(tiny_encoder, tmp_path):
    semantic_on = {"semantic": semantic_params(tiny_encoder, planted_docs=2)}
    _, logged = run(tmp_path / "inc", night(), **semantic_on)
    assert logged["leakage.semantic_store"] == "none" and logged["semantic_store"]["windows_stored"] == 0
    frames = night([("new-copy", "train", PARAGRAPH + " " + filler(20, 5)), ("new-clean", "heldout", filler(100, 6))])
    metrics, logged = run(tmp_path / "inc", frames, **semantic_on)
    assert logged["leakage.semantic_store"] == "stored"
    stored, computed = logged["semantic_store"]["windows_stored"], logged["semantic_store"]["windows_computed"]
    assert stored > 0 and computed > 0  # the new docs' windows (and the plants' new filler) alone were embedded
    scratch_metrics, scratch_logged = run(tmp_path / "full", frames, incremental=False, **semantic_on)
    assert scratch_logged["semantic_store"] == {"windows_stored": 0, "windows_computed": stored + computed}
    assert outputs(tmp_path / "inc", metrics) == outputs(tmp_path / "full", scratch_metrics)


def test_the_store_folder_exists_with_the_semantic_detector_off(tmp_path):
    run(tmp_path, night())  # the tests' params turn the detector off
    assert (tmp_path / "data" / "leakage_embeddings").is_dir()  # dvc.yaml declares it an output


def test_a_cuda_store_is_stamped_with_the_cublas_wheel_and_a_cpu_one_is_not(monkeypatch):
    from types import SimpleNamespace

    import torch  # noqa: F401 (imported before distributions() is faked: importing torch walks the entry points)

    fake = [
        SimpleNamespace(metadata={"Name": "nvidia-cublas-cu12"}, version="12.4.5.8"),
        SimpleNamespace(metadata={"Name": "numpy"}, version="2.0"),
    ]
    monkeypatch.setattr("importlib.metadata.distributions", lambda: fake)
    monkeypatch.setattr("torch.version.cuda", "12.4")
    monkeypatch.setattr("torch.backends.cudnn.version", lambda: 90100)
    assert embedding_store.gpu_libraries(SimpleNamespace(device="cpu")) == ""
    assert embedding_store.gpu_libraries(SimpleNamespace(device="cuda:1")) == (
        ", cuda 12.4, cudnn 90100, cublas nvidia-cublas-cu12 12.4.5.8"
    )


def test_a_later_run_tokenizes_only_the_texts_it_has_not_laid_out(tiny_encoder, tmp_path):
    first = encoder(tiny_encoder)
    key = semantic_audit.open_store(first, tmp_path, True, NullLog())
    first.windows(OLD)
    semantic_audit.close_store(first, tmp_path, key, True, NullLog())

    later = encoder(tiny_encoder)
    semantic_audit.open_store(later, tmp_path, True, NullLog())
    assert len(later.layouts) == len(OLD)
    tokenized = []
    original = later.tokenize
    later.tokenize = lambda texts: tokenized.extend(texts) or original(texts)
    both = later.windows(OLD + [""] + NEW)
    assert tokenized == [normalize_text(t) for t in NEW]  # the kept texts (and the empty one): not cut
    scratch = encoder(tiny_encoder).windows(OLD + [""] + NEW)
    assert len(OLD) not in scratch.doc.tolist() and len(OLD) + 1 in scratch.doc.tolist()  # "" has no window
    assert np.array_equal(both.vectors, scratch.vectors) and np.array_equal(both.bounds, scratch.bounds)
    assert np.array_equal(both.doc, scratch.doc)
    assert [both.text_of(w, 80) for w in range(len(both.doc))] == [
        scratch.text_of(w, 80) for w in range(len(scratch.doc))
    ]
    # a layout whose window the store lost is not trusted: that text is tokenized again
    lost = later.layouts[next(iter(later.layouts))][1][0]
    again = encoder(tiny_encoder)
    semantic_audit.open_store(again, tmp_path, True, NullLog())
    again.stored.pop(lost)
    tokenized.clear()
    again.tokenize = lambda texts: tokenized.extend(texts) or original(texts)
    assert np.array_equal(again.windows(OLD).vectors, scratch.vectors[np.isin(scratch.doc, [0, 1, 2])])
    assert len(tokenized) == 1


def test_a_planted_copy_cut_to_its_span_is_laid_out_once_across_runs(tiny_encoder, tmp_path):
    text = f"{filler(60, 24)} {OLD[0]} {filler(60, 25)}"
    at = text.index(OLD[0])
    spans, texts = [(at, at + len(OLD[0])), (0, -1)], [text, text]  # the copied stretch, and the whole text
    first = encoder(tiny_encoder)
    key = semantic_audit.open_store(first, tmp_path, True, NullLog())
    cut = first.windows(texts, spans)
    semantic_audit.close_store(first, tmp_path, key, True, NullLog())
    assert 0 < len(cut.of_doc(0)) < len(cut.of_doc(1))  # only the windows over the stretch
    later = encoder(tiny_encoder)
    semantic_audit.open_store(later, tmp_path, True, NullLog())
    later.tokenize = lambda texts: pytest.fail(f"tokenized again: {texts}") if texts else ([], [])
    again = later.windows(texts, spans)
    assert np.array_equal(again.vectors, cut.vectors) and np.array_equal(again.bounds, cut.bounds)


def test_one_prefetch_gives_the_windows_and_counts_of_separate_calls(tiny_encoder):
    separate = encoder(tiny_encoder)
    apart = [separate.windows(OLD), separate.windows(NEW), separate.windows(OLD[:1])]
    pooled = encoder(tiny_encoder)
    calls = []
    compute = pooled.compute
    pooled.compute = lambda todo, into: calls.append(len(todo)) or compute(todo, into)
    layouts = [pooled.layout(OLD), pooled.layout(NEW), pooled.layout(OLD[:1])]
    pooled.prefetch(layouts)
    together = [pooled.embedded(layout) for layout in layouts]
    assert calls[0] == len({k for layout in layouts for k in layout.keys}) and sum(calls[1:]) == 0
    assert all(
        np.array_equal(a.vectors, b.vectors) and np.array_equal(a.bounds, b.bounds)
        for a, b in zip(apart, together, strict=True)
    )
    assert pooled.stats | {"embed_seconds": 0} == separate.stats | {"embed_seconds": 0}
    assert pooled.store_stats == separate.store_stats and not pooled.prefetched


def test_stale_or_damaged_layouts_are_ignored(tiny_encoder, tmp_path, monkeypatch):
    import pyarrow as pa
    import pyarrow.parquet as pq

    enc = encoder(tiny_encoder)
    key = semantic_audit.open_store(enc, tmp_path, True, NullLog())
    enc.windows(OLD)
    semantic_audit.close_store(enc, tmp_path, key, True, NullLog())
    expected = embedding_store.layouts_key(key, enc.cfg)
    assert len(embedding_store.load_layouts(tmp_path, expected, enc.cfg)) == len(OLD)
    monkeypatch.setattr("tokenizers.__version__", "0.0.1")  # another tokenizers: texts may cut otherwise
    assert embedding_store.load_layouts(tmp_path, embedding_store.layouts_key(key, enc.cfg), enc.cfg) == {}
    monkeypatch.undo()
    path = tmp_path / embedding_store.LAYOUTS
    table = pq.read_table(path)
    counts = table.column("n_tokens").to_pylist()
    long = counts.index(max(counts))  # the 150-word filler: several windows
    wrong = table.set_column(1, "n_tokens", pa.array([1 if k == long else n for k, n in enumerate(counts)], pa.int32()))
    pq.write_table(wrong.replace_schema_metadata(table.schema.metadata), path)  # one window, several keys
    assert embedding_store.load_layouts(tmp_path, expected, enc.cfg) == {}
