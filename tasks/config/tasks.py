"""The ``tasks:`` section of params.yaml: the fine-tuning tasks, by name.

``tasks`` maps a task name to its kind, its source and its headline metric; ``dvc.yaml`` runs
``finetune@<name>`` for each entry (a mapping, not a YAML list: DVC names the stages of a ``foreach`` over a
mapping by key, and over a list by index), the tokenize stage writes ``data/tokenize/<name>/``, and claims
name the task. The optimisation of a task is the ``finetune.recipes`` entry its ``recipe`` names, so two
tasks of one kind can share one recipe.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, Field, model_validator

from tasks.config.base import StrictModel

TaskKind = Literal["classification", "token_classification", "pair_classification"]
#: Names a task cannot take: another output already has them where a task's name goes (``data/tokenize/<name>``,
#: a key of ``metrics/tokenize.json`` or ``metrics/summary.json``), so the task would overwrite it silently.
RESERVED = {
    "pretrain": "data/tokenize/pretrain/ holds the MLM blocks; tokenize.json and summary.json its metrics",
    "max_seq_len_tokens": "a key of metrics/tokenize.json",
    "claims": "a key of metrics/summary.json",
    "verdicts": "a key of metrics/summary.json",
}


def _not_reserved(name: str) -> str:
    if name in RESERVED:
        raise ValueError(f"task name {name!r} is reserved ({RESERVED[name]}): choose another")
    return name


#: A task name becomes a DVC stage item, a folder and a file name (``metrics/finetune/<name>.json``).
TaskName = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]*$", max_length=64), AfterValidator(_not_reserved)]

#: Headline test metrics a task may report, per kind (without the ``test_`` prefix of the metrics files).
METRICS: dict[str, tuple[str, ...]] = {
    "classification": ("macro_f1", "accuracy"),
    "pair_classification": ("macro_f1", "accuracy"),
    "token_classification": ("entity_f1", "entity_precision", "entity_recall"),
}
#: The finetune module of each kind (``tasks/finetune/<module>.py``): a pair task is a classification of
#: ``[CLS] a [SEP] b [SEP]``.
MODULE = {"classification": "cls", "pair_classification": "cls", "token_classification": "ner"}


class TaskSpec(StrictModel):
    """One fine-tuning task: what it is, which ingest source holds it, and what it reports."""

    kind: TaskKind = Field(
        description="classification: a label per document; token_classification: IOB2 tags per word; "
        "pair_classification: a label per text pair (entailment, paraphrase), encoded [CLS] a [SEP] b [SEP]"
    )
    source: str = Field(min_length=1, description="ingest source (role: task) read from data/leakage/<source>.parquet")
    metric: str = Field(description="headline test metric: the per-seed figure, the seeds plot and the summary")
    recipe: str = Field(min_length=1, description="key of finetune.recipes: the arms, budget and optimisation")

    @model_validator(mode="after")
    def _metric_fits_kind(self) -> TaskSpec:
        if self.metric not in METRICS[self.kind]:
            raise ValueError(f"metric {self.metric!r} is not one of {METRICS[self.kind]} for kind {self.kind!r}")
        return self

    @property
    def module(self) -> str:
        """``cls`` or ``ner``: the tokenize and finetune code of this kind."""
        return MODULE[self.kind]

    @property
    def headline(self) -> str:
        """The metric's key in ``metrics/finetune/<task>.json`` (``test_<metric>``)."""
        return f"test_{self.metric}"


Tasks = dict[TaskName, TaskSpec]
