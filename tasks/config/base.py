"""The base model every params section derives from."""

from pydantic import BaseModel, ConfigDict


class StrictModel(BaseModel):
    """Unknown keys are errors, values are validated on assignment, and models are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_assignment=True)
