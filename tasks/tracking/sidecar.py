"""A stage's MLflow run kept by a child process, so that MLflow's start-up runs beside the stage's work.

A stage process that tracks in-process first pays for ``import mlflow`` and the sqlite store (about 2.5 s and
1.2 s measured on 2 cores, per process), before any work. ``open_sidecar_run`` starts
``python -m tasks.tracking.child`` instead (``child.py``), which imports MLflow and opens the run while the stage
already works, on the other core. When a warm tracking server is up (``server.py``, reached through
``connection.py``: the first stage starts one), the child is forked from it instead, with MLflow already
imported. The stage talks to the child through ``SidecarLog``, a RunLog that writes one JSON line per call to the
child's stdin (JSON only: nothing is pickled):

- params, metrics, tags, inputs, text and note are sent without waiting; keys and values are sanitized here,
  and each metric carries the time it was logged;
- ``artifact`` waits for the child's answer (the stage may remove the file afterwards);
- calls that return MLflow data or need in-process objects (``sibling_runs``, ``pipeline``,
  ``tagged_records``, ``transformers_model``, ``register_version``, ``child``) open an in-process MlflowLog
  on the same run id, so only the stages that use them import MLflow themselves.

The run ends FINISHED, FAILED or KILLED as the stage ended, and the stage process waits for the child before it
exits, so the next stage (and the report, which reads its siblings' runs) finds the run complete. A SIGTERM
while the stage waits for the child's start-up ends the run KILLED; once the run is being ended FINISHED,
SIGINT and SIGTERM are ignored until it is recorded. A store that cannot be opened fails the stage at its
next call after the child says so; a call MLflow rejects fails it at its next waiting call or at the end, with
MLflow's message (``TrackingError``); a child that dies is noticed at the next call. The child ignores SIGINT
and SIGTERM, which the stage maps to KILLED and passes on; if the stage process dies without a word (SIGKILL),
the child sees its stdin close and ends the run FAILED.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any, Protocol

from tasks.common.nested import flatten
from tasks.tracking import connection
from tasks.tracking.log import PARENT_RUN_ENV, DataInput, MlflowLog, NullLog, RunKilled
from tasks.tracking.sanitize import numeric_leaves, sanitize_key, sanitize_value
from tasks.tracking.store import tracking_uri

PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # where ``python -m tasks.tracking.child`` imports from


class ChildProcess(Protocol):
    """What ``SidecarLog`` uses of its child: a cold child's ``subprocess.Popen`` (text mode, stdin and stdout
    pipes) or a ``connection.ForkedChild``."""

    stdin: Any
    stdout: Any
    returncode: int | None

    def poll(self) -> int | None: ...

    def wait(self) -> int: ...


class TrackingError(RuntimeError):
    """MLflow failed to record a stage's run (the message is MLflow's, or says how the tracking process ended)."""


class SidecarLog(NullLog):
    """The RunLog of a run held by the tracking child process ``proc``: a cold child, or one forked by the warm
    server (``connection.py``); see the module docstring."""

    def __init__(self, proc: ChildProcess, name: str, uri: str) -> None:
        self._proc, self.run_name, self._uri = proc, name, uri
        self._opened: dict[str, str] | None = None
        self._open_failed = False  # the child answered "open" with an error (already raised) and exited
        self._local: MlflowLog | None = None
        self._inputs: tuple[DataInput, ...] = ()

    @property
    def run_id(self) -> str:  # type: ignore[override]  # a property here: read when the child has opened the run
        """The MLflow run id (waits until the child has opened the run)."""
        return self._ids()["run_id"]

    @property
    def experiment_id(self) -> str:  # type: ignore[override]
        """The MLflow experiment id (waits until the child has opened the run)."""
        return self._ids()["experiment_id"]

    def params(self, values: Mapping[str, Any]) -> None:
        """Log params; keys and values are sanitized (``sanitize.sanitize_key``/``sanitize_value``)."""
        self._send("params", values={sanitize_key(k): sanitize_value(v) for k, v in flatten(values).items()})

    def metrics(self, values: Mapping[str, Any], step: int | None = None) -> None:
        """Log the numeric leaves of ``values`` at ``step``, stamped now (ms since the epoch)."""
        self._send("metrics", values=numeric_leaves(values), step=step, stamp_ms=int(time.time() * 1000))

    def tags(self, values: Mapping[str, Any]) -> None:
        """Set tags; keys and values are sanitized."""
        self._send("tags", values={sanitize_key(k): sanitize_value(v) for k, v in values.items()})

    def artifact(self, path: Path | str, folder: str | None = None) -> None:
        """Upload a file or folder; returns once it is stored (the caller may change it afterwards)."""
        self._ask("artifact", path=str(Path(path).resolve()), folder=folder)

    def inputs(self, datasets: Sequence[DataInput]) -> None:
        """Log the run's input datasets (``MlflowLog.inputs``); nested runs opened later inherit them."""
        self._inputs += tuple(datasets)
        self._send("inputs", datasets=[asdict(d) for d in datasets])

    def text(self, content: str, artifact_file: str) -> None:
        """Attach ``content`` as the text file ``artifact_file`` of the run."""
        self._send("text", content=content, artifact_file=artifact_file)

    def note(self, markdown: str) -> None:
        """Set the run's description (``mlflow.note.content``)."""
        self._send("note", markdown=markdown)

    def sibling_runs(self, names: Sequence[str]) -> dict[str, tuple[str, str, str]]:
        """``MlflowLog.sibling_runs``, in this process."""
        return self.in_process().sibling_runs(names)

    def pipeline(self) -> MlflowLog:
        """``MlflowLog.pipeline``, in this process."""
        return self.in_process().pipeline()

    def tagged_records(self, tags: Mapping[str, str], artifact_file: str, limit: int) -> list[dict] | None:
        """``MlflowLog.tagged_records``, in this process."""
        return self.in_process().tagged_records(tags, artifact_file, limit)

    def transformers_model(
        self, pipeline: Any, name: str, run_id: str | None, input_example: list, pip_requirements: list[str]
    ) -> dict | None:
        """``MlflowLog.transformers_model``, in this process (the pipeline object lives here)."""
        return self.in_process().transformers_model(pipeline, name, run_id, input_example, pip_requirements)

    def register_version(
        self, model_uri: str, name: str, tags: Mapping[str, Any], alias: str, move_alias: bool, evaluated_alias: str
    ) -> dict | None:
        """``MlflowLog.register_version``, in this process."""
        return self.in_process().register_version(model_uri, name, tags, alias, move_alias, evaluated_alias)

    @contextmanager
    def child(self, name: str) -> Iterator[NullLog]:
        """A nested run, opened in this process (``MlflowLog.child``)."""
        with self.in_process().child(name) as log:
            yield log

    def in_process(self) -> MlflowLog:
        """An in-process ``MlflowLog`` on this run (imports MLflow on first use), on the store the child got
        (``MlflowLog(uri=...)`` sets it process-wide, as ``open_run(root=...)`` does: an earlier URI set in this
        process would otherwise win over the environment)."""
        if self._local is None:
            self._local = MlflowLog(self.run_id, self.run_name, self.experiment_id, self._inputs, self._uri)
        return self._local

    def finish(self, status: str) -> None:
        """End the run with ``status`` (FINISHED, FAILED, KILLED) and wait for the child to exit. Raises
        ``TrackingError`` when the child failed to open the run, to record a call, or to end the run (not again
        when its failure to open was raised already)."""
        try:
            if not self._open_failed:
                self._ask("end", status=status, end_ms=int(time.time() * 1000))
        finally:
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # a write the dead child never read
                self._proc.stdin.close()
            code = self._proc.wait()
        if code and not self._open_failed:
            raise TrackingError(f"MLflow tracking process of run {self.run_name!r} exited with code {code}")

    def _ids(self) -> dict[str, str]:
        if self._opened is None:
            try:
                self._opened = self._reply("open")
            except TrackingError:
                self._open_failed = True
                raise
        return self._opened

    def _send(self, op: str, **fields: Any) -> None:
        if self._opened is None and select.select([self._proc.stdout], [], [], 0)[0]:
            self._ids()  # the child has answered "open": a store that cannot be opened fails the stage now
        if self._proc.poll() is not None:  # died: its answer to "open" holds the error, if it got that far
            self._ids()
            raise TrackingError(
                f"MLflow tracking process of run {self.run_name!r} exited with code {self._proc.returncode}"
            )
        try:
            self._proc.stdin.write(json.dumps({"op": op, **fields}) + "\n")
            self._proc.stdin.flush()
        except (BrokenPipeError, ConnectionResetError):
            self._ids()
            raise TrackingError(f"MLflow tracking process of run {self.run_name!r} stopped reading") from None

    def _ask(self, op: str, **fields: Any) -> Any:
        self._ids()  # its answer comes first
        self._send(op, **fields)
        return self._reply(op)

    def _reply(self, op: str) -> Any:
        try:
            line = self._proc.stdout.readline()
        except OSError:  # a forked child that died with our calls unread resets its socket: as an ended pipe
            line = ""
        if not line:
            raise TrackingError(
                f"MLflow tracking process of run {self.run_name!r} ended before it answered {op!r} (its error is above)"
            )
        answer = json.loads(line)
        if "error" in answer:
            raise TrackingError(f"MLflow, run {self.run_name!r}, {op}: {answer['error']}")
        return answer["ok"]


