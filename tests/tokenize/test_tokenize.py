"""Tests of the ``tokenize`` stage on hand-made leakage parquet files and a tiny trained tokenizer."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from datasets import load_from_disk
from pydantic import ValidationError
from transformers import AutoTokenizer

from clozeline import alignment
from clozeline.alignment import IGNORE
from tasks import tokenize as stage
from tasks import tokenizer as tokenizer_stage
from tasks.common.models.encoders import reference_model_dir, tokenizer_dir
from tasks.tokenize.mlm_blocks import Packer, plain_encoder, tokenize_docs
from tasks.tokenize.ner import encode_words, ner_windows
from tasks.tokenize.shards import ShardWriter
from tasks.tracking import NullLog
from tokenize_fixtures import SEQ, WORDS, news_rows, tokenize_params, tweet_rows, write_leak_table
from tokenizer_fixtures import TRAIN_SENTENCES, make_paths, tokenizer_params, write_source


def pretrain_rows(n_train: int = 30) -> list[dict]:
    rows = [
        {"doc_id": f"pre:{i:03d}", "role": "pretrain", "split": "train", "text": TRAIN_SENTENCES[i % 4]}
        for i in range(n_train)
    ]
    rows += [
        {"doc_id": f"pre:h{i}", "role": "pretrain", "split": "heldout", "text": TRAIN_SENTENCES[i]} for i in range(4)
    ]
    rows.append({"doc_id": "pre:dup", "role": "pretrain", "split": "train", "text": "dup " * 50, "is_duplicate": True})
    return rows


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A tiny corpus, a trained tokenizer and one tokenize run: (paths, metrics)."""
    paths = make_paths(tmp_path_factory.mktemp("tok"))
    write_source(paths, "pre", pretrain_rows())
    write_source(paths, "news", news_rows())
    write_source(paths, "tweets", tweet_rows())
    write_leak_table(
        paths,
        [
            ("n:1", "n:4", "news", "task_train"),
            ("pre:001", "n:3", "news", "pretrain"),
            ("t:2", "t:4", "tweets", "task_train"),
        ],
    )
    tokenizer_stage.run(tokenizer_params(pretrain_sources=["pre"], unk_eval_sources=[]), paths, NullLog())
    return paths, stage.run(tokenize_params(), paths, NullLog())


def our_tok(paths):
    return AutoTokenizer.from_pretrained(tokenizer_dir(paths))


def test_packed_blocks_are_exactly_max_seq_len_and_reproduce_the_stream(built):
    paths, metrics = built
    tok = our_tok(paths)
    texts = [TRAIN_SENTENCES[i % 4] for i in range(30)]  # doc_id order == this order
    stream = []
    for text in texts:  # independent: one unbatched call per document
        stream += tok(text, add_special_tokens=False)["input_ids"] + [tok.sep_token_id]
    n_blocks = len(stream) // (SEQ - 1)
    blocks = load_from_disk(str(paths.data / "tokenize" / "pretrain" / "clozeline" / "train"))
    assert len(blocks) == n_blocks > 0
    assert set(blocks["source"]) == {"pre"}
    ids = np.asarray(blocks["input_ids"])
    assert ids.shape == (n_blocks, SEQ)
    assert (ids[:, 0] == tok.cls_token_id).all()
    assert ids[:, 1:].reshape(-1).tolist() == stream[: n_blocks * (SEQ - 1)]
    assert np.asarray(blocks["attention_mask"]).min() == 1
    special = np.isin(ids, [tok.cls_token_id, tok.sep_token_id])
    assert (np.asarray(blocks["special_tokens_mask"]) == special).all()
    train = metrics["pretrain"]["clozeline"]["train"]
    assert train["docs"] == 30  # the duplicate is excluded
    assert train["tokens"] == len(stream)
    assert train["dropped_tail_tokens"] == len(stream) - n_blocks * (SEQ - 1)
    held = load_from_disk(str(paths.data / "tokenize" / "pretrain" / "clozeline" / "heldout"))
    assert len(held) == metrics["pretrain"]["clozeline"]["heldout"]["blocks"] > 0
    ref = load_from_disk(str(paths.data / "tokenize" / "pretrain" / "reference" / "train"))
    ref_ids = np.asarray(ref["input_ids"])  # the MiniLM tokenizer's blocks of the same text
    assert ref_ids.shape[1] == SEQ and ref_ids.max() >= len(tok)  # ids beyond our vocab: MiniLM's


