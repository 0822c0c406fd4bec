"""The ``leakage:`` section of params.yaml."""

from tasks.config.base import StrictModel


class LeakageParams(StrictModel):
    """Params of the ``leakage`` stage."""
