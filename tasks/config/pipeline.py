"""The ``pipeline:`` section: how the Prefect flow runs the DVC stages."""

from pydantic import Field

from tasks.config.base import StrictModel


class PipelineParams(StrictModel):
    """Retries of the Prefect tasks that wrap ``dvc repro --single-item <stage>``."""

    retries: int = Field(ge=0, description="retries per stage task")
    retry_delay_seconds: float = Field(ge=0, description="wait between retries, seconds")
