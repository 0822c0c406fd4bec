"""Experiment tracking: the one package that imports MLflow (lazily, inside functions: start-up time).

Stages receive a RunLog and never import mlflow. The names below are the package's public API.

- ``log``: ``NullLog`` (no-op) and ``MlflowLog`` (writes to MLflow), ``open_run``, ``RunKilled``, ``DataInput``.
- ``sanitize``: keys and values MLflow accepts, made deterministically from any param, metric or tag.
- ``store``: the store the stages log to (``tracking_uri``), its lock, the training experiment.
- ``ui``: the MLflow UI pages that links open (run links, the runs page, ``make mlflow-ui``).
- ``sidecar``: a stage's run held by a child process (``open_sidecar_run``, ``SidecarLog``, ``TrackingError``).
- ``child``: that child process (``python -m tasks.tracking.child``), which applies the stage's calls to MLflow.
- ``connection``: the stage's link to the warm tracking server, which forks the child with MLflow imported.
- ``server``: the warm tracking server (``python -m tasks.tracking.server``).
"""

from tasks.tracking.log import PARENT_RUN_ENV, DataInput, MlflowLog, NullLog, RunKilled, open_run
from tasks.tracking.sanitize import MAX_KEY, MAX_PARAM_VALUE, numeric_leaves, sanitize_key, sanitize_value
from tasks.tracking.store import tracking_uri
from tasks.tracking.ui import links_ui_url, runs_page_url, training_view_url

__all__ = [
    "MAX_KEY",
    "MAX_PARAM_VALUE",
    "PARENT_RUN_ENV",
    "DataInput",
    "MlflowLog",
    "NullLog",
    "RunKilled",
    "links_ui_url",
    "numeric_leaves",
    "open_run",
    "runs_page_url",
    "sanitize_key",
    "sanitize_value",
    "tracking_uri",
    "training_view_url",
]
