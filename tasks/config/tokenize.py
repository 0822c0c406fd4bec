"""The ``tokenize:`` section of params.yaml."""

from tasks.config.base import StrictModel


class TokenizeParams(StrictModel):
    """Params of the ``tokenize`` stage."""
