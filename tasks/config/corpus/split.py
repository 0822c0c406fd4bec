"""The ``split:`` section of params.yaml."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field, model_validator

from tasks.config.base import StrictModel
from tasks.config.tasks import Tasks

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
    task_sizing: Literal["study", "fractions"] = Field(
        description="study: dev and test get their task_fractions shares, a task source's train split is a pool of "
        "train_pool_factor x the largest max_train_docs of the tasks reading it, and test every other document; "
        "fractions: task_fractions as given (tasks/split/targets.py)"
    )
    train_pool_factor: float = Field(
        ge=1.0, description="study: train pool / the largest finetune.recipes.<recipe>.max_train_docs (>= 1)"
    )
    max_test_docs: dict[str, int] = Field(
        default_factory=dict,
        description="study: source -> most kept test docs; past it, whole components (key order) are left out of "
        "the task source (dropped: beyond_max_test_docs), so their twins in the other role stay pretraining text",
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
    tasks: Tasks = Field(default_factory=dict, description="copied from the tasks section (task -> its source)")
    max_train_docs: dict[str, int | None] = Field(
        default_factory=dict,
        description="copied from finetune.recipes: task -> its recipe's max_train_docs (None: every train doc)",
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
        bad_caps = {source: cap for source, cap in self.max_test_docs.items() if cap < 1}
        if bad_caps:
            raise ValueError(f"split.max_test_docs must be >= 1 docs per source, got {bad_caps}")
        if self.task_sizing == "study" and self.assignment != "fill":
            # a pool is a document count; hash buckets meet fractions only in expectation
            raise ValueError(
                "split.task_sizing: study needs split.assignment: fill (hash buckets place each group by fraction "
                f"alone), got {self.assignment!r}; use task_sizing: fractions with hash or the ledger"
            )
        return self

    def train_pools(self) -> dict[str, int]:
        """``{source: docs}``: the train pool of every task source a task reads whose recipes cap their train docs
        (study mode; ``{}`` under fractions). ``ceil(train_pool_factor x max)`` over the ``max_train_docs`` of the
        tasks reading the source, in kept (non-duplicate) documents: what a fine-tuning run can draw. A source one
        of whose tasks trains on every train doc (``max_train_docs: null``) keeps ``task_fractions`` (absent)."""
        if self.task_sizing != "study":
            return {}
        caps: dict[str, list[int]] = {}
        uncapped: set[str] = set()
        for name, spec in sorted(self.tasks.items()):
            cap = self.max_train_docs.get(name)
            if cap is None:
                uncapped.add(spec.source)
            else:
                caps.setdefault(spec.source, []).append(cap)
        return {
            source: math.ceil(self.train_pool_factor * max(values))
            for source, values in caps.items()
            if source not in uncapped
        }

    def test_caps(self) -> dict[str, int]:
        """``{source: kept test docs at most}`` of ``max_test_docs`` (pooled sources only; ``{}`` under fractions)."""
        pools = self.train_pools()
        return {source: cap for source, cap in sorted(self.max_test_docs.items()) if source in pools}

    def unused_test_caps(self) -> dict[str, str]:
        """``{source: why}`` for each ``max_test_docs`` entry that caps nothing: a source no task reads (a user's own
        sources beside the default's ``bbc_news`` cap), or one without a train pool (``fractions`` sizing, or a
        recipe with ``max_train_docs: null``, as the GPU and scheduled profiles set), which keeps its
        ``task_fractions`` test share. The split stage logs each; none is an error, so the default cap does not
        break a run on other data."""
        task_sources = {spec.source for spec in self.tasks.values()}
        pools = self.train_pools()
        return {
            source: "no task reads it" if source not in task_sources else "it has no train pool (study sizing only)"
            for source in sorted(self.max_test_docs)
            if source not in pools
        }

    def check_max_docs(self, max_docs: dict[str, int | None]) -> None:
        """Raise ``ValueError`` naming ``split.train_pool_factor`` when a source's train pool does not fit in its
        ingest ``max_docs`` (``{source: max_docs}``) beside its dev and test shares (test at least 1 doc): a cap
        known before the run (dedup can only lower the count; the stage checks that test is not empty)."""
        for source, pool in self.train_pools().items():
            cap = max_docs.get(source)
            if cap is None:
                continue
            dev, test = (math.floor(self.task_fractions[s] * cap + 0.5) for s in ("dev", "test"))
            if pool + dev + max(test, 1) > cap:
                readers = [
                    f"{name} (max_train_docs {self.max_train_docs.get(name)})"
                    for name, spec in sorted(self.tasks.items())
                    if spec.source == source
                ]
                raise ValueError(
                    f"split.train_pool_factor: the train pool of {source} ({pool} docs = {self.train_pool_factor} x "
                    f"the largest max_train_docs of task(s) {', '.join(readers)}) does not fit in its ingest "
                    f"max_docs {cap} beside its dev ({dev}) and test ({max(test, 1)}) docs: lower the factor or "
                    "max_train_docs, raise max_docs, or set split.task_sizing: fractions"
                )
