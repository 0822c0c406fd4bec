"""The ``ingest:`` section of params.yaml: which sources to read and how.

Each source is one entry of ``ingest.sources``; its ``kind`` selects the model below (a pydantic
discriminated union), so a field that does not apply to a kind is an unknown key and fails at load time.
Every field is required (write ``null`` where a field name does not apply): no hidden defaults.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from tasks.config.base import StrictModel, require_unique

#: A source name becomes a file name (``data/ingest/<name>.parquet``) and the prefix of every ``doc_id``.
SourceName = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", max_length=64)]
Role = Literal["pretrain", "task"]
MaxDocs = Annotated[int | None, Field(ge=1, description="keep at most this many docs (deterministic sample); null = all")]


class _SourceBase(StrictModel):
    name: SourceName
    role: Role = Field(description="pretrain: MLM text; task: a labelled fine-tuning / evaluation set")
    max_docs: MaxDocs


class BuiltinSource(_SourceBase):
    """A real corpus shipped inside an installed package."""

    kind: Literal["builtin"]
    corpus: Literal["bbc_news", "wnut16", "wikipedia_sample"]


class _FileSource(_SourceBase):
    path: str = Field(min_length=1, description="a file, a folder or a glob, relative to the repo root")


class _RecordFields(_FileSource):
    """Field names of a record-shaped source; null where the data has no such field."""

    text_field: str | None
    label_field: str | None
    group_field: str | None = Field(description="records sharing a group never straddle splits")
    id_field: str | None = Field(description="the source's own unique id; null = file + line/row number")


class _TokenFields(_RecordFields):
    tokens_field: str | None = Field(description="list[str] of words; text = words joined by a space")
    tags_field: str | None = Field(description="list[str] of IOB2 tags, one per word")

    @model_validator(mode="after")
    def _fields_make_sense(self):
        if (self.text_field is None) == (self.tokens_field is None):
            raise ValueError("set exactly one of text_field and tokens_field (token data: text = words joined by a space)")
        if (self.tokens_field is None) != (self.tags_field is None):
            raise ValueError("tokens_field and tags_field go together: set both or neither")
        return self


class JsonlSource(_TokenFields):
    """One JSON object per line; shards matched by a glob load as the union of their fields."""

    kind: Literal["jsonl"]


class ParquetSource(_TokenFields):
    """Parquet file(s); shards whose schemas differ only by an optional column load as the union."""

    kind: Literal["parquet"]


class HfDiskSource(_TokenFields):
    """A ``datasets`` ``save_to_disk`` folder (a Dataset or a DatasetDict; ClassLabel ids become names)."""

    kind: Literal["hf_disk"]


class CsvSource(_RecordFields):
    """CSV with a header row (RFC 4180 quoting)."""

    kind: Literal["csv"]

    @model_validator(mode="after")
    def _needs_text(self):
        if self.text_field is None:
            raise ValueError("text_field is required for a csv source")
        return self


class TextSource(_FileSource):
    """Plain UTF-8 text: one document per file, or one per blank-line separated block."""

    kind: Literal["text"]
    unit: Literal["file", "block"]
    label_from_parent_dir: bool = Field(description="label = name of the folder holding the file")


class ConllSource(_FileSource):
    """Token-per-line IOB2 (CoNLL); a blank line ends a sentence; ``#`` lines are sentence metadata."""

    kind: Literal["conll"]
    token_column: int = Field(ge=0, description="0-based column of the word")
    tag_column: int = Field(ge=0, description="0-based column of the IOB2 tag")
    separator: Literal["tab", "whitespace"]

    @model_validator(mode="after")
    def _distinct_columns(self):
        if self.token_column == self.tag_column:
            raise ValueError("token_column and tag_column must differ")
        return self


SourceSpec = Annotated[
    BuiltinSource | JsonlSource | CsvSource | ParquetSource | TextSource | ConllSource | HfDiskSource,
    Field(discriminator="kind"),
]


class IngestParams(StrictModel):
    """Params of the ``ingest`` stage: the list of sources, each written to ``data/ingest/<name>.parquet``."""

    sources: list[SourceSpec] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique_names(self):
        require_unique([source.name for source in self.sources], "source names")
        return self