def test_packer_names_each_block_after_its_first_body_token_across_pieces():
    # docs of 3, 2 and 4 tokens, each followed by [SEP] (9): stream positions 0-3 a, 4-6 b, 7-11 c; body 3 per
    # block. Fed one document at a time, the blocks are those of the whole stream cut at once.
    packer, blocks, sources = Packer(4, 90, 99), [], []
    for doc, source in ([1, 2, 3], "a"), ([4, 5], "b"), ([6, 7, 8, 9], "c"):
        got, named = packer.add(np.array(doc), np.array([len(doc)]), np.array([source]))
        blocks += got.tolist()
        sources += named.tolist()
    assert sources == ["a", "a", "b", "c"]  # blocks start at stream positions 0, 3, 6, 9
    assert blocks == [[90, 1, 2, 3], [90, 99, 4, 5], [90, 99, 6, 7], [90, 8, 9, 99]]
    assert packer.rest.size == 0 and packer.tokens == 12


def test_shard_writer_holds_one_shard_at_most_and_reads_back_as_one_dataset(tmp_path):
    blocks = np.arange(7 * 4).reshape(7, 4)
    sources = np.array(list("aabbbcc"))
    writer = ShardWriter(tmp_path / "split", 3, np.array([0, 5]))
    for lo, hi in ((0, 2), (2, 7)):  # pieces of 2 and 5 blocks: shards of 3, 3, 1
        writer.add(blocks[lo:hi], sources[lo:hi])
    writer.close()
    assert writer.most_held == 3 and writer.blocks == 7 and writer.by_source == {"a": 2, "b": 3, "c": 2}
    assert sorted(p.name for p in (tmp_path / "split").glob("*.arrow")) == [
        f"data-0000{i}-of-00003.arrow" for i in range(3)
    ]
    data = load_from_disk(str(tmp_path / "split"))
    assert np.asarray(data["input_ids"]).tolist() == blocks.tolist() and data["source"] == sources.tolist()
    assert np.asarray(data["special_tokens_mask"]).tolist() == np.isin(blocks, [0, 5]).astype(int).tolist()


@pytest.mark.parametrize("num_proc", [1, 2])
def test_tokenize_docs_gives_the_wrapper_ids_untruncated_and_unpadded(num_proc):
    # MiniLM's tokenizer.json truncates and pads to 128, which the bare Rust tokenizer would apply
    tok = AutoTokenizer.from_pretrained(reference_model_dir())
    texts = [" ".join(WORDS * 20), "", "Naïve [SEP] café, [MASK]!", "ships and grain"]
    per_doc = [tok(text, add_special_tokens=False)["input_ids"] for text in texts]  # one unbatched call each
    ids, lengths = tokenize_docs(texts, plain_encoder(tok), batch_size=3, num_proc=num_proc)
    assert lengths.tolist() == [len(doc) for doc in per_doc]
    assert lengths[0] > 128 and lengths[1] == 0
    assert ids.tolist() == [i for doc in per_doc for i in doc]


def test_too_short_corpus_is_a_clear_error(tmp_path):
    paths = make_paths(tmp_path)
    rows = [
        {"doc_id": "p:1", "role": "pretrain", "split": "train", "text": "ships"},
        {"doc_id": "p:2", "role": "pretrain", "split": "heldout", "text": "salt"},
    ]
    write_source(paths, "pre", rows)
    tokenizer_stage.run(
        tokenizer_params(vocab_from="reference", pretrain_sources=["pre"], unk_eval_sources=[]), paths, NullLog()
    )
    with pytest.raises(ValueError, match="fewer than one block"):
        stage.run(tokenize_params(), paths, NullLog())


