"""The split stage's params as the repo ships them, with changes."""

from __future__ import annotations

from tasks.config import read_yaml
from tasks.config.corpus.split import SplitParams


def params(**changes) -> SplitParams:
    """The repo's ``split:`` params with ``changes`` applied (so tests exercise the shipped defaults)."""
    return SplitParams(**{**read_yaml("params.yaml")["split"], **changes})
