"""finetune: frozen encoder, masked-mean pooling, seeding, word-level strict NER scoring, seed statistics."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pytest
import torch
from seqeval.metrics import f1_score as seqeval_f1
from transformers import BertTokenizerFast

from finetune_fixtures import NER_SENTENCES, ner_rows, save_tiny_bert, tiny_params
from tasks.common.stats import summarize
from tasks.config.model.finetune import FinetuneParams
from tasks.finetune import cls as finetune_cls
from tasks.finetune import kept_doc_ids
from tasks.finetune import ner as finetune_ner
from tasks.finetune.arms.model import build_model, masked_mean, optimizer_for
from tasks.finetune.arms.training import length_grouped_batches


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory):
    return save_tiny_bert(tmp_path_factory.mktemp("ft_model") / "pretrained")


def _batch(ids_lists, pad_id=0):
    return finetune_cls.collate([{"input_ids": ids, "label": 0} for ids in ids_lists], pad_id)


def test_frozen_encoder_is_unchanged_after_an_optimizer_step(tiny_bert):
    model = build_model("pretrained", tiny_bert, "cls-pool", 3, "frozen", 0.1, seed=0)
    before = {k: v.clone() for k, v in model.encoder.state_dict().items()}
    head_before = model.head.weight.clone()
    optimizer = optimizer_for(model, lr_encoder=1e-2, lr_head=1e-2, weight_decay=0.1)
    model.train()
    batch = _batch([[2, 5, 6, 7, 3], [2, 8, 3]])
    loss = torch.nn.functional.cross_entropy(model(batch["input_ids"], batch["attention_mask"]), torch.tensor([0, 2]))
    loss.backward()
    optimizer.step()
    assert not model.encoder.training  # no dropout in a frozen encoder, even in train()
    assert all(torch.equal(before[k], v) for k, v in model.encoder.state_dict().items())
    assert not torch.equal(head_before, model.head.weight)
    assert all(p.grad is None for p in model.encoder.parameters())


def test_full_mode_updates_the_encoder(tiny_bert):
    model = build_model("pretrained", tiny_bert, "cls-pool", 3, "full", 0.0, seed=0)
    before = model.encoder.embeddings.word_embeddings.weight.clone()
    optimizer = optimizer_for(model, lr_encoder=1e-2, lr_head=1e-2, weight_decay=0.0)
    batch = _batch([[2, 5, 6, 7, 3]])
    torch.nn.functional.cross_entropy(model(batch["input_ids"], batch["attention_mask"]), torch.tensor([1])).backward()
    optimizer.step()
    assert not torch.equal(before, model.encoder.embeddings.word_embeddings.weight)


def test_masked_mean_vector_is_the_same_alone_and_padded_next_to_a_longer_text(tiny_bert):
    model = build_model("pretrained", tiny_bert, "mean-pool", 2, "full", 0.1, seed=0).eval()
    short, longer = [2, 5, 6, 3], [2, 9, 10, 11, 12, 13, 14, 15, 3]
    with torch.no_grad():
        alone = model.features(**{k: v for k, v in _batch([short]).items() if k != "labels"})[0]
        batch = _batch([short, longer], pad_id=7)  # a non-[PAD] id: padding must be masked, not just zero
        padded = model.features(batch["input_ids"], batch["attention_mask"])[0]
        # the hand formula on the unpadded hidden states
        hidden = model.encoder(input_ids=torch.tensor([short])).last_hidden_state[0]
    assert torch.equal(padded, alone)  # identical, not merely close: padded keys get exactly zero attention weight
    torch.testing.assert_close(alone, hidden.mean(dim=0), rtol=0, atol=1e-6)


def test_masked_mean_by_hand():
    hidden = torch.tensor([[[1.0, 2.0], [3.0, 4.0], [100.0, 100.0]]])
    assert masked_mean(hidden, torch.tensor([[1, 1, 0]])).tolist() == [[2.0, 3.0]]


def test_different_seeds_give_different_heads_and_the_same_seed_the_same(tiny_bert):
    heads = {s: build_model("pretrained", tiny_bert, "cls-pool", 3, "full", 0.1, seed=s).head.weight for s in (1, 2)}
    again = build_model("pretrained", tiny_bert, "cls-pool", 3, "full", 0.1, seed=1).head.weight
    assert not torch.equal(heads[1], heads[2])
    assert torch.equal(heads[1], again)
    r1 = build_model("random", tiny_bert, "first", 3, "full", 0.1, seed=1).encoder.embeddings.word_embeddings.weight
    r2 = build_model("random", tiny_bert, "first", 3, "full", 0.1, seed=2).encoder.embeddings.word_embeddings.weight
    pre = build_model("pretrained", tiny_bert, "first", 3, "full", 0.1, seed=1).encoder.embeddings.word_embeddings
    assert not torch.equal(r1, r2) and not torch.equal(r1, pre.weight)


def test_seqeval_strict_scores_an_entity_starting_with_I_as_a_miss():
    gold, pred = [["B-LOC", "I-LOC"]], [["I-LOC", "I-LOC"]]
    scores = finetune_ner.score([{"doc_id": "d", "gold": gold[0], "pred": pred[0]}], ["O", "B-LOC", "I-LOC"])
    assert scores["entity_f1"] == 0.0 and scores["entity_recall"] == 0.0
    assert scores["span_errors"] == {
        "exact": 0,
        "type": 0,
        "boundary": 0,
        "boundary_and_type": 0,
        "missed": 1,
        "spurious": 0,
    }
    assert seqeval_f1(gold, pred) == 1.0  # the lenient default (conlleval) mode would have counted a hit


def test_span_error_table_by_hand():
    gold = [["B-PER", "I-PER", "O", "B-LOC", "O", "B-ORG", "O", "B-LOC", "I-LOC", "O", "B-PER", "O"]]
    pred = [["B-PER", "I-PER", "O", "B-ORG", "O", "B-ORG", "I-ORG", "O", "B-PER", "O", "O", "B-LOC"]]
    # PER 0-2 exact; LOC 3 -> ORG 3 type; ORG 5 -> ORG 5-7 boundary; LOC 7-9 -> PER 8 boundary_and_type;
    # PER 10 missed; LOC 11 spurious
    assert finetune_ner.span_errors(gold, pred) == {
        "exact": 1,
        "type": 1,
        "boundary": 1,
        "boundary_and_type": 1,
        "missed": 1,
        "spurious": 1,
    }


def test_entity_f1_is_computed_on_words_not_subwords(tiny_bert):
    tok = BertTokenizerFast.from_pretrained(tiny_bert)
    rows, names = ner_rows(tok, 2, capacity=6, prefix="d")
    exs = finetune_ner.examples(rows, None, "all")  # ner ignores the task params
    label_id = {n: i for i, n in enumerate(names)}
    assert len({ex["doc_id"] for ex in exs}) < len(exs)  # sentence 2 spans several windows
    # right on every word's first subword, wrong ("B-PER") on every continuation subword and special token
    predicted = []
    for ex in exs:
        preds, previous = [], None
        for w in ex["word_ids"]:
            is_first = w != -1 and w != previous
            preds.append((label_id[ex["word_tags"][w]], 0.9) if is_first else (label_id["B-PER"], 0.4))
            previous = w
        predicted.append(preds)
    assert any(ex["word_ids"].count(w) > 1 for ex in exs for w in set(ex["word_ids"]) if w != -1)
    recs = finetune_ner.records(exs, predicted, names)
    assert [r["gold"] for r in recs] == [NER_SENTENCES[0][1], NER_SENTENCES[1][1]]
    assert [r["pred"] for r in recs] == [r["gold"] for r in recs]
    assert [r["probs"] for r in recs] == [[0.9] * len(r["gold"]) for r in recs]  # each from its first subword
    scores = finetune_ner.score(recs, names)
    assert scores["entity_f1"] == 1.0
    assert scores["span_errors"]["exact"] == 5 and scores["span_errors"]["spurious"] == 0


def test_cls_scores_by_hand():
    recs = [
        {"doc_id": str(i), "gold": g, "pred": p, "truncated": t}
        for i, (g, p, t) in enumerate([("a", "a", True), ("a", "b", True), ("b", "b", False), ("c", "b", False)])
    ]
    s = finetune_cls.score(recs, ["a", "b", "c"])
    # F1: a = 2*1*0.5/1.5 = 2/3; b = 2*(1/3)*1/(4/3) = 1/2; c = 0
    assert s["accuracy"] == 0.5
    assert s["per_class_f1"] == pytest.approx({"a": 2 / 3, "b": 0.5, "c": 0.0})
    assert s["macro_f1"] == pytest.approx((2 / 3 + 0.5) / 3)
    assert s["confusion_matrix"]["matrix"] == [[1, 1, 0], [0, 1, 0], [0, 1, 0]]
    assert s["accuracy_by_length"] == {
        "truncated": {"docs": 2, "accuracy": 0.5},
        "not_truncated": {"docs": 2, "accuracy": 0.5},
    }


def test_cls_examples_cut_head_or_head_tail_keep_specials_and_measure_what_was_seen():
    row = {"doc_id": "x", "input_ids": [2, 10, 11, 12, 13, 14, 15, 3], "label": 1, "n_tokens_full": 8}

    def cut(max_len, truncation, head_tokens=0):
        tcfg = SimpleNamespace(max_seq_len_tokens=max_len, truncation=truncation, head_tokens=head_tokens)
        return finetune_cls.examples([row], tcfg, "cls-pool")[0]

    # 6 content tokens; a 5-token limit keeps 3 of them
    head = cut(5, "head")
    assert head["input_ids"] == [2, 10, 11, 12, 3] and head["truncated"] is True
    assert head["seen_fraction"] == pytest.approx(3 / 6)
    # head_tail with 1 head token: the first content token and the last two (Sun et al. 2019)
    assert cut(5, "head_tail", 1)["input_ids"] == [2, 10, 14, 15, 3]
    assert cut(5, "head_tail", 3)["input_ids"] == [2, 10, 11, 12, 3]  # all head, no tail
    assert cut(5, "head_tail", 0)["input_ids"] == [2, 13, 14, 15, 3]  # all tail
    whole = cut(8, "head_tail", 1)
    assert whole["input_ids"] == row["input_ids"] and whole["truncated"] is False and whole["seen_fraction"] == 1.0


def test_summarize_is_the_student_t_interval():
    out = summarize([0.8, 0.9, 1.0], [1, 2, 3], 0.95)
    # mean 0.9, sample std 0.1, t_{0.975, 2} = 4.302652729749464 (t table), half-width = 4.3027 * 0.1 / sqrt(3)
    half = 4.302652729749464 * 0.1 / 3**0.5
    assert out["mean"] == pytest.approx(0.9) and out["std"] == pytest.approx(0.1) and out["n"] == 3
    assert (out["ci95_low"], out["ci95_high"]) == pytest.approx((0.9 - half, 0.9 + half))
    assert out["per_seed"] == [0.8, 0.9, 1.0] and out["seeds"] == [1, 2, 3]
    assert summarize([0.7], [5], 0.95)["ci95_low"] is None
    # two seeds near the top: the t-interval reaches past 1 (0.99 + 12.706 * 0.0141 / sqrt 2), the clip stops it
    wide = summarize([0.98, 1.0], [1, 2], 0.95)
    assert wide["ci95_high"] > 1.0 and summarize([0.98, 1.0], [1, 2], 0.95, bounds=(0.0, 1.0))["ci95_high"] == 1.0
    with pytest.raises(ValueError, match="one value per seed"):
        summarize([0.1], [1, 2], 0.95)


def test_doc_sample_is_a_hash_rank_stable_under_supersets():
    ids = [f"doc{i}" for i in range(50)]
    small = kept_doc_ids(ids[:30], 5, data_seed=0)
    assert len(small) == 5 and small == kept_doc_ids(list(reversed(ids[:30])), 5, data_seed=0)
    assert kept_doc_ids(ids, 10, 0) & set(ids[:30]) <= kept_doc_ids(ids[:30], 10, 0)
    assert kept_doc_ids(ids, 5, 1) != kept_doc_ids(ids, 5, 0)
    assert kept_doc_ids(ids, None, 0) == set(ids)


@pytest.mark.parametrize(
    ("configs", "match"),
    [
        (["pretrained/full"], "variant/mode/head"),
        (["pretrained/full/first"], "head 'first'"),
        (
            ["pretrained/full/cls-pool", "pretrained/full/cls-pool"],
            r"recipes.cls.configs must be unique; repeated: \[.pretrained/full/cls-pool.\]",
        ),
        (["bert/full/cls-pool"], "variant"),
    ],
)
def test_bad_configs_fail_at_load_time(configs, match):
    good = tiny_params(["pretrained/full/cls-pool"], ["pretrained/full/first"], [1]).model_dump(mode="json")
    good["recipes"]["cls"]["configs"] = configs
    with pytest.raises(ValueError, match=match):
        FinetuneParams.model_validate(good)


def test_predictions_file_is_sorted_jsonl_with_probs_rounded_to_6_decimals(tmp_path):
    from tasks.finetune import write_predictions

    path = write_predictions(
        tmp_path / "p.jsonl",
        [
            {"doc_id": "b", "gold": "x", "pred": "y", "probs": [0.1234564, 0.8765436], "truncated": True},
            {"doc_id": "a", "gold": "x", "pred": "x", "probs": [2 / 3, 1 / 3], "truncated": False},
        ],
    )
    assert [json.loads(line) for line in path.read_text().splitlines()] == [
        {"doc_id": "a", "gold": "x", "pred": "x", "probs": [0.666667, 0.333333]},
        {"doc_id": "b", "gold": "x", "pred": "y", "probs": [0.123456, 0.876544]},
    ]


def test_cls_probs_are_the_softmax_of_the_logits_and_their_argmax_is_pred():
    logits = torch.tensor([[2.0, 0.0, -1.0], [0.5, 1.5, 1.0]])
    exs = [{"doc_id": d, "label": 0, "truncated": False, "seen_fraction": 1.0} for d in ("a", "b")]
    recs = finetune_cls.records(exs, finetune_cls.decode(logits, exs), ["x", "y", "z"])
    for rec, row in zip(recs, logits.tolist(), strict=True):
        by_hand = [math.exp(v) / sum(math.exp(u) for u in row) for v in row]
        assert rec["probs"] == pytest.approx(by_hand, abs=1e-6) and sum(rec["probs"]) == pytest.approx(1.0)
        assert rec["pred"] == "xyz"[max(range(3), key=lambda k: rec["probs"][k])]
    assert [r["pred"] for r in recs] == ["x", "y"]


def test_ner_word_prob_is_the_max_softmax_at_its_first_subword_in_its_max_context_window():
    # 3 labels; window 0 holds words 0-2, window 1 words 1-3 (-1: [CLS]/[SEP]); word 1 has two subwords
    w0 = {
        "doc_id": "s",
        "window_index": 0,
        "input_ids": [0] * 6,
        "word_ids": [-1, 0, 1, 1, 2, -1],
        "word_tags": ["O", "O", "O", "O"],
    }
    w1 = {**w0, "window_index": 1, "input_ids": [0] * 5, "word_ids": [-1, 1, 2, 3, -1]}
    logits = torch.tensor(
        [
            [[0, 0, 0], [3.0, 1, 0], [0, 2.0, 0], [0, 0, 9.0], [0, 0, 1.0], [0, 0, 0]],
            [[0, 0, 0], [5.0, 0, 0], [0, 0, 4.0], [1.0, 2.0, 0], [0, 0, 0], [7, 7, 7]],  # last position: padding
        ]
    )
    recs = finetune_ner.records([w0, w1], finetune_ner.decode(logits, [w0, w1]), ["O", "B-X", "I-X"])

    def top(row):  # (argmax, max softmax) of one position, by hand
        z = [math.exp(v) for v in row]
        return max(range(3), key=lambda k: z[k]), max(z) / sum(z)

    # max context = min(left, right) context in subwords: word 1 scores 1 in window 0 (0 in window 1), word 2
    # scores 0 in window 0 and 1 in window 1; words 0 and 3 are in one window each
    picks = [
        top(logits[0, 1].tolist()),
        top(logits[0, 2].tolist()),
        top(logits[1, 2].tolist()),
        top(logits[1, 3].tolist()),
    ]
    assert recs[0]["pred"] == [["O", "B-X", "I-X"][k] for k, _ in picks] == ["O", "B-X", "I-X", "B-X"]
    assert recs[0]["probs"] == pytest.approx([p for _, p in picks], abs=1e-6)
    assert recs[0]["probs"][1] != pytest.approx(top(logits[0, 3].tolist())[1])  # not the word's second subword


def test_length_grouped_batches_cover_every_example_once_with_little_padding():
    lengths = [5, 50, 6, 51, 7, 52, 8, 53, 9, 54, 10, 55]
    batches = length_grouped_batches(lengths, 2, 6, torch.Generator().manual_seed(0))
    assert sorted(i for b in batches for i in b) == list(range(12))
    assert all(max(lengths[i] for i in b) - min(lengths[i] for i in b) <= 1 for b in batches)  # one group: sorted
    plain = length_grouped_batches(lengths, 5, 1, torch.Generator().manual_seed(0))
    assert sorted(len(b) for b in plain) == [2, 5, 5] and sorted(i for b in plain for i in b) == list(range(12))
