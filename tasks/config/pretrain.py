"""The ``pretrain:`` section of params.yaml."""

from tasks.config.base import StrictModel


class PretrainParams(StrictModel):
    """Params of the ``pretrain`` stage."""
