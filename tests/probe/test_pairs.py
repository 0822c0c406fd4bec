"""Minimal pairs: pseudo-log-likelihood against a hand computation, forced preferences, the random-init control
on the shipped set, the unigram baseline's counts and the shipped set's shape."""

from __future__ import annotations

import json
import math
from pathlib import Path

import datasets
import numpy as np
import pytest
import torch
from scipy.stats import binomtest
from transformers import AutoTokenizer, BertConfig, BertForMaskedLM

from tasks.common.models.encoders import reference_model_dir
from tasks.probe import pairs

REPO = Path(__file__).resolve().parents[2]
CPU = torch.device("cpu")
SHIPPED = REPO / "tasks" / "probe" / "minimal_pairs.jsonl"
PHENOMENA = {"agreement_attractor", "determiner_noun", "argument_structure", "word_sense", "negation"}


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(reference_model_dir())


class FixedLogits(torch.nn.Module):
    """An MLM whose logits are ``weights`` at every position, whatever the input: log P(w) = log_softmax(weights)[w].

    Shaped like an HF masked LM for ``pairs.mlm_parts``: ``base_model`` gives ``(batch, seq_len, 1)`` zeros and
    the head ``cls`` maps each position to ``weights``."""

    def __init__(self, weights: torch.Tensor) -> None:
        super().__init__()
        self.base_model = ZeroEncoder()
        self.cls = ConstantHead(weights)


class ZeroEncoder(torch.nn.Module):
    def forward(self, input_ids, attention_mask):
        return (torch.zeros(*input_ids.shape, 1, device=input_ids.device),)


