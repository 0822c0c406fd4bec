"""The ``release:`` section of params.yaml."""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import Field, model_validator

from tasks.config.base import StrictModel


class ReleaseParams(StrictModel):
    """Params of the ``release`` stage: the export with its model card in ``<models>/export/<task>/``, and its
    version in the MLflow model registry with the verdicts of its claims."""

    registered_model_prefix: str = Field(
        pattern=r"^[A-Za-z0-9_.-]*$", description="registered model name = prefix + task name"
    )
    alias: str = Field(
        pattern=r"^[A-Za-z][A-Za-z0-9_-]*$",
        description="registry alias moved to the new version when every gate claim is supported",
    )
    evaluated_alias: str = Field(
        "evaluated",
        pattern=r"^[A-Za-z][A-Za-z0-9_-]*$",
        description="registry alias moved to every new (evaluated) version, gate or not",
    )
    gate_claims: dict[str, list[str]] = Field(
        default_factory=dict,
        description="task -> claim ids that must all be `supported` to move the alias; a "
        "task not listed: [best-arm-beats-best-baseline-<task>]",
    )
    dvc_lock_file: Path = Field(
        description="dvc.lock (the data md5s of the card and the version tags), repo-root relative"
    )

    @model_validator(mode="after")
    def _two_aliases(self) -> ReleaseParams:
        for alias in (self.alias, self.evaluated_alias):
            if re.fullmatch(r"latest|v\d+", alias, re.IGNORECASE):
                raise ValueError(
                    f"release: alias {alias!r} is reserved by the MLflow registry (latest, v<number>), "
                    "which would refuse it when the release stage sets it"
                )
        if self.alias == self.evaluated_alias:
            raise ValueError(
                f"release.alias and release.evaluated_alias are both {self.alias!r}: the gated alias "
                "would then name every version"
            )
        return self