@contextmanager
def open_sidecar_run(name: str, root: Path, experiment: str = "clozeline") -> Iterator[SidecarLog]:
    """``log.open_run(name, root=root)`` with the run held by a child process: MLflow's imports and the
    store's opening overlap the block. Ends the run FINISHED, FAILED on an exception, KILLED on ``RunKilled``,
    and waits for the child. Raises ``TrackingError`` (after the block) when MLflow failed."""
    uri = tracking_uri(root)
    proc = connection.connect() or subprocess.Popen(
        [sys.executable, "-m", "tasks.tracking.child"],
        cwd=PACKAGE_ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=None if connection.stderr_open() else subprocess.DEVNULL,
        text=True,
        encoding="utf-8",
    )
    log = SidecarLog(proc, name, uri)
    log._send(
        "open",
        name=name,
        parent=os.environ.get(PARENT_RUN_ENV) or None,
        experiment=experiment,
        uri=uri,
        start_ms=int(time.time() * 1000),
    )
    try:
        yield log
        log._ids()  # the stage is done; the child may still be starting: a SIGTERM now ends the run KILLED
    except RunKilled:
        _finish_quietly(log, "KILLED")
        raise
    except BaseException:
        _finish_quietly(log, "FAILED")
        raise
    with _signals_ignored():  # the run is being recorded FINISHED: a signal now would part MLflow from the outputs
        log.finish("FINISHED")


@contextmanager
def _signals_ignored() -> Iterator[None]:
    """SIGINT and SIGTERM are ignored in the block (the main thread's handlers, restored after). The block is the
    final "end" of a run whose child is up: a few store writes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _finish_quietly(log: SidecarLog, status: str) -> None:
    """End the run after the stage failed; a tracking error is printed, not raised over the stage's own."""
    try:
        log.finish(status)
    except TrackingError as err:
        print(f"clozeline: {err}", file=sys.stderr)
