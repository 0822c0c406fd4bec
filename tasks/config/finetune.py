"""The ``finetune:`` section of params.yaml."""

from tasks.config.base import StrictModel


class FinetuneParams(StrictModel):
    """Params of the ``finetune`` stage."""
