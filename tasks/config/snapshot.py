"""The ``snapshot:`` section: what the flow's final snapshot step does."""

from pydantic import Field

from tasks.config.base import StrictModel


class SnapshotParams(StrictModel):
    """Record the data snapshot (dvc.lock md5s) on the pipeline's MLflow run, push it, optionally commit it."""

    push: bool = Field(description="run `dvc push` when a default DVC remote is configured")
    git_commit: bool = Field(description="git-commit dvc.lock, params.yaml and metrics/ after a run")
