"""The ``tokenizer:`` section of params.yaml."""

from tasks.config.base import StrictModel


class TokenizerParams(StrictModel):
    """Params of the ``tokenizer`` stage."""
