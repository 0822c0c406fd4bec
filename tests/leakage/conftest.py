"""Fixtures of the leakage tests."""

from __future__ import annotations

import shutil

import pytest


@pytest.fixture(scope="module")
def tiny_encoder(tmp_path_factory):
    """A 2-layer random BertModel (hidden 32) with MiniLM's tokenizer, saved in a temporary folder."""
    import torch
    from transformers import BertConfig, BertModel

    from tasks.common.models.encoders import reference_model_dir

    folder = tmp_path_factory.mktemp("tiny-encoder")
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        if (reference_model_dir() / name).exists():
            shutil.copy(reference_model_dir() / name, folder / name)
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=30522,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=512,
    )
    BertModel(config, add_pooling_layer=False).save_pretrained(folder)
    return folder
