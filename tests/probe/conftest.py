"""Fixtures of the probe tests: ``tiny_root``, a temporary root with a tiny pretrained model and its pretraining
blocks, shared by test_probe.py, test_probe_control.py and test_probe_placement.py (once per test module)."""

from __future__ import annotations

import json
from pathlib import Path

import datasets
import pytest
import torch
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers
from transformers import BertConfig, BertForMaskedLM, PreTrainedTokenizerFast

from tasks.common.models.encoders import write_pretraining_record

SHIPPED = Path(__file__).resolve().parents[2] / "tasks" / "probe" / "senses.jsonl"
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def save_tiny_pretrained(folder: Path) -> None:
    """A 2-layer BertForMaskedLM plus a WordPiece tokenizer trained on the shipped probe sentences."""
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    texts = [json.loads(line)["sentence"] for line in SHIPPED.read_text(encoding="utf-8").splitlines()]
    tok.train_from_iterator(texts, trainers.WordPieceTrainer(vocab_size=400, special_tokens=SPECIALS))
    tok.post_processor = processors.BertProcessing(
        ("[SEP]", tok.token_to_id("[SEP]")), ("[CLS]", tok.token_to_id("[CLS]"))
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="[PAD]",
        unk_token="[UNK]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
    )
    config = BertConfig(
        vocab_size=len(fast),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    torch.manual_seed(1)
    BertForMaskedLM(config).save_pretrained(folder)
    fast.save_pretrained(folder)
    write_pretraining_record(folder, "pretrained", "scratch", "clozeline")


@pytest.fixture(scope="module")
def tiny_root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("probe")
    save_tiny_pretrained(root / "models" / "pretrained")
    save_tiny_blocks(root / "data" / "tokenize" / "pretrain" / "clozeline" / "train", root / "models" / "pretrained")
    return root


def save_tiny_blocks(folder: Path, model_folder: Path) -> None:
    """Pretraining blocks (the unigram variant's counts): the probe sentences in the tiny tokenizer."""
    tok = PreTrainedTokenizerFast.from_pretrained(model_folder)
    texts = [json.loads(line)["sentence"] for line in SHIPPED.read_text(encoding="utf-8").splitlines()]
    enc = tok(texts, return_special_tokens_mask=True)
    datasets.Dataset.from_dict({k: enc[k] for k in ("input_ids", "special_tokens_mask")}).save_to_disk(folder)
