"""`make mlflow-ui [PORT=5001]`: MLflow's UI over this run's tracking store, on 127.0.0.1.

The store is the one the stages log to, resolved as they resolve it (``tasks.tracking.tracking_uri``:
``MLFLOW_TRACKING_URI`` when set, else ``sqlite:///<repo>/mlruns.db``). The port is ``--port`` (the Makefile's
``PORT``), else the port of ``report.mlflow_ui_url`` in params.yaml, the address the run links of
``reports/claims.html`` point at, so that by default the links open this UI. Prints the link to the clozeline
runs on MLflow's model-training view first (MLflow 3.17 opens an experiment on its GenAI pages otherwise), then
replaces itself with ``mlflow ui``.

A tracking URI that is already an MLflow server (``http://`` or ``https://``) has its own UI, which the claim
table's links open too (``tasks.tracking.ui``): the script prints that server's link and starts nothing.

    .venv/bin/python scripts/mlflow_ui.py [--port N] [--print-only]

Exit 2 with one line for a port outside 1-65535 or a ``report.mlflow_ui_url`` without a readable port.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path
from urllib.parse import urlsplit

from tasks.config import load_params
from tasks.tracking import links_ui_url, runs_page_url, tracking_uri

REPO = Path(__file__).resolve().parents[1]
HOST = "127.0.0.1"


def links_port(params: Path) -> int:
    """The port of ``report.mlflow_ui_url`` in ``params`` (80 / 443 when the URL names none), read through
    ``tasks.config.load_params`` like every other reader of params.yaml.

    Raises ``ValueError`` (``ParamsError``) naming the key when params do not validate or the port is not a number."""
    url = load_params(params).report.mlflow_ui_url
    parts = urlsplit(url)
    try:
        return parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as err:
        raise ValueError(f"{params}: report.mlflow_ui_url: {url!r}: {err}") from None


def ui_command(uri: str, port: int) -> list[str]:
    """``mlflow ui`` over the store ``uri`` on 127.0.0.1:``port``, one worker (the store is a local file)."""
    mlflow = str(Path(sys.executable).parent / "mlflow")
    return [mlflow, "ui", "--backend-store-uri", uri, "--host", HOST, "--port", str(port), "--workers", "1"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make mlflow-ui", description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, help="port to listen on (default: the port of report.mlflow_ui_url)")
    parser.add_argument("--print-only", action="store_true", help="print the link and the command, start nothing")
    args = parser.parse_args(argv)
    try:
        default = links_port(REPO / "params.yaml")
    except (OSError, ValueError) as err:
        print(f"make mlflow-ui: {err}", file=sys.stderr)
        return 2
    port = default if args.port is None else args.port
    if not 0 < port < 65536:
        print(f"make mlflow-ui: PORT={port}: a port is 1-65535", file=sys.stderr)
        return 2
    uri = tracking_uri(REPO)
    ui = f"http://{HOST}:{port}"
    if links_ui_url(ui, uri) != ui:
        print(
            f"clozeline runs (training view, on the tracking server MLFLOW_TRACKING_URI names): "
            f"{runs_page_url(REPO, links_ui_url(ui, uri))}"
        )
        return 0
    print(f"clozeline runs (training view): {runs_page_url(REPO, ui)}")
    if port != default:
        print(
            f"note: the run links in reports/claims.html point at port {default} (report.mlflow_ui_url); "
            f"for links to this port: dvc exp run -S report.mlflow_ui_url={ui}"
        )
    command = ui_command(uri, port)
    if args.print_only:
        print(shlex.join(command))
        return 0
    sys.stdout.flush()
    os.execve(command[0], command, os.environ | {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"})


if __name__ == "__main__":
    sys.exit(main())
