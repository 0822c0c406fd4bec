"""The ``dedup:`` section of params.yaml."""

from tasks.config.base import StrictModel


class DedupParams(StrictModel):
    """Params of the ``dedup`` stage."""
