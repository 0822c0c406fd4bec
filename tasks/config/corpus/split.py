"""The ``split:`` section of params.yaml."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from tasks.config.base import StrictModel

TASK_SPLITS = ("train", "dev", "test")
PRETRAIN_SPLITS = ("train", "heldout")


class SplitParams(StrictModel):
    """Params of the ``split`` stage (grouped, document-count-aware assignment; see ``tasks/split/``)."""

    seed: int = Field(description="salt of hash(seed, group), which orders groups")
    mode: Literal["grouped", "temporal"] = Field(
        description="grouped: groups in hash order; temporal: oldest groups to train, newest to the last split"
    )
    assignment: Literal["fill", "hash"] = Field(
        description="fill: doc-count-aware first-fit (exact fractions); hash: pure hash buckets (never moves a group)"
    )
    task_fractions: dict[str, float] = Field(description="fraction of documents per split of task sources")
    pretrain_fractions: dict[str, float] = Field(description="fraction of documents per split of pretrain sources")
    stratify_by_label: bool = Field(description="meet the fractions within each label of a task source")
    date_meta_key: str | None = Field(description="meta JSON key holding an ISO date; required in temporal mode")
    own_split_meta_key: str = Field(
        description="meta JSON key holding a source's own split; a source whose rows all carry it keeps it"
    )
    ledger: bool = Field(
        description="keep every doc's first split forever: read and extend <data>/split_ledger/ledger.parquet "
        "(needs assignment hash, mode grouped)"
    )

    @model_validator(mode="after")
    def _check(self) -> SplitParams:
        for name, fractions, allowed in (
            ("task_fractions", self.task_fractions, TASK_SPLITS),
            ("pretrain_fractions", self.pretrain_fractions, PRETRAIN_SPLITS),
        ):
            if set(fractions) != set(allowed):
                raise ValueError(f"split.{name} must have exactly the keys {list(allowed)}, got {sorted(fractions)}")
            if any(not 0.0 <= v <= 1.0 for v in fractions.values()) or abs(sum(fractions.values()) - 1.0) > 1e-9:
                raise ValueError(f"split.{name} must be fractions in [0, 1] summing to 1, got {fractions}")
            if fractions["train"] <= 0.0:
                raise ValueError(f"split.{name}.train must be > 0")
        if self.mode == "temporal" and not self.date_meta_key:
            raise ValueError("split.date_meta_key is required when split.mode is 'temporal'")
        if self.ledger and (self.assignment, self.mode) != ("hash", "grouped"):
            # fill and temporal place a group by looking at every other group, so a from-scratch run over the
            # union can disagree with the ledger anywhere; hash places each component on its own
            raise ValueError(
                f"split.ledger: true needs split.assignment: hash and split.mode: grouped, got "
                f"assignment {self.assignment!r}, mode {self.mode!r}"
            )
        return self
