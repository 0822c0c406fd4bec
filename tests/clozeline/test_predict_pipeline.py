"""``clozeline.predict``'s pipelines behave like the stock Hugging Face pipelines they stand beside: a string is
split into words with punctuation off and character offsets kept, entities come as spans read as the evaluation
reads tags (seqeval, strict IOB2), and an empty input or an argument the pipeline does not take is a one-line
``ValueError``. Tiny exports whose head always predicts one label make the model's output known by hand."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import BertConfig, BertForSequenceClassification, BertForTokenClassification, BertTokenizerFast

from clozeline import entities
from clozeline.predict import ExportError, load, main, predict_records
from clozeline.recipe import RECIPE_KEY, TOKEN_TASK
from tasks.export.rescore import compare

NER_LABELS = ["O", "B-person", "I-person", "B-sportsteam", "I-sportsteam"]
CLS_LABELS = ["business", "sports"]
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "saka", "scored", "in", "cupertino", "we", "love", "."]
TEXT = "We love Saka. Saka scored in Cupertino, twice"


def _export(folder, model_class, labels: list[str], always: str, block: dict):
    """A 1-layer BERT export whose head predicts ``always`` on every input (zero weights, one-hot bias)."""
    config = BertConfig(
        vocab_size=len(VOCAB),
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=64,
        id2label=dict(enumerate(labels)),
        label2id={name: i for i, name in enumerate(labels)},
    )
    setattr(config, RECIPE_KEY, {"format": 1, **block})
    torch.manual_seed(0)
    model = model_class(config)
    with torch.no_grad():
        model.classifier.weight.zero_()
        model.classifier.bias.copy_(torch.tensor([4.0 if name == always else 0.0 for name in labels]))
    model.save_pretrained(folder)
    BertTokenizerFast(vocab={word: i for i, word in enumerate(VOCAB)}).save_pretrained(folder)
    return load(folder)


TAGGER = {"kind": "token_classification", "pooling": "token", "window_tokens": 8, "window_overlap_tokens": 2}
CLASSIFIER = {
    "kind": "classification",
    "pooling": "mean",
    "max_seq_len_tokens": 16,
    "truncation": "head",
    "head_tokens": 0,
}


@pytest.fixture(scope="module")
def tagger(tmp_path_factory):
    """Exports predicting ``B-person`` and ``I-sportsteam`` on every word."""
    root = tmp_path_factory.mktemp("tagger")
    return {
        tag: _export(root / tag, BertForTokenClassification, NER_LABELS, tag, TAGGER)
        for tag in ("B-person", "I-sportsteam")
    }


def test_a_string_is_split_with_punctuation_off_and_each_word_has_its_offsets(tagger):
    found = tagger["B-person"](TEXT)
    # by hand: We(0,2) love(3,7) Saka(8,12) .(12,13) Saka(14,18) scored(19,25) in(26,28) Cupertino(29,38) ,(38,39)
    # twice(40,45)
    assert [(w["word"], w["start"], w["end"]) for w in found] == [
        ("We", 0, 2),
        ("love", 3, 7),
        ("Saka", 8, 12),
        (".", 12, 13),
        ("Saka", 14, 18),
        ("scored", 19, 25),
        ("in", 26, 28),
        ("Cupertino", 29, 38),
        (",", 38, 39),
        ("twice", 40, 45),
    ]
    assert [w["index"] for w in found] == list(range(10)) and {w["entity"] for w in found} == {"B-person"}
    assert all(0 < w["score"] < 1 for w in found)


def test_entity_groups_carry_type_score_text_and_character_offsets(tagger):
    groups = tagger["B-person"](TEXT, aggregation_strategy="simple")
    assert [(g["entity_group"], g["word"], g["start"], g["end"]) for g in groups][2:4] == [
        ("person", "Saka", 8, 12),
        ("person", ".", 12, 13),
    ]
    assert len(groups) == 10 and all(TEXT[g["start"] : g["end"]] == g["word"] for g in groups)
    assert tagger["B-person"](TEXT, aggregation_strategy="first") == groups  # words are read at their first subword
    # as the stock pipeline: ignore_labels drops groups of those types too (it was ignored when grouping)
    assert tagger["B-person"](TEXT, aggregation_strategy="simple", ignore_labels=["person"]) == []
    assert tagger["B-person"](TEXT, aggregation_strategy="simple", ignore_labels=["sportsteam"]) == groups


def test_an_i_tag_that_opens_an_entity_is_read_as_the_strict_evaluation_reads_it(tagger):
    # every word predicted I-sportsteam: in strict IOB2 no entity starts, so no word is in one
    words = tagger["I-sportsteam"](TEXT)
    assert [w["entity"] for w in words] == ["O"] * 10
    assert tagger["I-sportsteam"](TEXT, aggregation_strategy="simple") == []


def test_words_given_split_have_offsets_into_the_joined_text(tagger):
    found = tagger["B-person"](["Saka", "scored", "."], is_split_into_words=True)
    assert [(w["word"], w["start"], w["end"]) for w in found] == [("Saka", 0, 4), ("scored", 5, 11), (".", 12, 13)]
    found = tagger["B-person"](["Saka", "."], is_split_into_words=True, delimiter="|")
    assert [(w["start"], w["end"]) for w in found] == [(0, 4), (5, 6)]


def test_strict_reading_of_mixed_tags_by_hand():
    tags = ["I-sportsteam", "B-person", "I-person", "O", "I-person", "B-person", "I-sportsteam", "I-sportsteam"]
    assert entities.strict_spans(tags) == [("person", 1, 3), ("person", 5, 6)]
    assert entities.strict_tags(tags) == ["O", "B-person", "I-person", "O", "O", "B-person", "O", "O"]
    words, offsets = entities.split_words("Arsenal Bukayo Saka, and Saka. Arsenal FC")
    assert words == ["Arsenal", "Bukayo", "Saka", ",", "and", "Saka", ".", "Arsenal", "FC"]
    groups = entities.entity_groups(
        "Arsenal Bukayo Saka, and Saka. Arsenal FC",
        offsets,
        ["I-sportsteam", "B-person", "I-person", "O", "O", "B-person", "O", "O", "O"],
        [0.5, 0.9, 0.7, 0.9, 0.9, 0.6, 0.9, 0.9, 0.9],
    )
    assert [(g["entity_group"], g["word"], g["start"], g["end"]) for g in groups] == [
        ("person", "Bukayo Saka", 8, 19),
        ("person", "Saka", 25, 29),
    ]
    assert [g["score"] for g in groups] == pytest.approx([0.8, 0.6])


@pytest.mark.parametrize(
    "call",
    [
        lambda t: t(""),
        lambda t: t("   \n"),
        lambda t: t([], is_split_into_words=True),
        lambda t: t(TEXT, aggregation_strategy="average"),
        lambda t: t(TEXT, aggregation_strategy="max"),
        lambda t: t(TEXT, grouped_entities=True),
    ],
)
def test_empty_input_and_arguments_it_does_not_take_are_one_line_errors(tagger, call):
    with pytest.raises(ValueError) as err:
        call(tagger["B-person"])
    assert "\n" not in str(err.value)


def test_an_unknown_argument_is_named(tagger):
    with pytest.raises(ValueError, match=rf"{TOKEN_TASK}: unknown keyword argument\(s\) \['grouped_entities'\]"):
        tagger["B-person"](TEXT, grouped_entities=True)


def test_a_string_given_as_split_words_is_an_error_not_a_word_per_character(tagger):
    # as the stock pipeline: it was tagged character by character, the spaces as [UNK] words
    with pytest.raises(
        ValueError,
        match=rf"^{TOKEN_TASK}: is_split_into_words=True takes a list of words, got a "
        r"string \('Saka scored'\)",
    ):
        tagger["B-person"]("Saka scored", is_split_into_words=True)


def test_the_command_line_records_keep_one_tag_per_word(tagger):
    found = predict_records(tagger["I-sportsteam"], [{"doc_id": "s", "words": ["Saka", "scored", "."]}])
    assert found[0]["pred"] == ["O", "O", "O"] and len(found[0]["probs"]) == 3


def test_the_command_line_tags_a_text_record_word_by_word_and_names_a_bad_record(tagger, tmp_path, capsys):
    # a text record for a tagger was a traceback (top_k, an argument the tagger refuses)
    folder, lines = tagger["B-person"].model.name_or_path, tmp_path / "in.jsonl"
    lines.write_text('{"doc_id": "t", "text": "Saka scored."}\n', encoding="utf-8")
    assert main([folder, "--input", str(lines), "--output", str(tmp_path / "out.jsonl")]) == 0
    found = json.loads((tmp_path / "out.jsonl").read_text(encoding="utf-8").splitlines()[0])
    assert (found["pred"], found["words"], found["offsets"]) == (
        ["B-person"] * 3,
        ["Saka", "scored", "."],
        [[0, 4], [5, 11], [11, 12]],
    )  # by hand
    lines.write_text('{"doc_id": "t", "text": "Saka"}\n{"doc_id": "e", "text": " "}\n', encoding="utf-8")
    assert main([folder, "--input", str(lines), "--output", str(tmp_path / "out.jsonl")]) == 1
    assert capsys.readouterr().err == (
        f"clozeline.predict: {lines}: record 2 (doc_id 'e'): {TOKEN_TASK}: empty input (' '): there is no word to tag\n"
    )


def test_a_folder_or_input_that_is_not_there_is_one_line_naming_it(tagger, tmp_path, capsys):
    # a mistyped folder read "Repo id must be in the form 'repo_name' ...", the hub's rule for a model id
    with pytest.raises(ExportError, match=r": does not load as a clozeline export: no such folder$"):
        load(tmp_path / "nope")
    folder, missing = tagger["B-person"].model.name_or_path, tmp_path / "in.jsonl"
    assert main([folder, "--input", str(missing), "--output", str(tmp_path / "out.jsonl")]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"clozeline.predict: {missing}: ") and err.count("\n") == 1, err


def test_the_classifier_refuses_an_empty_text(tmp_path):
    classify = _export(tmp_path / "cls", BertForSequenceClassification, CLS_LABELS, "sports", CLASSIFIER)
    assert classify("Saka scored")[0]["label"] == "sports"
    for empty in ("", "  ", {"text": "Saka scored", "text_pair": ""}):
        with pytest.raises(ValueError, match="empty input"):
            classify(empty)


def test_the_export_check_reads_evaluated_tags_as_the_pipeline_reports_them():
    evaluated = [{"doc_id": "s", "pred": ["I-sportsteam", "O", "B-person"], "probs": [0.6, 0.9, 0.8]}]
    strict = [{"doc_id": "s", "pred": ["O", "O", "B-person"], "probs": [0.6, 0.9, 0.8]}]
    assert compare(evaluated, strict, NER_LABELS, 1e-4)["disagree"] == 0
    assert compare(evaluated, evaluated, NER_LABELS, 1e-4)["label_mismatches"] == 1  # raw tags are not the report


def test_the_classifier_refuses_an_unknown_argument_and_an_input_of_another_type(tmp_path):
    # classify(text, topk=2) answered one label, ignoring the mistyped top_k; a nested list read "empty input"
    classify = _export(tmp_path / "cls", BertForSequenceClassification, CLS_LABELS, "sports", CLASSIFIER)
    with pytest.raises(ValueError, match=r"unknown keyword argument\(s\) \['topk'\]"):
        classify("Saka scored", topk=2)
    assert len(classify("Saka scored", top_k=None, truncation=True)) == len(CLS_LABELS)
    with pytest.raises(ValueError, match="takes a string or"):
        classify([["Saka scored", "a pair"], ["as a list", "of lists"]])
