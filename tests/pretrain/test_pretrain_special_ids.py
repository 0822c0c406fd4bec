"""A model pretrained from scratch names its tokenizer's special tokens in its config: ModernBERT's defaults
(bos/cls 50281, eos/sep 50282, the ids of its own 50k vocabulary) lay outside our small vocabulary, so
transformers warned "cls_token_id must be None or an integer within the vocabulary" at every load of
``models/pretrained`` and its ``config.json`` named tokens that do not exist."""

from __future__ import annotations

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from pretrain_fixtures import make_cfg
from tasks.pretrain.init import Start, initial_model

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def tokenizer(words: int) -> PreTrainedTokenizerFast:
    """A WordPiece tokenizer of ``words`` + 5 tokens, the specials at ids 0-4 as the tokenizer stage writes them."""
    vocab = {tok: i for i, tok in enumerate(SPECIALS + [f"w{i}" for i in range(words)])}
    raw = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    raw.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(
        tokenizer_object=raw,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
    )


@pytest.mark.parametrize("architecture", ["modernbert", "bert", "roberta-prelayernorm"])
def test_a_fresh_model_names_the_tokenizers_special_ids(architecture, caplog):
    tok = tokenizer(60)
    cfg = make_cfg(architecture=architecture, max_position_embeddings=64)
    config = initial_model(cfg, Start(tok, "clozeline", None, "pretrained"), 32).config
    assert (config.pad_token_id, config.cls_token_id, config.sep_token_id) == (0, 2, 3)  # [PAD], [CLS], [SEP]
    assert (config.bos_token_id, config.eos_token_id) == (2, 3)  # BERT's convention: a text opens with [CLS]
    assert "within the vocabulary" not in caplog.text