class ConstantHead(torch.nn.Module):
    def __init__(self, weights: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("weights", weights)

    def forward(self, hidden):
        return self.weights.expand(*hidden.shape[:-1], -1)


def tiny_mlm(vocab_size: int, seed: int = 0) -> BertForMaskedLM:
    torch.manual_seed(seed)
    config = BertConfig(
        vocab_size=vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    return BertForMaskedLM(config).eval()


def test_pll_equals_masking_one_token_at_a_time(tokenizer):
    model = tiny_mlm(len(tokenizer))
    sentences = ["The ship entered the port.", "A robin is a bird.", "Keys open doors quickly today."]
    enc = tokenizer(sentences, return_special_tokens_mask=True)
    got = pairs.pseudo_log_likelihoods(
        model,
        enc["input_ids"],
        enc["special_tokens_mask"],
        tokenizer.mask_token_id,
        tokenizer.pad_token_id,
        batch_size=4,
        device=CPU,
    )
    for i, ids in enumerate(enc["input_ids"]):
        expected = 0.0
        for pos in range(1, len(ids) - 1):  # [CLS] ... [SEP]: every content token, one at a time, no padding
            masked = torch.tensor([ids[:pos] + [tokenizer.mask_token_id] + ids[pos + 1 :]])
            with torch.no_grad():
                logits = model(input_ids=masked).logits[0, pos]
            expected += torch.log_softmax(logits.double(), dim=-1)[ids[pos]].item()
        assert got[i] == pytest.approx(expected, abs=1e-4)


def test_pll_of_a_fixed_distribution_is_a_sum_of_its_log_probs():
    weights = torch.tensor([0.0, 0.0, 1.0, 2.0, 3.0])  # ids 0 (pad), 1 (mask) never scored
    model = FixedLogits(weights)
    log_p = [w - math.log(sum(math.exp(x) for x in weights.tolist())) for w in weights.tolist()]  # by hand
    ids = [[0, 2, 3, 0], [0, 4, 0]]  # specials at both ends (id 0 doubles as [CLS]/[SEP] here)
    special = [[1, 0, 0, 1], [1, 0, 1]]
    got = pairs.pseudo_log_likelihoods(model, ids, special, mask_id=1, pad_id=0, batch_size=2, device=CPU)
    assert got.tolist() == pytest.approx([log_p[2] + log_p[3], log_p[4]])


def forced_scorer(tokenizer, pair: pairs.Pair, prefer_good: bool) -> pairs.Scorer:
    """A fixed-logit MLM that puts +1 on the tokens only the pair's good sentence has and -1 on those only its
    bad one has (or the reverse)."""
    good_ids, bad_ids = (set(tokenizer(getattr(pair, side))["input_ids"]) for side in ("good", "bad"))
    weights = torch.zeros(len(tokenizer))
    sign = 1.0 if prefer_good else -1.0
    weights[sorted(good_ids - bad_ids)] = sign
    weights[sorted(bad_ids - good_ids)] = -sign
    return pairs.Scorer(tokenizer, FixedLogits(weights), None, CPU)


def outcome(scorer: pairs.Scorer, prs: list[pairs.Pair]) -> dict:
    good, bad = (scorer.score([getattr(p, side) for p in prs], 64, side) for side in ("good", "bad"))
    mismatched = [len(g) != len(b) for g, b in zip(good.tokens, bad.tokens)]
    return pairs.accuracy_table(prs, good.pll > bad.pll, good.pll == bad.pll, mismatched)


def test_forced_preferences_score_100_and_0_percent(tokenizer):
    prs = pairs.read_pairs(SHIPPED, 20)
    for flag, expected in ((True, 1), (False, 0)):
        tables = [outcome(forced_scorer(tokenizer, p, flag), [p]) for p in prs]
        assert [t["passed"] for t in tables] == [[expected]] * len(prs)
        assert sum(t["all"]["ties"] for t in tables) == 0


def test_random_init_control_is_at_chance_on_the_shipped_set(tokenizer):
    prs = pairs.read_pairs(SHIPPED, 20)
    table = outcome(pairs.Scorer(tokenizer, tiny_mlm(len(tokenizer), seed=3), None, CPU), prs)
    ci = binomtest(table["all"]["passed"], table["all"]["pairs"]).proportion_ci(0.95, method="exact")
    assert ci.low <= 0.5 <= ci.high
    assert table["all"]["length_mismatched"] == 0


def test_shipped_set_has_every_phenomenon_and_one_word_differences():
    prs = pairs.read_pairs(SHIPPED, 20)
    assert {p.phenomenon for p in prs} == PHENOMENA
    sentences = [s for p in prs for s in (p.good, p.bad)]
    assert len(set(sentences)) == len(sentences)
    for p in prs:
        good, bad = p.good.split(), p.bad.split()
        assert len(good) == len(bad) and sum(g != b for g, b in zip(good, bad)) == 1, p.line


def test_unigram_log_probs_are_add_one_smoothed_counts(tmp_path):
    folder = tmp_path / "train"
    datasets.Dataset.from_dict(
        {"input_ids": [[0, 5, 5, 6, 1], [0, 6, 5, 1, 2]], "special_tokens_mask": [[1, 0, 0, 0, 1], [1, 0, 0, 1, 1]]}
    ).save_to_disk(folder)
    got = pairs.unigram_log_probs(folder, vocab_size=7)
    counts = np.array([1, 1, 1, 1, 1, 1 + 3, 1 + 2], dtype=float)  # specials are not counted
    assert got == pytest.approx(np.log(counts / counts.sum()))
    with pytest.raises(FileNotFoundError, match="run the tokenize stage"):
        pairs.unigram_log_probs(tmp_path / "absent", 7)


def test_bad_pair_files_name_the_line(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps({"phenomenon": "x", "good": "A b.", "bad": "A b."}) + "\n")
    with pytest.raises(ValueError, match=r"p\.jsonl:1: good and bad are the same"):
        pairs.read_pairs(path, 1)
    path.write_text(json.dumps({"phenomenon": "x", "good": "A b."}) + "\n")
    with pytest.raises(ValueError, match=r"p\.jsonl:1: expected exactly the keys"):
        pairs.read_pairs(path, 1)
    path.write_text(json.dumps({"phenomenon": "x", "good": "A b.", "bad": "A c."}) + "\n")
    with pytest.raises(ValueError, match="phenomenon 'x' has 1 pairs"):
        pairs.read_pairs(path, 2)
