"""The ``probe:`` section of params.yaml."""

from tasks.config.base import StrictModel


class ProbeParams(StrictModel):
    """Params of the ``probe`` stage."""
