"""The ``split:`` section of params.yaml."""

from tasks.config.base import StrictModel


class SplitParams(StrictModel):
    """Params of the ``split`` stage."""
