"""Prefect flows (the only package that imports prefect).

Prefect's settings are read when ``prefect`` is first imported, so the defaults that ``make run`` exports are set
here too, for a user who runs ``python -m flows.pipeline`` directly: no telemetry heartbeat from the temporary
server (it writes to Prefect's sqlite database and logs a ``database is locked`` traceback when another Prefect
process holds it), and a startup timeout long enough for a busy 2-core machine. A value already in the
environment wins.

- ``pipeline``: the Prefect flow, one task per DVC stage in ``dvc.yaml`` order;
- ``profiles``: named params profiles (``profiles/*.yaml``) checked and run with ``dvc exp run -S``;
- ``snapshot``: the flow's last step, which records the data a run used (and optionally pushes and commits it).
"""

import os

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
