"""The tracking child: the process that holds a stage's MLflow run (the stage's side is ``sidecar.py``).

It reads one JSON call per line (``open`` first, ``end`` last), applies each to an ``MlflowLog`` and answers
``open``, ``artifact`` and ``end`` with one JSON line. A cold child is ``python -m tasks.tracking.child`` (``serve``:
calls on stdin, answers on stdout); the warm server (``server.py``) forks one per stage connection and runs the
same loop (``serve_calls``) on its socket. It ignores SIGINT and SIGTERM (the stage maps them to KILLED and says
so); when its input ends without ``end`` (the stage died), the run ends FAILED.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Iterator
from typing import TextIO

from tasks.tracking.log import DataInput, MlflowLog, RunKilled, open_run

#: What each call does to the child's ``MlflowLog``.
CALLS = {
    "params": lambda log, m: log.params(m["values"]),
    "metrics": lambda log, m: log.metrics(m["values"], m["step"], stamp_ms=m["stamp_ms"]),
    "tags": lambda log, m: log.tags(m["values"]),
    "inputs": lambda log, m: log.inputs([DataInput(**d) for d in m["datasets"]]),
    "text": lambda log, m: log.text(m["content"], m["artifact_file"]),
    "note": lambda log, m: log.note(m["markdown"]),
    "artifact": lambda log, m: log.artifact(m["path"], m["folder"]),
}
ANSWERED = {"artifact"}


class _Ended(Exception):
    """The stage ended the run FAILED (or died): ``open_run`` ends it FAILED."""


def serve() -> int:
    """A cold child: ``serve_calls`` on stdin; answers go to the original stdout, anything MLflow prints to
    stderr. Returns the exit code."""
    answers = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    return serve_calls((json.loads(line) for line in sys.stdin), answers)


def serve_calls(calls: Iterator[dict], answers: TextIO) -> int:
    """The child's loop (a cold child's, or one forked by the warm server, ``server.py``): open the run, apply
    each call, end the run; returns the exit code (1 when MLflow failed). SIGINT and SIGTERM are ignored: the
    stage maps them to KILLED and says so."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    opening = next(calls, None)
    if opening is None:
        return 0
    os.environ["MLFLOW_TRACKING_URI"] = opening["uri"]
    errors: list[str] = []
    status = "FAILED"
    try:
        with open_run(opening["name"], opening["parent"], opening["experiment"], start_ms=opening["start_ms"]) as log:
            _answer(answers, {"ok": {"run_id": log.run_id, "experiment_id": log.experiment_id}})
            status = _apply(log, calls, answers, errors)
            if status == "KILLED":
                raise RunKilled(status)
            if status != "FINISHED":
                raise _Ended(status)
    except (RunKilled, _Ended):
        pass
    except Exception as err:  # noqa: BLE001 - opening or ending failed: the stage hears it at its next waiting call
        errors.append(f"{type(err).__name__}: {err}")
    _answer(answers, {"error": errors[0]} if errors else {"ok": status})
    return 1 if errors else 0


def _apply(log: MlflowLog, calls: Iterator[dict], answers: TextIO, errors: list[str]) -> str:
    """Apply calls until ``end`` (which sets ``log.end_ms``); returns its status (FAILED when stdin closes
    first). A failed call is kept in ``errors`` (the first one is reported at the end) and the rest are still
    applied."""
    for call in calls:
        if call["op"] == "end":
            log.end_ms = call["end_ms"]
            return call["status"]
        try:
            CALLS[call["op"]](log, call)
        except Exception as err:  # noqa: BLE001 - kept and reported to the stage; the other calls still count
            errors.append(f"{call['op']}: {type(err).__name__}: {err}")
            print(f"clozeline: MLflow refused {errors[-1]}", file=sys.stderr)
            if call["op"] in ANSWERED:
                _answer(answers, {"error": errors[-1]})
            continue
        if call["op"] in ANSWERED:
            _answer(answers, {"ok": None})
    return "FAILED"


def _answer(stream: TextIO, message: dict) -> None:
    stream.write(json.dumps(message) + "\n")
    stream.flush()


if __name__ == "__main__":
    sys.exit(serve())
