"""The semantic leakage detector and the confusables fold: windows, pooling, search, threshold choice on dev
data only, the stage's outputs with it (review file, flag and remove actions, bad input counted), and the
report's semantically clean slice. Fast tests use a tiny random BertModel saved in a temporary folder with
MiniLM's tokenizer; the real MiniLM runs only in the tests marked slow."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from leakage_fixtures import PARAGRAPH, filler, frame, news_corpus, params, run_leakage, semantic_params
from tasks.common.matching import confusables
from tasks.leakage.lexical.words import tokenize
from tasks.leakage.outputs import eval_rows, train_rows
from tasks.leakage.planted.variants import make as make_plants
from tasks.leakage.semantic import audit as semantic_audit
from tasks.leakage.semantic import encoder as semantic_encoder
from tasks.leakage.semantic import method as semantic
from tasks.leakage.semantic import search
from tasks.leakage.semantic.windows import Windows, normalize_text, window_starts
from tasks.tracking import NullLog

# ---------------------------------------------------------------- the confusables fold (UTS #39)


def test_cyrillic_look_alikes_fold_to_latin_and_ascii_stays_as_it_is():
    cyrillic = "\u0430\u0435\u043e\u0440\u0441\u0445"  # а е о р с х
    assert [confusables.fold_word(c) for c in cyrillic] == list("aeopcx")
    assert confusables.fold_word("p\u0430p\u0435r") == "paper"
    assert confusables.skeleton("p\u0430p\u0435r") == "paper"  # the standard's function agrees here
    # ASCII is left alone, though the table maps I -> l and 0 -> O: spans on English text stay byte-identical
    assert confusables.fold_word("HELLO2010") == "HELLO2010" and confusables.skeleton("I0") == "lO"
    assert confusables.fold_word("caf\u00e9") == "caf\u00e9"  # accents survive (NFD, no remap, NFC)
    assert confusables.fold_text("\u0422he p\u0430per") == "The paper"  # text form: case kept
    assert confusables.table_version() != "unknown" and len(confusables.prototypes()) > 6000


def test_homoglyph_copy_is_found_by_the_lexical_detectors_only_after_the_fold(tmp_path):
    glyphs = PARAGRAPH.translate(str.maketrans("aeopcx", "\u0430\u0435\u043e\u0440\u0441\u0445"))
    task = frame("task", "task", [("ev", "test", PARAGRAPH), ("tr", "train", filler(80, 1))])
    pre = frame("pre", "pretrain", [("copy", "train", glyphs), ("other", "train", filler(300, 2))])
    _, out = run_leakage(tmp_path, [task, pre])
    table = pd.read_parquet(out / "table.parquet")
    assert set(table.loc[table["train_doc"] == "copy", "method"]) == {
        "ngram",
        "minhash_doc",
        "minhash_passage",
        "ngram_substituted",
    }
    assert normalize_text(glyphs) == PARAGRAPH  # the semantic detector reads the folded text too


# ---------------------------------------------------------------- a tiny encoder


def encoder_for(folder, **changes):
    cfg = params(semantic=semantic_params(folder, **changes))
    return semantic_encoder.Encoder(cfg.semantic, cfg.hardware)


def test_windows_tile_the_text_and_the_last_one_ends_at_its_end():
    assert window_starts(0, 126, 126) == []
    assert window_starts(10, 126, 126) == [0]
    assert window_starts(300, 126, 126) == [0, 126, 174]
    assert window_starts(300, 126, 63) == [0, 63, 126, 174]


def test_embeddings_are_mean_pooled_unit_vectors_computed_once_per_window(tiny_encoder):
    import torch
    from transformers import AutoModel, AutoTokenizer

    enc = encoder_for(tiny_encoder)
    text = "the reservoir fell to its lowest level since records began"
    windows = enc.windows([text, "", text + " " + text])
    assert list(windows.doc) == [0, 2, 2]  # the empty text has no window; 2 x 10 words = 2 windows of 14
    assert np.allclose(np.linalg.norm(windows.vectors, axis=1), 1.0, atol=1e-5)
    tok = AutoTokenizer.from_pretrained(tiny_encoder)
    model = AutoModel.from_pretrained(tiny_encoder).eval()
    batch = tok([text], return_tensors="pt")
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state[0]
    want = hidden.mean(dim=0) / hidden.mean(dim=0).norm()  # no padding: the mean over every token, [CLS]/[SEP] too
    assert np.allclose(windows.vectors[0], want.numpy(), atol=1e-5)
    before = enc.stats["windows_embedded"]
    again = enc.windows([text])
    assert enc.stats["windows_embedded"] == before and np.array_equal(again.vectors[0], windows.vectors[0])
    padded = enc.embed([np.array(tok(text, add_special_tokens=False)["input_ids"]), np.array([1000, 1001])])
    assert np.allclose(padded[0], windows.vectors[0], atol=1e-5)  # padding in a batch changes nothing


def test_int8_and_bf16_encoders_agree_with_fp32(tiny_encoder):
    text = ["the reservoir fell to its lowest level", "a hosepipe ban in four districts at midnight"]
    full = encoder_for(tiny_encoder).windows(text).vectors
    int8 = encoder_for(tiny_encoder, cpu_precision="int8").windows(text).vectors
    bf16 = encoder_for(tiny_encoder, cpu_precision="bf16").windows(text).vectors
    assert (full * int8).sum(axis=1).min() > 0.95 and (full * bf16).sum(axis=1).min() > 0.999


def as_windows(vectors: np.ndarray, docs) -> Windows:
    """Windows of the given vectors and docs (no texts, no encoder): for the search alone."""
    return Windows(vectors, np.asarray(docs), np.zeros((len(vectors), 2), int), [], None)


def test_exact_and_hnsw_search_find_the_same_pairs():
    pytest.importorskip("faiss")
    rng = np.random.default_rng(0)
    index = rng.normal(size=(400, 16)).astype(np.float32)
    index /= np.linalg.norm(index, axis=1, keepdims=True)
    queries = index[[3, 77, 250]] + 0.05 * rng.normal(size=(3, 16)).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    q, i = as_windows(queries, [0, 1, 2]), as_windows(index, np.arange(400) // 4)
    cfg = params().semantic
    exact, best = semantic.pair_scores(q, i, 0.9, cfg)
    ann, best_ann = semantic.pair_scores(q, i, 0.9, cfg.model_copy(update={"exact_max_windows": 100}))
    assert set(exact) == set(ann) == {(0, 0), (19, 1), (62, 2)} and np.allclose(best, best_ann)


def test_pair_scores_equal_a_pair_by_pair_reference_whatever_the_block():
    rng = np.random.default_rng(1)
    index = rng.normal(size=(60, 8)).astype(np.float32)
    index[30:40] = index[0:10]  # equal vectors in other docs and in the same doc: ties to break
    index[5] = index[4]
    index /= np.linalg.norm(index, axis=1, keepdims=True)
    queries = np.vstack([index[[4, 12, 33]], rng.normal(size=(4, 8)).astype(np.float32)])
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    q, i = as_windows(queries, [0, 0, 1, 2, 2, 3, 5]), as_windows(index, np.arange(60) // 6)
    scores = queries @ index.T
    want_pairs, want_best = {}, np.full(6, -1.0)
    for qw in range(len(queries)):
        for iw in range(len(index)):  # by hand: highest score, then the lowest index window, then query window
            key, s = (int(i.doc[iw]), int(q.doc[qw])), float(scores[qw, iw])
            want_best[q.doc[qw]] = max(want_best[q.doc[qw]], s)
            if s >= 0.5 and (key not in want_pairs or (-s, iw, qw) < (-want_pairs[key][0], *want_pairs[key][1:])):
                want_pairs[key] = (s, iw, qw)
    for block, shard in ((1, 1), (7, 20), (64, 131072)):  # shards of 1, 3 (21 windows) and 1 block(s)
        cfg = params().semantic.model_copy(update={"search_block_windows": block, "search_shard_windows": shard})
        pairs, best = semantic.pair_scores(q, i, 0.5, cfg)  # a block's GEMM can round the last bit otherwise
        assert {k: v[1:] for k, v in pairs.items()} == {k: v[1:] for k, v in want_pairs.items()}
        assert np.allclose([v[0] for v in pairs.values()], [want_pairs[k][0] for k in pairs], atol=1e-6, rtol=0)
        assert np.allclose(best, want_best, atol=1e-6, rtol=0)
    assert want_pairs[(0, 0)][1:] == (4, 0) and want_best[4] == -1.0


def test_merged_shard_hits_equal_a_brute_force_search_of_the_whole_index():
    rng = np.random.default_rng(5)
    index = rng.normal(size=(90, 8)).astype(np.float32)
    index[60:70] = index[0:10]  # equal vectors in other shards: ties across shards
    index /= np.linalg.norm(index, axis=1, keepdims=True)
    queries = np.vstack([index[[2, 65]], rng.normal(size=(4, 8)).astype(np.float32)])
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    scores = queries @ index.T
    starts = [0, 32, 64]
    for k in (1, 5):  # faiss-like shards: each shard's k best per query, all; the merge keeps the k best overall
        parts = []
        for a, b in zip(starts, starts[1:] + [90]):
            top = np.argsort(-scores[:, a:b], axis=1, kind="stable")[:, :k]
            q = np.repeat(np.arange(len(queries)), k)
            parts.append((scores[:, a:b].max(axis=1), q, top.ravel(), scores[:, a:b][q, top.ravel()]))
        best, q, i, score = search.merge_shards(parts, starts, len(queries), -1.0, k)
        want = np.argsort(-scores, axis=1, kind="stable")[:, :k]  # stable: on a tie the lowest window
        assert sorted(zip(q.tolist(), i.tolist())) == sorted((r, int(c)) for r in range(len(queries)) for c in want[r])
        assert np.array_equal(score, scores[q, i]) and np.array_equal(best, scores.max(axis=1))
        assert i[q == 0].tolist()[:2] == [2, 62][:k] and i[q == 1].tolist()[:2] == [5, 65][:k]  # a tie across shards
    # exact shards (whole blocks): the pairs at the threshold and the best, as one search of the whole index
    cfg = params().semantic.model_copy(update={"search_block_windows": 8, "search_shard_windows": 30})
    assert search.plan(90, cfg) == (True, [0, 32, 64], 32)
    best, q, i, score = search.sharded_search(queries, index, 0.3, cfg)
    want_q, want_i = np.nonzero(scores >= 0.3)
    assert sorted(zip(q.tolist(), i.tolist())) == sorted(zip(want_q.tolist(), want_i.tolist()))
    whole = search.exact_search(queries, index, 8, 0.3)
    assert np.array_equal(best, whole[0]) and sorted(zip(q, i, score)) == sorted(zip(*whole[1:]))
    assert np.allclose(best, scores.max(axis=1), atol=1e-6, rtol=0)


# ---------------------------------------------------------------- threshold choice


def test_threshold_is_the_lowest_with_dev_precision_at_equal_numbers():
    positive = np.array([0.95, 0.9, 0.85, 0.8, 0.5])
    negative = np.array([0.82, 0.6, 0.4, 0.3])
    # t=0.8: R=0.8, F=0.25 -> P=0.76; t=0.85: R=0.6, F=0 -> 1.0
    assert semantic.choose_threshold(positive, negative, 0.9)["threshold"] == 0.85
    # t=0.6: R=0.8, F=0.5 -> 0.615; t=0.8: 0.76 >= 0.7
    choice = semantic.choose_threshold(positive, negative, 0.7)
    assert (choice["threshold"], choice["dev_recall"], choice["dev_false_flag_rate"]) == (0.8, 0.8, 0.25)
    # nothing separates them: just above the highest clean score
    none = semantic.choose_threshold(np.array([0.5]), np.array([0.9]), 0.9)
    assert none["threshold"] > 0.9 and none["rule"].startswith("no threshold") and none["dev_recall"] == 0.0


def test_known_clean_pairs_are_the_nearest_same_class_doc_outside_the_cluster():
    vectors = np.eye(4, dtype=np.float32)[[0, 0, 1, 1, 2]]  # docs 0/1 identical, 2/3 identical, 4 alone
    vectors[4] = (vectors[0] + vectors[4]) / np.sqrt(2)
    windows = Windows(vectors, np.arange(5), np.zeros((5, 2), int), [], None)
    best, partner = semantic.clean_pair_scores(windows, ["a", "a", "b", "b", "a"], ["c0", "c0", "c2", "c3", "c4"])
    # 0 and 1 share a dedup cluster: never each other's pair; 2 and 3 differ in cluster: they pair
    assert list(partner) == [4, 4, 3, 2, 0] and np.isclose(best[2], 1.0) and np.isclose(best[0], 1 / np.sqrt(2))
    for block in (1, 2):  # scored a few windows at a time: the same pairs
        blocked = semantic.clean_pair_scores(windows, ["a", "a", "b", "b", "a"], ["c0", "c0", "c2", "c3", "c4"], block)
        assert np.array_equal(blocked[0], best) and np.array_equal(blocked[1], partner)


def test_known_clean_pairs_equal_a_window_by_window_reference_with_ties_and_shared_clusters():
    rng = np.random.default_rng(4)
    docs = np.sort(rng.integers(0, 40, size=120))  # windows per doc: 0 to several
    vectors = rng.integers(-2, 3, size=(120, 6)).astype(np.float32)  # small integers: every dot product exact
    groups = [f"g{d % 3}" for d in range(40)]
    clusters = [f"c{d // 2 if d < 10 else d}" for d in range(40)]  # docs 0-9 in pairs share a cluster
    windows = Windows(vectors, docs, np.zeros((120, 2), int), [], None)
    want_best, want_partner = np.full(40, -1.0), np.full(40, -1)
    for w in range(120):  # in window order: the first window and partner window reaching the best score win
        for v in range(120):
            d, e = docs[w], docs[v]
            if groups[d] == groups[e] and clusters[d] != clusters[e] and vectors[w] @ vectors[v] > want_best[d]:
                want_best[d], want_partner[d] = vectors[w] @ vectors[v], e
    want_best = np.where(want_best > -1.0, want_best, -1.0)
    for block in (7, 4096):
        best, partner = semantic.clean_pair_scores(windows, groups, clusters, block)
        assert np.array_equal(best, want_best) and np.array_equal(partner, want_partner)
    assert (want_partner >= 0).sum() > 20


def audit_once(tiny_encoder, task, pre, **changes):
    cfg = params(semantic=semantic_params(tiny_encoder, **changes))
    rows = pd.concat([task, pre], ignore_index=True)
    evals, trains = eval_rows(rows), train_rows(rows)
    tokens = [tokenize(t) for t in evals["text"]]
    plants, _ = make_plants(evals, list(pre["text"]), list(pre["doc_id"]), cfg.planted, {}.get)
    return semantic_audit.audit(
        cfg,
        evals,
        tokens,
        trains,
        set(),
        plants,
        NullLog(),
        encoder=semantic_encoder.Encoder(cfg.semantic, cfg.hardware),
    )


def test_a_task_doc_without_a_dedup_cluster_is_its_own_cluster(tiny_encoder):
    """Null ``cluster_id``s (a hand-made shard; the engines' frames hold them as different null objects) make
    each doc its own cluster, as the doc ids do: the same known-clean pairs and threshold, not one shared cluster
    that leaves no pair known clean."""
    task, pre = news_corpus()
    own = audit_once(tiny_encoder, task.assign(cluster_id=task["doc_id"]), pre).metrics
    null = audit_once(tiny_encoder, task.assign(cluster_id=None), pre).metrics
    assert null == own and own["threshold_dev_clean_pairs"] > 0


def test_the_threshold_is_chosen_on_dev_data_only(tiny_encoder):
    task, pre = news_corpus()
    first = audit_once(tiny_encoder, task, pre).metrics
    test_changed = task.copy()
    test_changed.loc[test_changed["split"] == "test", "text"] = [filler(30, 700 + k) for k in range(4)]
    second = audit_once(tiny_encoder, test_changed, pre).metrics
    assert first["threshold"] == second["threshold"]  # other test docs (and test plants): the same threshold
    assert first["review"] != second["review"] or first["by_eval_set"] != second["by_eval_set"]
    dev_changed = task.copy()
    dev_changed.loc[dev_changed["split"] == "dev", "text"] = [filler(30, 800 + k) for k in range(4)]
    assert audit_once(tiny_encoder, dev_changed, pre).metrics["threshold_dev_planted"] == first["threshold_dev_planted"]
    assert audit_once(tiny_encoder, dev_changed, pre).metrics["threshold"] != first["threshold"]


# ---------------------------------------------------------------- the stage with the detector


def test_stage_writes_the_review_file_and_counts_bad_input(tmp_path, tiny_encoder):
    task, pre = news_corpus()
    extra = frame("news", "task", [("empty", "test", "!!!"), ("one", "test", "Word"), ("long", "dev", filler(400, 5))])
    extra["label"] = "x"
    task = pd.concat([task, extra], ignore_index=True)
    cfg = params(semantic=semantic_params(tiny_encoder, review_per_label=3, review_flags=2))
    metrics, out = run_leakage(tmp_path, [task, pre], cfg)
    sem = metrics["semantic"]
    assert sem["eval_docs_not_attempted"] == {"no_words": 1, "under_min_words": 1}
    assert sem["eval_docs_attempted"] == sem["eval_docs"] - 2 and sem["eval_docs_windowed"] >= 1
    assert sem["max_windows_per_eval_doc"] >= 400 // 14
    review = [json.loads(line) for line in (out / "review.jsonl").read_text().splitlines()]
    labels = [r["label"] for r in review]
    assert labels[:6] == ["planted"] * 3 + ["known_clean"] * 3 and set(labels[6:]) <= {None}
    assert all({"score", "flagged", "doc", "other_doc", "text", "other_text"} <= set(r) for r in review)
    assert sem["review"]["planted"] == 3 and sem["review"]["known_clean"] == 3
    assert "semantic" in metrics["planted"]["detectors"] and "audit" in metrics["planted"]["detectors"]
    verbatim = metrics["planted"]["variants"]["verbatim"]
    # 11 eval docs planted; the 9 long enough are each their own verbatim copy's match (the same windows)
    assert verbatim["planted"] == 11 and verbatim["by_detector"]["semantic"]["found"] == 9


def test_semantic_matches_are_flagged_by_default_and_removed_on_request(tmp_path, tiny_encoder):
    task, pre = news_corpus()  # nothing lexical to find
    # a threshold of 0 on a random encoder flags everything: the mechanics, not the detector, are tested here
    low = {"min_precision": 0.01}
    flagged, out = run_leakage(tmp_path / "flag", [task, pre], params(semantic=semantic_params(tiny_encoder, **low)))
    table = pd.read_parquet(out / "table.parquet")
    sem_rows = table[table["method"] == "semantic"]
    assert len(sem_rows) and set(sem_rows["check"]) == {"pretrain"}
    assert flagged["semantic"]["action"] == "flag" and _removed(out) == []
    assert (
        flagged["eval_sets"]["news/test"]["semantic_rate_after"]
        == flagged["eval_sets"]["news/test"]["semantic_rate_before"]
    )
    kept = pd.read_parquet(out / "pre.parquet").set_index("doc_id")
    assert kept.loc[sorted(set(sem_rows["train_doc"]) & set(kept.index)), "leak_flag"].all()
    removed, out = run_leakage(
        tmp_path / "remove", [task, pre], params(semantic=semantic_params(tiny_encoder, action="remove", **low))
    )
    gone = {r["doc_id"]: r for r in _removed(out)}
    assert set(sem_rows["train_doc"]) <= set(gone) and {r["reason"] for r in gone.values()} == {"leakage:semantic"}
    assert removed["eval_sets"]["news/test"]["semantic_rate_after"] == 0.0


def _removed(out):
    return [json.loads(line) for line in (out / "removed.jsonl").read_text().splitlines()]


# ---------------------------------------------------------------- the real MiniLM


@pytest.mark.slow
def test_minilm_finds_a_hand_written_paraphrase_the_13_gram_detector_misses():
    """A hand-written paraphrase of PARAGRAPH (same facts, other words, other order) inside a pretraining doc:
    no 13-gram is shared, the semantic score is far above an unrelated news paragraph's."""
    paraphrase = (
        "Two districts? No, four: a ban on hosepipes starts at midnight, the water board announced on Tuesday, "
        "because the Eldham reservoir is lower than at any time since measurements started in 1921. While a new "
        "pipe from the catchment in the north is being completed, engineers draw water from a pair of boreholes; "
        "the board now thinks the project will be done before the rains of autumn arrive."
    )
    unrelated = (
        "The football club confirmed on Monday that its manager had signed a new three-year contract after the "
        "team finished second in the league, and that two players would leave the club in the summer window."
    )
    from reference import word_ngrams
    from tasks.common.matching.textnorm import words

    assert not word_ngrams(words(paraphrase), 13) & word_ngrams(words(PARAGRAPH), 13)
    cfg = params().semantic.model_copy(update={"enabled": True})
    enc = semantic_encoder.Encoder(cfg, params().hardware)
    evals, corpus = enc.windows([PARAGRAPH]), enc.windows([paraphrase, unrelated])
    pairs, best = semantic.pair_scores(evals, corpus, 0.75, cfg)
    scores = (corpus.vectors @ evals.vectors.T).ravel()
    assert scores[0] > 0.75 > 0.4 > scores[1] and set(pairs) == {(0, 0)}


@pytest.mark.slow
def test_minilm_pooling_matches_sentence_transformers():
    st = pytest.importorskip("sentence_transformers")
    from tasks.common.models.encoders import reference_model_dir

    texts = ["The reservoir fell to its lowest level.", PARAGRAPH]
    cfg = params().semantic.model_copy(update={"enabled": True, "cpu_precision": "fp32", "window_tokens": 256})
    ours = semantic_encoder.Encoder(cfg, params().hardware.model_copy(update={"device": "cpu"})).windows(texts).vectors
    theirs = st.SentenceTransformer(str(reference_model_dir()), device="cpu").encode(texts, normalize_embeddings=True)
    assert np.allclose(ours, theirs, atol=1e-5)
    bf16_cfg = cfg.model_copy(update={"cpu_precision": "bf16"})
    bf16 = semantic_encoder.Encoder(bf16_cfg, params().hardware).windows(texts).vectors
    assert (ours * bf16).sum(axis=1).min() > 0.999  # int8 (dynamic Linear) gives only 0.92-0.95 on these
