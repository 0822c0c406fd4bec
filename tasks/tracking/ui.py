"""Which MLflow UI a link to a run opens: the claim table's run links (report) and ``make mlflow-ui``."""

from __future__ import annotations

import os


def links_ui_url(configured: str, uri: str | None = None) -> str:
    """The MLflow UI that links to runs should open, without a trailing slash.

    The tracking server itself when the tracking URI (``uri``, else ``MLFLOW_TRACKING_URI``) is ``http(s)://``:
    a server serves its UI at its own address. Else ``configured`` (``report.mlflow_ui_url``), where
    ``make mlflow-ui`` serves a local store (a sqlite file or a folder) by default."""
    uri = os.environ.get("MLFLOW_TRACKING_URI", "") if uri is None else uri
    return (uri if uri.startswith(("http://", "https://")) else configured).rstrip("/")
