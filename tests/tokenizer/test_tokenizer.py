"""Tests of the ``tokenizer`` stage on hand-made leakage parquet files (row contract of CONTRACTS.md)."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError
from transformers import AutoTokenizer

from tasks import tokenizer as stage
from tasks.common.models.encoders import reference_model_dir, tokenizer_dir
from tasks.config import Paths
from tasks.tracking import NullLog
from tokenizer_fixtures import SPECIALS, TRAIN_SENTENCES, make_paths, tokenizer_params, write_source


def pretrain_rows() -> list[dict]:
    rows = [
        {"doc_id": f"pre:{i:03d}", "role": "pretrain", "split": "train", "text": TRAIN_SENTENCES[i % 4]}
        for i in range(40)
    ]
    rows.append({"doc_id": "pre:held", "role": "pretrain", "split": "heldout", "text": "heldoutonlyword " * 30})
    rows.append(
        {
            "doc_id": "pre:dup",
            "role": "pretrain",
            "split": "train",
            "text": "duplicateonlyword " * 30,
            "is_duplicate": True,
        }
    )
    return rows


def task_rows() -> list[dict]:
    dev_text = "devonlyword " * 30 + "жжж"
    return [
        {"doc_id": "task:1", "role": "task", "split": "train", "text": "ships and grain", "label": "a"},
        {"doc_id": "task:2", "role": "task", "split": "dev", "text": dev_text, "label": "a"},
        {"doc_id": "task:3", "role": "task", "split": "test", "text": "testonlyword " * 30, "label": "b"},
    ]


@pytest.fixture
def corpus(tmp_path) -> Paths:
    paths = make_paths(tmp_path)
    write_source(paths, "pre", pretrain_rows())
    write_source(paths, "task", task_rows())
    return paths


def test_vocab_never_sees_dev_test_heldout_or_duplicates(corpus):
    stage.run(tokenizer_params(), corpus, NullLog())
    vocab = AutoTokenizer.from_pretrained(tokenizer_dir(corpus)).get_vocab()
    # control: a word of the train split with the same frequency (10 docs) is learned as a whole word
    assert "quinceberry" in vocab
    for unseen in ("devonlyword", "testonlyword", "heldoutonlyword", "duplicateonlyword"):
        assert unseen not in vocab


def test_saved_folder_loads_with_auto_tokenizer_and_specials_first(corpus):
    metrics = stage.run(tokenizer_params(), corpus, NullLog())
    tok = AutoTokenizer.from_pretrained(tokenizer_dir(corpus))
    assert tok.is_fast
    assert [tok.pad_token_id, tok.unk_token_id, tok.cls_token_id, tok.sep_token_id, tok.mask_token_id] == [
        0,
        1,
        2,
        3,
        4,
    ]
    ids = tok("The Harbour")["input_ids"]
    assert tok.convert_ids_to_tokens(ids) == ["[CLS]", "the", "harbour", "[SEP]"]
    assert metrics["vocab_size"] == len(tok) <= 300
    assert metrics["train_docs"] == 40  # the duplicate row is excluded


def test_training_is_byte_identical_across_runs(corpus, tmp_path):
    stage.run(tokenizer_params(), corpus, NullLog())
    first = (tokenizer_dir(corpus) / "tokenizer.json").read_bytes()
    for _ in range(2):  # tokenizers#1794 made this flaky: several repeats catch the hash-order dependence
        stage.run(tokenizer_params(), corpus, NullLog())
        assert (tokenizer_dir(corpus) / "tokenizer.json").read_bytes() == first


def test_unk_rate_and_fertility_by_hand(corpus):
    metrics = stage.run(tokenizer_params(), corpus, NullLog())
    tok = AutoTokenizer.from_pretrained(tokenizer_dir(corpus))
    dev = metrics["dev"]["task"]
    # dev text: 30 x "devonlyword" + "жжж"; "ж" never occurs in train, so "жжж" is one [UNK] (WordPiece maps
    # an untokenizable word to a single [UNK])
    per_word = len(tok.tokenize("devonlyword"))
    assert tok.tokenize("жжж") == ["[UNK]"]
    assert dev["words"] == 31
    assert dev["tokens"] == 30 * per_word + 1
    assert dev["unk_tokens"] == 1
    assert dev["unk_rate"] == pytest.approx(1 / (30 * per_word + 1))
    assert dev["fertility"] == pytest.approx((30 * per_word + 1) / 31)
    assert metrics["heldout"]["docs"] == 1


def test_reference_vocab_matches_packaged_minilm_tokenizer(corpus):
    metrics = stage.run(tokenizer_params(vocab_from="reference"), corpus, NullLog())
    ours = AutoTokenizer.from_pretrained(tokenizer_dir(corpus))
    ref = AutoTokenizer.from_pretrained(reference_model_dir())
    assert metrics["vocab_size"] == 30522
    text = "The Harbour of Marseille, opened at dawn; naïve café TRADERS argued."
    assert ours(text)["input_ids"] == ref(text)["input_ids"]


def test_vocab_file_is_loaded(corpus, tmp_path):
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "ships", "grain", "##s", "and"]
    path = tmp_path / "vocab.txt"
    path.write_text("\n".join(vocab) + "\n", encoding="utf-8")
    stage.run(tokenizer_params(vocab_from="file", vocab_file=str(path)), corpus, NullLog())
    tok = AutoTokenizer.from_pretrained(tokenizer_dir(corpus))
    assert tok("grains and ships")["input_ids"] == [2, 6, 7, 8, 5, 3]


def test_missing_special_token_in_vocab_file_is_an_error(corpus, tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\nships\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"\[MASK\]"):
        stage.run(tokenizer_params(vocab_from="file", vocab_file=str(path)), corpus, NullLog())


def test_missing_source_names_the_file(corpus):
    with pytest.raises(FileNotFoundError, match="nosuch.parquet"):
        stage.run(tokenizer_params(pretrain_sources=["nosuch"]), corpus, NullLog())


@pytest.mark.parametrize(
    "changes, key",
    [
        ({"vocab_from": "file"}, "vocab_file"),
        ({"vocab_file": "x.txt"}, "vocab_file"),
        ({"special_tokens": {**SPECIALS, "mask": "[PAD]"}}, r"special tokens must be unique; repeated: \[.\[PAD\].\]"),
        ({"vocab_size_tokens": 10}, "vocab_size_tokens"),
        ({"typo_key": 1}, "typo_key"),
    ],
)
def test_bad_params_fail_at_load_time(changes, key):
    with pytest.raises(ValidationError, match=key):
        tokenizer_params(**changes)


def test_metrics_are_json_serialisable(corpus):
    metrics = stage.run(tokenizer_params(), corpus, NullLog())
    assert json.loads(json.dumps(metrics, allow_nan=False)) == metrics


class Tags(NullLog):
    def __init__(self) -> None:
        self.tags_sent: dict = {}

    def tags(self, values) -> None:
        self.tags_sent.update(values)


def tokenizer_json(paths: Paths) -> bytes:
    return (tokenizer_dir(paths) / "tokenizer.json").read_bytes()


def test_train_once_keeps_the_first_runs_vocabulary_as_the_corpus_grows(corpus):
    log = Tags()
    first = stage.run(tokenizer_params(vocab_from="train_once"), corpus, log)
    assert log.tags_sent["tokenizer.vocab"] == "trained" and first["vocab_train_docs"] == 40
    trained_json = tokenizer_json(corpus)
    # the same vocabulary as a plain train run on the same text, byte for byte
    stage.run(tokenizer_params(vocab_from="train"), corpus, NullLog())
    assert tokenizer_json(corpus) == trained_json
    grown = pretrain_rows() + [
        {"doc_id": f"pre:new{i}", "role": "pretrain", "split": "train", "text": "zanzibar cloves and vanilla pods " * 5}
        for i in range(20)
    ]
    write_source(corpus, "pre", grown)
    retrained = stage.run(tokenizer_params(vocab_from="train"), corpus, NullLog())
    assert tokenizer_json(corpus) != trained_json and retrained["train_docs"] == 60  # train moves with the data
    log = Tags()
    kept = stage.run(tokenizer_params(vocab_from="train_once"), corpus, log)
    assert log.tags_sent["tokenizer.vocab"] == "kept" and "40 train docs" in log.tags_sent["tokenizer.vocab_reason"]
    assert tokenizer_json(corpus) == trained_json
    assert (kept["train_docs"], kept["vocab_train_docs"]) == (60, 40)
    tok = AutoTokenizer.from_pretrained(tokenizer_dir(corpus))
    assert tok.convert_tokens_to_ids("zanzibar") == tok.unk_token_id  # new words are measured, not learnt


@pytest.mark.parametrize("how", ["other params", "truncated vocab", "damaged record", "removed"])
def test_a_kept_vocabulary_that_cannot_be_used_is_trained_again_and_says_why(corpus, how):
    stage.run(tokenizer_params(vocab_from="train_once"), corpus, NullLog())
    folder = corpus.data / "tokenizer_vocab"
    changes, reason = (
        {},
        {
            "other params": "other tokenizer params",
            "truncated vocab": "sha256",
            "damaged record": "trained.json",
            "removed": "no kept vocabulary",
        }[how],
    )
    if how == "other params":
        changes = {"vocab_size_tokens": 250}
    elif how == "truncated vocab":
        lines = (folder / "vocab.txt").read_text(encoding="utf-8").splitlines(keepends=True)
        (folder / "vocab.txt").write_text("".join(lines[:-3]), encoding="utf-8")
    elif how == "damaged record":
        (folder / "trained.json").write_text('{"params": ', encoding="utf-8")
    else:
        (folder / "vocab.txt").unlink()
    log = Tags()
    stage.run(tokenizer_params(vocab_from="train_once", **changes), corpus, log)
    assert log.tags_sent["tokenizer.vocab"] == "trained" and reason in log.tags_sent["tokenizer.vocab_reason"]
    stage.run(tokenizer_params(vocab_from="train", **changes), corpus, NullLog())
    retrained = tokenizer_json(corpus)
    stage.run(tokenizer_params(vocab_from="train_once", **changes), corpus, log)
    assert log.tags_sent["tokenizer.vocab"] == "kept" and tokenizer_json(corpus) == retrained


def test_other_vocab_modes_leave_a_kept_vocabulary_alone(corpus):
    stage.run(tokenizer_params(vocab_from="train_once"), corpus, NullLog())
    folder = corpus.data / "tokenizer_vocab"
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    metrics = stage.run(tokenizer_params(vocab_from="reference"), corpus, NullLog())
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before and metrics["vocab_train_docs"] is None


@pytest.mark.parametrize("edit", ["swap two lines", "byte order mark", "rename a token"])
def test_an_edited_kept_vocabulary_of_the_same_size_is_trained_again(corpus, edit):
    stage.run(tokenizer_params(vocab_from="train_once"), corpus, NullLog())
    first = tokenizer_json(corpus)
    path = corpus.data / "tokenizer_vocab" / "vocab.txt"
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    if edit == "swap two lines":
        lines[10], lines[11] = lines[11], lines[10]
    elif edit == "byte order mark":
        lines[0] = "\ufeff" + lines[0]
    else:
        lines[12] = "renamed\n"
    path.write_text("".join(lines), encoding="utf-8")
    log = Tags()
    stage.run(tokenizer_params(vocab_from="train_once"), corpus, log)
    assert log.tags_sent["tokenizer.vocab"] == "trained" and "sha256" in log.tags_sent["tokenizer.vocab_reason"]
    assert tokenizer_json(corpus) == first  # trained again on the same text: the first run's tokenizer
