"""The ``export:`` section of params.yaml."""

from __future__ import annotations

from pydantic import Field

from tasks.config.base import StrictModel
from tasks.config.tasks import Tasks


class ExportParams(StrictModel):
    """Params of the ``export`` stage: the kept model of each task as a standard Hugging Face folder, re-scored
    as exported in a fresh process from the raw test text.

    ``tasks`` is copied from the tasks section, ``ner_window_tokens`` and ``ner_window_overlap_tokens`` from
    tokenize's ``ner_max_seq_len_tokens`` and ``ner_window_overlap_tokens`` (the windows the tagger was
    trained and tested on), so an export reads its input as the evaluated model did."""

    probability_tolerance: float = Field(
        gt=0,
        le=0.1,
        description="largest |probability exported - probability evaluated| that still agrees (the "
        "prediction files keep 6 decimals; a batch of other padding moves the last float bits)",
    )
    threads: int = Field(ge=1, description="torch threads of the re-scoring process (the deployment timing)")
    batch_size: int = Field(ge=1, description="classification: also time the test docs at this many per batch")
    log_model: bool = Field(description="log the export with MLflow's transformers flavour under the arm's run")
    tasks: Tasks = Field(default_factory=dict, description="copied from the tasks section")
    ner_window_tokens: int | None = Field(default=None, description="copied from tokenize.ner_max_seq_len_tokens")
    ner_window_overlap_tokens: int | None = Field(
        default=None, description="copied from tokenize.ner_window_overlap_tokens"
    )