@pytest.mark.parametrize("tok_name", ["clozeline", "reference"])
def test_cls_docs_are_stored_whole_with_text_and_train_overlap_and_lengths_counted(built, tok_name):
    paths, metrics = built
    folder = paths.data / "tokenize" / "cls" / tok_name
    tok = our_tok(paths) if tok_name == "clozeline" else AutoTokenizer.from_pretrained(reference_model_dir())
    assert json.loads((folder / "labels.json").read_text()) == ["business", "sport", "tech"]
    train = load_from_disk(str(folder / "train"))
    texts = [r["text"] for r in news_rows() if r["split"] == "train"]
    assert train["doc_id"] == ["n:1", "n:2"]
    assert train["label"] == [1, 0]
    assert train["text"] == texts and train["n_words"] == [3, 40]
    for row, text in zip(train, texts):
        assert row["input_ids"] == tok(text)["input_ids"]  # whole: finetune cuts (head or head + tail)
        assert row["n_tokens_full"] == len(row["input_ids"])
    m = metrics["cls"][tok_name]["train"]
    assert m["truncated_docs"] == 1 and m["truncation_rate"] == 0.5  # "the harbour" x 20 = 42 tokens > SEQ
    assert m["tokens_cut"] == 42 - SEQ
    assert m["label_distribution"] == {"business": 1, "sport": 1}
    # all splits together, the keys the report reads: 1 of the 4 docs longer than SEQ
    assert metrics["cls"][tok_name]["truncated_docs"] == 1
    assert metrics["cls"][tok_name]["truncation_rate"] == 0.25
    # only the task_train pair of this source flags its eval doc; a pretraining match does not
    assert load_from_disk(str(folder / "test"))["train_overlap"] == [True]
    assert load_from_disk(str(folder / "dev"))["train_overlap"] == [False]
    ner_test = load_from_disk(str(paths.data / "tokenize" / "ner" / tok_name / "test"))
    assert ner_test["doc_id"] == ["t:4"] and ner_test["train_overlap"] == [True]


@pytest.mark.parametrize("tok_name", ["clozeline", "reference"])
def test_ner_zero_subword_word_keeps_three_words_aligned(built, tok_name):
    paths, metrics = built
    folder = paths.data / "tokenize" / "ner" / tok_name
    names = json.loads((folder / "labels.json").read_text())
    assert names == ["O", "B-LOC", "I-LOC", "B-ORG", "I-ORG", "B-PER", "I-PER"]
    row = next(r for r in load_from_disk(str(folder / "train")) if r["doc_id"] == "t:1")
    assert row["words"] == ["Paris", "\u200b", "France"]
    assert sorted(set(row["word_ids"]) - {-1}) == [0, 1, 2]
    first = [names[x] if x != IGNORE else None for x in row["labels_first"]]
    assert [lab for lab in first if lab is not None] == ["B-LOC", "O", "B-LOC"]
    assert row["labels_first"][0] == row["labels_first"][-1] == IGNORE
    assert row["labels_all"][0] == row["labels_all"][-1] == IGNORE
    u200b_pos = row["word_ids"].index(1)
    assert row["input_ids"][u200b_pos] == (1 if tok_name == "clozeline" else 100)  # [UNK]
    assert metrics["ner"][tok_name]["train"]["zero_subword_words"] == 1


