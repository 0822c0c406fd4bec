"""The ``ingest:`` section of params.yaml."""

from tasks.config.base import StrictModel


class IngestParams(StrictModel):
    """Params of the ``ingest`` stage."""
