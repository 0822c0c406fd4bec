"""The ``ingest:`` section of params.yaml: which sources to read and how.

Each source is one entry of ``ingest.sources``; its ``kind`` selects the model below (a pydantic
discriminated union), so a field that does not apply to a kind is an unknown key and fails at load time.
Required: ``name``, ``kind``, ``role``, ``path`` (file kinds), ``corpus`` (builtin), ``text_field`` (csv),
``tag_column`` (conll), ``record_separator`` (text with ``unit: record``), and one of ``text_field`` /
``tokens_field`` (jsonl, parquet, hf_disk). Every other field may be omitted; its default is given below
(``None`` = the data has no such field). The shipped params.yaml still writes every key it uses.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Self

from pydantic import AfterValidator, Field, model_validator

from tasks.config.base import StrictModel, require_unique

#: Names a source cannot take: the leakage stage writes ``data/leakage/<source>.parquet`` beside these files of
#: its own, which the source's rows would overwrite (or be overwritten by) silently.
RESERVED = {
    "table": "data/leakage/table.parquet is the audit's match table",
    "lineage": "data/leakage/lineage.parquet is the lineage audit's match table",
}


def _not_reserved(name: str) -> str:
    if name in RESERVED:
        raise ValueError(f"source name {name!r} is reserved ({RESERVED[name]}): choose another")
    return name


#: A source name becomes a folder name (``data/ingest/<name>/``) and the prefix of every ``doc_id``.
SourceName = Annotated[
    str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", max_length=64), AfterValidator(_not_reserved)
]
Role = Literal["pretrain", "task"]
MaxDocs = Annotated[
    int | None, Field(ge=1, description="keep at most this many docs (deterministic sample); null = all")
]
Include = Annotated[str, Field(min_length=1, description="glob a found file's path must match (PurePath.match)")]
Column = Annotated[int, Field(ge=0, description="0-based column index")]
#: The sources whose text a stage trains on: ``all`` (every source with ``role: pretrain``, in ``ingest.sources``
#: order, less the stage's ``exclude_sources``; replaced by that list when params.yaml loads: ``resolve_pretrain``),
#: or a list of names (a task source there lends its train split).
PretrainSources = Literal["all"] | list[SourceName]


class _SourceBase(StrictModel):
    name: SourceName
    role: Role = Field(description="pretrain: MLM text; task: a labelled fine-tuning / evaluation set")
    max_docs: MaxDocs = None


class BuiltinSource(_SourceBase):
    """A real corpus shipped inside an installed package."""

    kind: Literal["builtin"]
    corpus: Literal["bbc_news", "wnut16", "wikipedia_sample"]


class _PathSource(_SourceBase):
    path: str = Field(min_length=1, description="a file, a folder or a glob; relative to the repo root or absolute")


class _FilesSource(_PathSource):
    """A source read file by file: ``path`` names one file, or a folder / glob searched for files."""

    include: Include = Field("*", description="files found in a folder or by a glob are read only if they match")


class _RecordFields(StrictModel):
    """Field names of a record-shaped source; None where the data has no such field."""

    text_field: str | None = None
    label_field: str | None = None
    group_field: str | None = Field(None, description="records sharing a group never straddle splits")
    id_field: str | None = Field(None, description="the source's own unique id; None = file + line/row number")
    text_pair_field: str | None = Field(
        None,
        description="second text of a pair (pair_classification tasks): the row's text is the pair, a blank "
        "line apart, so dedup and leakage match both texts; meta.text_pair keeps [text, text_pair]",
    )
    missing_label: Literal["error", "drop"] = Field(
        "error", description="a record whose label is null, empty or NaN: raise naming file and line, or drop it"
    )


class _TokenFields(_RecordFields):
    tokens_field: str | None = Field(None, description="list[str] of words; text = words joined by a space")
    tags_field: str | None = Field(None, description="list[str] of IOB2 tags, one per word")

    @model_validator(mode="after")
    def _fields_make_sense(self) -> Self:
        if (self.text_field is None) == (self.tokens_field is None):
            raise ValueError(
                "set exactly one of text_field and tokens_field (token data: text = words joined by a space)"
            )
        if (self.tokens_field is None) != (self.tags_field is None):
            raise ValueError("tokens_field and tags_field go together: set both or neither")
        if self.text_pair_field is not None and self.text_field is None:
            raise ValueError("text_pair_field needs text_field: a pair is two texts, not words and tags")
        return self


class JsonlSource(_FilesSource, _TokenFields):
    """One JSON object per line; shards matched by a glob load as the union of their fields."""

    kind: Literal["jsonl"]


class ParquetSource(_FilesSource, _TokenFields):
    """Parquet file(s); shards whose schemas differ only by an optional column load as the union.

    ``include`` defaults to ``*.parquet``: Spark and Hive write marker files (``_SUCCESS``) beside the shards.
    """

    kind: Literal["parquet"]
    include: Include = "*.parquet"


class HfDiskSource(_PathSource, _TokenFields):
    """A ``datasets`` ``save_to_disk`` folder (a Dataset or a DatasetDict; ClassLabel ids become names)."""

    kind: Literal["hf_disk"]


class CsvSource(_FilesSource, _RecordFields):
    """CSV with a header row (RFC 4180 quoting)."""

    kind: Literal["csv"]
    text_field: str


class TextSource(_FilesSource):
    """Plain UTF-8 text: one document per file, per blank-line separated block, or per separated record."""

    kind: Literal["text"]
    unit: Literal["file", "block", "record"] = Field(
        "file", description="record: a line equal to record_separator (after stripping whitespace) ends a record"
    )
    record_separator: str | None = Field(None, min_length=1, description="e.g. '%' (the fortune file format)")
    label_from_parent_dir: bool = Field(False, description="label = name of the folder holding the file")

    @model_validator(mode="after")
    def _separator_with_records(self) -> Self:
        if (self.unit == "record") != (self.record_separator is not None):
            raise ValueError("record_separator goes with unit: record, and unit: record needs it")
        if self.record_separator is not None and self.record_separator != self.record_separator.strip():
            raise ValueError("record_separator is compared with stripped lines: it cannot start or end with whitespace")
        return self


class ConllSource(_FilesSource):
    """Token-per-line IOB2 (CoNLL); a blank line ends a sentence; ``#`` lines are sentence metadata.

    A sentence's group (what never straddles splits) comes from at most one of ``group_comment`` (a
    ``# <key> = X`` comment starts document X; default the CoNLL-U ``newdoc id``) and ``group_column``
    (the value in that column, equal on every token of a sentence; setting it drops the comment default).
    Neither: each sentence is its own group, but a ``-DOCSTART-`` line (CoNLL-2003) still starts a document.
    """

    kind: Literal["conll"]
    token_column: Column = 0
    tag_column: Column
    separator: Literal["tab", "whitespace"] = "tab"
    group_comment: str | None = Field("newdoc id", min_length=1, description="key of the comment naming the document")
    group_column: Column | None = None

    @model_validator(mode="before")
    @classmethod
    def _column_replaces_default_comment(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("group_column") is not None and "group_comment" not in data:
            return data | {"group_comment": None}  # the ``newdoc id`` default gives way to a chosen column
        return data

    @model_validator(mode="after")
    def _distinct_columns(self) -> Self:
        columns = [c for c in (self.token_column, self.tag_column, self.group_column) if c is not None]
        if len(set(columns)) != len(columns):
            raise ValueError("token_column, tag_column and group_column must differ")
        if self.group_column is not None and self.group_comment is not None:
            raise ValueError("set at most one of group_comment and group_column")
        return self


SourceSpec = Annotated[
    BuiltinSource | JsonlSource | CsvSource | ParquetSource | TextSource | ConllSource | HfDiskSource,
    Field(discriminator="kind"),
]


class IngestParams(StrictModel):
    """Params of the ``ingest`` stage: the list of sources, each written to ``data/ingest/<name>/`` (a shard per
    input file)."""

    sources: list[SourceSpec] = Field(min_length=1)
    incremental: bool = Field(
        True,
        description="read only files new or changed since the last run (cache in <data>/ingest_cache; the "
        "outputs equal a from-scratch run); false reads every file again",
    )

    @model_validator(mode="after")
    def _unique_names(self) -> Self:
        require_unique([source.name for source in self.sources], "source names")
        return self


def resolve_pretrain(
    sources: list[SourceSpec], chosen: PretrainSources, excluded: list[str], section: str
) -> list[str]:
    """The names ``<section>.pretrain_sources`` stands for: with ``all`` every ``role: pretrain`` source in
    ``sources`` order but those in ``<section>.exclude_sources``; a list as written. Raises ``ValueError`` naming
    the key for a name given twice (its rows would be read twice) or that is no source, an excluded name that is not
    a ``role: pretrain`` source or is also listed, a listed ``role: pretrain`` source neither listed nor excluded
    (nothing is left out silently), ``all`` with no ``role: pretrain`` source, or no source at all."""
    roles = {source.name: source.role for source in sources}
    pretrain = [name for name, role in roles.items() if role == "pretrain"]
    if chosen == "all" and not pretrain:
        raise ValueError(
            f"{section}.pretrain_sources: all, but ingest.sources has no role: pretrain source: add one, "
            "or list the task sources whose train split to use"
        )
    listed = pretrain if chosen == "all" else require_unique(chosen, f"{section}.pretrain_sources")
    require_unique(excluded, f"{section}.exclude_sources")
    unknown = [name for name in listed if name not in roles]
    if unknown:
        raise ValueError(f"{section}.pretrain_sources: {unknown} not in ingest.sources ({sorted(roles)})")
    for name in excluded:
        if roles.get(name) != "pretrain":
            raise ValueError(
                f"{section}.exclude_sources: {name!r} is not an ingest source with role: pretrain ({pretrain})"
            )
        if chosen != "all" and name in chosen:
            raise ValueError(f"{section}.exclude_sources: {name!r} is also in {section}.pretrain_sources")
    left_out = [name for name in pretrain if name not in listed and name not in excluded]
    if left_out:
        raise ValueError(
            f"{section}.pretrain_sources: role: pretrain source(s) {left_out} neither listed nor in "
            f"{section}.exclude_sources (pretrain_sources: all takes every one)"
        )
    resolved = [name for name in listed if name not in excluded]
    if not resolved:
        raise ValueError(f"{section}.pretrain_sources: no source left ({section}.exclude_sources takes every one)")
    return resolved