def test_ner_invalid_iob2_is_counted_and_repaired(built):
    paths, metrics = built
    assert metrics["ner_input"]["invalid_iob2_tags"] == 1
    assert metrics["ner_input"]["invalid_iob2_sentences_repaired"] == 1
    assert metrics["ner_input"]["sentences_in"] == 4  # the duplicate is excluded before counting
    row = next(
        r for r in load_from_disk(str(paths.data / "tokenize" / "ner" / "clozeline" / "train")) if r["doc_id"] == "t:2"
    )
    assert row["word_tags"] == ["O", "B-ORG", "I-ORG"]


def test_ner_invalid_iob2_drop_and_error_policies(built):
    paths, _ = built
    metrics = stage.run(tokenize_params(ner_invalid_iob2="drop"), paths, NullLog())
    assert metrics["ner_input"]["dropped"] == {"invalid_iob2": 1}
    assert metrics["ner_input"]["sentences_kept"] + 1 == metrics["ner_input"]["sentences_in"]
    with pytest.raises(ValueError, match=r"doc_id 't:2': invalid IOB2 at word\(s\) \[1\]"):
        stage.run(tokenize_params(ner_invalid_iob2="error"), paths, NullLog())
    stage.run(tokenize_params(), paths, NullLog())  # leave the module fixture's outputs as they were


@pytest.mark.parametrize("tok_name", ["clozeline", "reference"])
def test_long_sentence_windows_recover_every_word(built, tok_name):
    paths, metrics = built
    names = json.loads((paths.data / "tokenize" / "ner" / tok_name / "labels.json").read_text())
    rows = list(load_from_disk(str(paths.data / "tokenize" / "ner" / tok_name / "dev")))
    assert len(rows) > 1 and [r["window_index"] for r in rows] == list(range(len(rows)))
    for row in rows:
        assert len(row["input_ids"]) <= SEQ
        assert row["word_ids"][0] == row["word_ids"][-1] == -1
    gold = rows[0]["word_tags"]
    for scheme in ("first", "all"):
        windows = [(r["word_ids"], [names[x] if x != IGNORE else "O" for x in r[f"labels_{scheme}"]]) for r in rows]
        assert alignment.words_from_windows(windows, len(gold)) == gold
    assert metrics["ner"][tok_name]["dev"]["windowed_sentences"] == 1
    assert metrics["ner"][tok_name]["dev"]["truncated_sentences"] == 0
    assert metrics["ner"][tok_name]["windowed_docs"] == 1 and metrics["ner"][tok_name]["truncation_rate"] == 0.0


def test_200_word_sentence_entity_at_word_180_gets_a_prediction():
    tok = AutoTokenizer.from_pretrained(reference_model_dir())
    words = [WORDS[i % len(WORDS)] for i in range(200)]
    tags = ["O"] * 200
    tags[180] = "B-PER"
    ((ids, word_ids),) = encode_words(tok, [words], ["tweets:0"])[0]
    windows = alignment.plan_windows(np.bincount(word_ids).tolist(), capacity=128 - 2, overlap=32)
    assert len(windows) >= 2
    encodings = alignment.window_encodings(ids, word_ids, windows, tok.cls_token_id, tok.sep_token_id)
    label2id = {"O": 0, "B-PER": 1, "I-PER": 2}
    per_window = []
    for w_ids, w_words in encodings:
        assert len(w_ids) <= 128
        labels = alignment.align_labels(w_words, tags, label2id, "first")
        per_window.append((w_words, labels))
    merged = alignment.words_from_windows(per_window, 200)
    assert merged[180] == 1
    assert merged == [label2id[t] for t in tags]


