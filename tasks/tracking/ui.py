"""The MLflow UI pages that links open: the claim table's run links (report), the runs page the flow prints, and
``make mlflow-ui``."""

from __future__ import annotations

import os
from pathlib import Path

from tasks.tracking.store import tracking_uri

#: MLflow 3.17's UI picks GenAI or model-training pages from a per-browser switch that defaults to GenAI and
#: overrides the experiment tag; this query parameter selects the training view in the links we print.
TRAINING_VIEW_QUERY = "?workflowType=machine_learning"


def links_ui_url(configured: str, uri: str | None = None) -> str:
    """The MLflow UI that links to runs should open, without a trailing slash.

    The tracking server itself when the tracking URI (``uri``, else ``MLFLOW_TRACKING_URI``) is ``http(s)://``:
    a server serves its UI at its own address. Else ``configured`` (``report.mlflow_ui_url``), where
    ``make mlflow-ui`` serves a local store (a sqlite file or a folder) by default."""
    uri = os.environ.get("MLFLOW_TRACKING_URI", "") if uri is None else uri
    return (uri if uri.startswith(("http://", "https://")) else configured).rstrip("/")


def training_view_url(ui_url: str, experiment_id: str | None, run_id: str | None = None) -> str:
    """An MLflow UI page on the model-training view: an experiment's runs
    (``<ui>/#/experiments/<id>/runs?workflowType=machine_learning``), one run of it (``.../runs/<run id>?...``),
    or the experiments list when ``experiment_id`` is None."""
    base = ui_url.rstrip("/")
    if experiment_id is None:
        return f"{base}/#/experiments{TRAINING_VIEW_QUERY}"
    run = f"/{run_id}" if run_id else ""
    return f"{base}/#/experiments/{experiment_id}/runs{run}{TRAINING_VIEW_QUERY}"


def runs_page_url(root: Path, ui_url: str = "http://127.0.0.1:5000") -> str:
    """``training_view_url`` of the ``clozeline`` experiment in the store of ``tracking_uri(root)`` (the
    experiments list while it does not exist)."""
    import mlflow

    exp = mlflow.MlflowClient(tracking_uri(root)).get_experiment_by_name("clozeline")
    return training_view_url(ui_url, exp.experiment_id if exp else None)
