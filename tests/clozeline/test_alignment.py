"""Hand-worked tests of subword <-> word alignment (clozeline/alignment.py)."""

from __future__ import annotations

import pytest
from seqeval.metrics.sequence_labeling import get_entities
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast

from clozeline import alignment
from clozeline.alignment import IGNORE

LABELS = ["O", "B-ORG", "I-ORG"]
L2I = {name: i for i, name in enumerate(LABELS)}


@pytest.fixture(scope="module")
def toy_tok() -> PreTrainedTokenizerFast:
    """A hand-written WordPiece vocab: "newyork" -> new ##york, "timesco" -> times ##co."""
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "new", "##york", "times", "##co"]
    backend = Tokenizer(models.WordPiece({t: i for i, t in enumerate(vocab)}, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    backend.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
    )


def encode(tok, words):
    enc = tok(words, is_split_into_words=True, add_special_tokens=False)
    return enc["input_ids"], enc.word_ids()


def test_two_words_two_subwords_each_first_and_all(toy_tok):
    ids, word_ids = encode(toy_tok, ["newyork", "timesco"])
    assert toy_tok.convert_ids_to_tokens(ids) == ["new", "##york", "times", "##co"]
    assert word_ids == [0, 0, 1, 1]
    tags = ["B-ORG", "I-ORG"]
    b, i = L2I["B-ORG"], L2I["I-ORG"]
    assert alignment.align_labels(word_ids, tags, L2I, "first") == [b, IGNORE, i, IGNORE]
    assert alignment.align_labels(word_ids, tags, L2I, "all") == [b, i, i, i]


def test_specials_and_pad_are_ignored(toy_tok):
    enc = toy_tok(["newyork", "timesco"], is_split_into_words=True, padding="max_length", max_length=9)
    word_ids = enc.word_ids()
    assert toy_tok.convert_ids_to_tokens(enc["input_ids"])[:7] == [
        "[CLS]",
        "new",
        "##york",
        "times",
        "##co",
        "[SEP]",
        "[PAD]",
    ]
    for scheme in ("first", "all"):
        labels = alignment.align_labels(word_ids, ["B-ORG", "I-ORG"], L2I, scheme)
        assert labels[0] == labels[5] == labels[6] == labels[7] == labels[8] == IGNORE
        assert all(lab != IGNORE for lab, w in zip(labels, word_ids) if w is not None) == (scheme == "all")


def test_word_level_entity_count_is_scheme_independent(toy_tok):
    words = ["newyork", "timesco", "new", "timesco"]
    tags = ["B-ORG", "I-ORG", "O", "B-ORG"]
    ids, word_ids = encode(toy_tok, words)
    window = [-1, *word_ids, -1]
    counts = {}
    for scheme in ("first", "all"):
        labels = alignment.align_labels(window, tags, L2I, scheme)
        # oracle predictions: the labels themselves (ignored positions predict "O", as a model might)
        preds = [LABELS[x] if x != IGNORE else "O" for x in labels]
        word_preds = alignment.words_from_windows([(window, preds)], len(words))
        assert word_preds == tags
        counts[scheme] = len(get_entities(word_preds))
    assert counts == {"first": 2, "all": 2}
    # the transformers#14043 failure: B- copied to every subword and entities counted on subwords
    copied = ["B-ORG", "B-ORG", "I-ORG", "I-ORG", "O", "B-ORG", "B-ORG"]
    assert len(get_entities(copied)) == 4  # [0], [1..3], [5], [6]: twice the 2 true entities


def test_plan_windows_by_hand():
    assert alignment.plan_windows([1] * 10, capacity=4, overlap=2) == [(0, 4), (2, 6), (4, 8), (6, 10)]
    assert alignment.plan_windows([1] * 10, capacity=4, overlap=0) == [(0, 4), (4, 8), (8, 10)]
    # a 3-subword word never straddles windows; overlap 1 cannot carry it, so the next window starts at it
    assert alignment.plan_windows([2, 3, 2], capacity=5, overlap=1) == [(0, 2), (2, 3)]
    assert alignment.plan_windows([1, 1], capacity=4, overlap=2) == [(0, 2)]
    assert alignment.plan_windows([], capacity=4, overlap=2) == [(0, 0)]


def test_plan_windows_rejects_a_word_longer_than_a_window():
    with pytest.raises(ValueError, match="more than 4 subwords"):
        alignment.plan_windows([1, 5], capacity=4, overlap=0)


def test_windows_cover_every_word_within_capacity():
    counts = [1, 2, 3, 1, 1, 2, 1, 3, 1, 1, 2, 2]
    windows = alignment.plan_windows(counts, capacity=6, overlap=3)
    covered = set()
    for start, end in windows:
        assert sum(counts[start:end]) <= 6
        covered.update(range(start, end))
    assert covered == set(range(len(counts)))
    assert all(a[0] < b[0] for a, b in zip(windows, windows[1:]))


def test_words_from_windows_uses_max_context_window():
    # words 0..5, windows over words (0..3) and (2..5), one subword each. Word 3 is the last word of window 0
    # (right context 0) but has 1 left and 2 right in window 1, so window 1 wins; word 2: min(2,1)=1 in
    # window 0 vs min(0,3)=0 in window 1 -> window 0.
    w0 = ([-1, 0, 1, 2, 3, -1], [None, "a0", "a1", "a2", "a3", None])
    w1 = ([-1, 2, 3, 4, 5, -1], [None, "b2", "b3", "b4", "b5", None])
    assert alignment.words_from_windows([w0, w1], 6) == ["a0", "a1", "a2", "b3", "b4", "b5"]


def test_words_from_windows_takes_first_subword_and_fails_on_missing_word():
    window = ([-1, 0, 0, 1, -1, -1], [9, 1, 2, 3, 9, 9])
    assert alignment.words_from_windows([window], 2) == [1, 3]
    with pytest.raises(ValueError, match=r"words \[2\]"):
        alignment.words_from_windows([window], 3)


def test_window_encodings_add_specials_and_keep_sentence_word_ids():
    ids = [10, 11, 12, 13, 14]
    word_ids = [0, 0, 1, 2, 2]
    out = alignment.window_encodings(ids, word_ids, [(0, 2), (1, 3)], cls_id=2, sep_id=3)
    assert out == [([2, 10, 11, 12, 3], [-1, 0, 0, 1, -1]), ([2, 12, 13, 14, 3], [-1, 1, 2, 2, -1])]


def test_iob2_violations_and_repair_match_conlleval_reading():
    tags = ["I-PER", "O", "I-PER", "I-PER", "B-LOC", "I-PER", "B-ORG", "I-ORG"]
    assert alignment.iob2_violations(tags) == [0, 2, 5]
    fixed = alignment.repair_iob2(tags)
    assert fixed == ["B-PER", "O", "B-PER", "I-PER", "B-LOC", "B-PER", "B-ORG", "I-ORG"]
    assert alignment.iob2_violations(fixed) == []
    # seqeval's default (conlleval) chunking reads the invalid sequence exactly as the repaired one
    assert get_entities(tags) == get_entities(fixed)


@pytest.mark.parametrize("bad", ["X-PER", "B-", "B_PER", "", "o"])
def test_non_iob2_tags_are_rejected(bad):
    with pytest.raises(ValueError, match="not an IOB2 tag"):
        alignment.iob2_violations(["O", bad])


def test_label_names_list_b_and_i_of_every_type():
    assert alignment.label_names(["O", "B-PER", "I-LOC", "O"]) == ["O", "B-LOC", "I-LOC", "B-PER", "I-PER"]


def test_unknown_scheme_is_an_error():
    with pytest.raises(ValueError, match="unknown label scheme"):
        alignment.align_labels([0], ["O"], L2I, "last")


def test_missing_words():
    assert alignment.missing_words([None, 0, 2, None], 3) == [1]