def test_word_longer_than_a_window_keeps_its_first_subwords_and_label():
    tok = AutoTokenizer.from_pretrained(reference_model_dir())
    # one word, far more subwords than a 16-token window holds (WordPiece splits at punctuation; a run of
    # over 100 characters without it would be a single [UNK])
    url = "https://example.org/" + "/".join(f"page{i}" for i in range(12))
    words, tags = ["see", url, "from", "Paris"], ["O", "B-URL", "O", "B-LOC"]
    n_url = len(tok(url, add_special_tokens=False)["input_ids"])
    assert n_url > SEQ - 2
    part = pd.DataFrame([{"doc_id": "tweets:7", "split": "dev", "words": words, "tags": tags}])
    label2id = {"O": 0, "B-URL": 1, "B-LOC": 2, "I-URL": 3, "I-LOC": 4}  # "all" labels continuations I-
    columns, stats = ner_windows(tokenize_params(), tok, part, label2id)
    assert stats["words_cut_to_window"] == 1 and stats["subwords_cut"] == n_url - (SEQ - 2)
    assert stats["words_cut_examples"] == [f"tweets:7: {url[:40]!r}"]
    assert all(len(ids) <= SEQ for ids in columns["input_ids"])
    with_url = next(i for i, w in enumerate(columns["word_ids"]) if 1 in w)
    url_positions = columns["word_ids"][with_url]
    assert url_positions.count(1) == SEQ - 2  # the URL alone fills a window: its first 14 subwords
    assert columns["labels_first"][with_url][url_positions.index(1)] == 1
    windows = list(zip(columns["word_ids"], columns["labels_first"], strict=True))
    assert alignment.words_from_windows(windows, len(words)) == [0, 1, 0, 2]  # every word keeps its gold label


def test_outputs_are_byte_identical_across_runs(built, tmp_path):
    paths, _ = built
    root = paths.data / "tokenize"
    before = {p.relative_to(root): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}
    stage.run(tokenize_params(), paths, NullLog())
    after = {p.relative_to(root): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}
    assert before.keys() == after.keys() and before == after


def test_metrics_report_lengths_and_label_distribution(built):
    _, metrics = built
    dev = metrics["ner"]["clozeline"]["dev"]
    assert dev["label_distribution_first"]["B-LOC"] == 1
    assert dev["word_tag_distribution"] == {"B-LOC": 1, "I-LOC": 1, "O": 38}
    assert dev["tokens_per_doc_mean"] > SEQ
    assert json.loads(json.dumps(metrics, allow_nan=False)) == metrics


@pytest.mark.parametrize(
    "changes, key",
    [
        ({"ner_window_overlap_tokens": SEQ - 2}, "ner_window_overlap_tokens"),
        ({"ner_invalid_iob2": "ignore"}, "ner_invalid_iob2"),
        ({"max_seq_len_tokens": 4}, "max_seq_len_tokens"),
        ({"shard_blocks": 0}, "shard_blocks"),
        ({"ner_max_seq_len_tokens": 4}, "ner_max_seq_len_tokens"),
        (
            {"tasks": {"cls": {"kind": "classification", "source": "news", "metric": "entity_f1", "recipe": "cls"}}},
            "metric 'entity_f1' is not one of",
        ),
    ],
)
def test_bad_params_fail_at_load_time(changes, key):
    with pytest.raises(ValidationError, match=key):
        tokenize_params(**changes)


def test_train_overlap_ignores_pairs_whose_train_doc_the_audit_removed(tmp_path):
    from tasks.tokenize.tables import train_overlap_ids

    (tmp_path / "leakage").mkdir()
    pairs = [
        ("tr:1", "ev:1", "news", "task_train"),
        ("tr:2", "ev:2", "news", "task_train"),
        ("pre:1", "ev:3", "news", "pretrain"),
        ("tr:9", "ev:9", "other", "task_train"),
    ]
    frame = pd.DataFrame(pairs, columns=["train_doc", "eval_doc", "eval_source", "check"])
    frame.to_parquet(tmp_path / "leakage" / "table.parquet", index=False)
    assert train_overlap_ids(tmp_path, "news") == {"ev:1", "ev:2"}
    (tmp_path / "leakage" / "removed.jsonl").write_text(json.dumps({"doc_id": "tr:2", "reason": "leakage:task_train"}))
    assert train_overlap_ids(tmp_path, "news") == {"ev:1"}  # tr:2 is gone: ev:2 overlaps nothing now
