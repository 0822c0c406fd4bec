"""The ``paths:`` section: where stages read and write, relative to the repo root."""

from pathlib import Path

from tasks.config.base import StrictModel


class Paths(StrictModel):
    """Folders of the pipeline. Stages read and write only below these."""

    data: Path
    models: Path
    metrics: Path
    reports: Path

    def stage_data(self, stage: str) -> Path:
        """``<data>/<stage>``: the output folder of a data stage."""
        return self.data / stage
