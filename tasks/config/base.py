"""The base model every params section derives from, and the checks several sections share."""

from typing import Literal

from pydantic import BaseModel, ConfigDict

#: Initial weights of an encoder (``tasks.common.models.encoders``): ours from scratch, ours re-initialised, the
#: packaged MiniLM, or an encoder our pretrain stage continued (``pretrain.init_from`` not ``scratch``).
Variant = Literal["pretrained", "random", "reference", "adapted"]


class StrictModel(BaseModel):
    """Unknown keys are errors, values are validated on assignment, and models are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_assignment=True)


def require_unique(values: list, what: str) -> list:
    """``values`` unchanged; raises ``ValueError`` naming ``what`` and the repeated entries."""
    repeated = sorted({v for v in values if values.count(v) > 1}, key=str)
    if repeated:
        raise ValueError(f"{what} must be unique; repeated: {repeated}")
    return values
