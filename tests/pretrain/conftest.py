"""Fixtures of the pretrain tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from pretrain_fixtures import build_corpus


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """A tokenized corpus (blocks and tokenizer) built once per test module (``pretrain_fixtures.build_corpus``)."""
    return build_corpus(tmp_path_factory)
