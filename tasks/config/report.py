"""The ``report:`` section of params.yaml."""

from tasks.config.base import StrictModel


class ReportParams(StrictModel):
    """Params of the ``report`` stage."""
