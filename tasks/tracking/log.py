"""A stage's run log: ``NullLog``, a no-op stand-in (tests, dry runs), so call sites need no ``if``, and
``MlflowLog``, which writes to MLflow; ``open_run`` starts an MLflow run and ends it as its block ended.

Stages receive a ``RunLog`` and never import mlflow. Keys and values are sanitized (``sanitize.py``) before
they reach MLflow.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tasks.common.nested import flatten
from tasks.tracking.sanitize import numeric_leaves, sanitize_key, sanitize_value
from tasks.tracking.store import store_lock, tracking_uri, training_experiment

LOG = logging.getLogger("clozeline")

#: Environment variable through which the flow hands its parent run id to stage processes. Not
#: ``MLFLOW_RUN_ID``: MLflow would then write every stage into that one run.
PARENT_RUN_ENV = "CLOZELINE_PARENT_RUN_ID"
#: The run tag the MLflow UI renders as the run's description (Markdown).
NOTE_TAG = "mlflow.note.content"
DATASET_CONTEXT_TAG = "mlflow.data.context"  # MLflow's input tag for what a dataset was used for
DATASET_SOURCE_TYPE = "dvc"


@dataclass(frozen=True)
class DataInput:
    """One input of a run as a DVC-tracked dataset: ``path`` relative to the repo root (as in ``dvc.yaml``),
    ``digest`` its DVC md5 (32 hex, ``.dir`` appended for a folder: at most 36 characters, MLflow's limit),
    ``context`` what the run used it for (``training``, ``evaluation``, ``preprocessing``), ``git_commit`` of
    the code that read it."""

    path: str
    digest: str
    context: str
    git_commit: str


class NullLog:
    """A RunLog that records nothing beyond Python logging; ``run_id``, ``run_name``, ``experiment_id``: None."""

    run_id: str | None = None
    run_name: str | None = None
    experiment_id: str | None = None

    def info(self, message: str) -> None:
        """Log a progress message (Python logging, logger ``clozeline``)."""
        LOG.info(message)

    def params(self, values: Mapping[str, Any]) -> None:
        """Record params (ignored)."""

    def metrics(self, values: Mapping[str, Any], step: int | None = None) -> None:
        """Record metrics at an optional step (ignored)."""

    def tags(self, values: Mapping[str, Any]) -> None:
        """Record tags (ignored)."""

    def artifact(self, path: Path | str, folder: str | None = None) -> None:
        """Attach a file or folder to the run (ignored)."""

    def inputs(self, datasets: Sequence[DataInput]) -> None:
        """Record the run's input datasets; nested runs opened later inherit them (ignored)."""

    def text(self, content: str, artifact_file: str) -> None:
        """Attach ``content`` as the text file ``artifact_file`` of the run (ignored)."""

    def note(self, markdown: str) -> None:
        """Set the run's description, shown on its MLflow page (ignored)."""

    def sibling_runs(self, names: Sequence[str]) -> dict[str, tuple[str, str, str]]:
        """``{name: (name, run id, experiment id)}`` of the runs named ``names`` under the same parent run
        (here: none)."""
        return {}

    def transformers_model(
        self, pipeline: Any, name: str, run_id: str | None, input_example: list, pip_requirements: list[str]
    ) -> dict | None:
        """Log a transformers ``pipeline`` with MLflow's ``transformers`` flavour (here: nothing; None)."""
        return None

    def register_version(
        self, model_uri: str, name: str, tags: Mapping[str, Any], alias: str, move_alias: bool, evaluated_alias: str
    ) -> dict | None:
        """Register ``model_uri`` as a new version of ``name`` (here: nothing; None)."""
        return None

    def pipeline(self) -> NullLog:
        """The RunLog of the pipeline run this run belongs to: its parent, or itself without one (here: self)."""
        return self

    def tagged_records(self, tags: Mapping[str, str], artifact_file: str, limit: int) -> list[dict] | None:
        """Earlier runs' JSON records (see ``MlflowLog.tagged_records``; here: None, no history is tracked)."""
        return None

    @contextmanager
    def child(self, name: str) -> Iterator[NullLog]:
        """A nested run (here: another NullLog)."""
        yield NullLog()


class MlflowLog(NullLog):
    """A RunLog bound to one active MLflow run id (and, when known, its name and experiment id)."""

    def __init__(
        self,
        run_id: str,
        run_name: str | None = None,
        experiment_id: str | None = None,
        inputs: Sequence[DataInput] = (),
        uri: str | None = None,
    ) -> None:
        import mlflow

        if uri is not None:  # the store another process opened the run in (the sidecar's), over any earlier URI
            mlflow.set_tracking_uri(uri)
        self.run_id, self.run_name, self.experiment_id = run_id, run_name, experiment_id
        self._client = mlflow.MlflowClient()  # one client per run: per-step metrics must not rebuild it
        self._inputs = tuple(inputs)  # what nested runs inherit
        self.end_ms: int | None = None  # the run's end time for open_run (ms since the epoch); None: when it ends

    def params(self, values: Mapping[str, Any]) -> None:
        """Log params; keys and values are sanitized (see ``sanitize_key``/``sanitize_value``)."""
        from mlflow.entities import Param

        items = [Param(sanitize_key(k), sanitize_value(v)) for k, v in flatten(values).items()]
        for start in range(0, len(items), 100):  # MLflow's batch limit is 100 params
            self._client.log_batch(self.run_id, params=items[start : start + 100])

    def metrics(self, values: Mapping[str, Any], step: int | None = None, stamp_ms: int | None = None) -> None:
        """Log the numeric leaves of ``values`` (keys joined by ``/``) at ``step``, stamped ``stamp_ms`` (now)."""
        from mlflow.entities import Metric

        stamp = int(time.time() * 1000) if stamp_ms is None else stamp_ms
        items = [Metric(sanitize_key(k), v, stamp, step or 0) for k, v in numeric_leaves(values).items()]
        for start in range(0, len(items), 1000):
            self._client.log_batch(self.run_id, metrics=items[start : start + 1000])

    def tags(self, values: Mapping[str, Any]) -> None:
        """Set tags; keys and values are sanitized."""
        from mlflow.entities import RunTag

        items = [RunTag(sanitize_key(k), sanitize_value(v)) for k, v in values.items()]
        self._client.log_batch(self.run_id, tags=items)

    def artifact(self, path: Path | str, folder: str | None = None) -> None:
        """Upload a file or a whole folder as run artifacts, under ``folder`` when given."""
        path = Path(path)
        if path.is_dir():
            self._client.log_artifacts(self.run_id, str(path), folder)
        elif path.exists():
            self._client.log_artifact(self.run_id, str(path), folder)

    def inputs(self, datasets: Sequence[DataInput]) -> None:
        """Log each dataset as an MLflow run input (the UI's Dataset column): name = path, digest = DVC md5,
        source type ``dvc`` with source ``{"path", "git_commit"}``, input tag ``mlflow.data.context``. Nested
        runs opened afterwards through ``child`` log the same inputs, so every seed run can be filtered by data
        version too."""
        from mlflow.entities import Dataset, DatasetInput, InputTag

        self._inputs += tuple(datasets)
        entries = [
            DatasetInput(
                Dataset(
                    name=d.path,
                    digest=d.digest,
                    source_type=DATASET_SOURCE_TYPE,
                    source=json.dumps({"path": d.path, "git_commit": d.git_commit}),
                ),
                tags=[InputTag(DATASET_CONTEXT_TAG, d.context)],
            )
            for d in datasets
        ]
        if entries:
            self._client.log_inputs(self.run_id, datasets=entries)

    def text(self, content: str, artifact_file: str) -> None:
        """Attach ``content`` as the text file ``artifact_file`` of the run."""
        self._client.log_text(self.run_id, content, artifact_file)

    def note(self, markdown: str) -> None:
        """Set ``mlflow.note.content``, the run's description on its MLflow page (Markdown)."""
        self._client.set_tag(self.run_id, NOTE_TAG, markdown)

    def sibling_runs(self, names: Sequence[str]) -> dict[str, tuple[str, str, str]]:
        """The runs named ``names`` under this run's parent (the other stages of one pipeline run), the latest
        of each name: ``{name: (name, run id, experiment id)}``; empty for a run without a parent."""
        run = self._client.get_run(self.run_id)
        parent = run.data.tags.get("mlflow.parentRunId")
        if not parent:
            return {}
        found = self._client.search_runs(
            [run.info.experiment_id],
            f"tags.mlflow.parentRunId = '{parent}'",
            order_by=["attributes.start_time ASC"],
            max_results=1000,
        )
        return {
            r.info.run_name: (r.info.run_name, r.info.run_id, r.info.experiment_id)
            for r in found
            if r.info.run_name in names
        }

    def pipeline(self) -> MlflowLog:
        """The RunLog of this run's parent (the flow's pipeline run), or this log when the run has none."""
        run = self._client.get_run(self.run_id)
        parent = run.data.tags.get("mlflow.parentRunId")
        return MlflowLog(parent, None, run.info.experiment_id) if parent else self

    def tagged_records(self, tags: Mapping[str, str], artifact_file: str, limit: int) -> list[dict]:
        """The JSON artifact ``artifact_file`` of the ``limit`` latest other runs with every tag of ``tags`` (values
        without quotes) in this log's experiment, newest first: ``{run_id, start_ms (UTC, ms since the epoch),
        git_commit (its tag, "" if none), record}``; a run whose file is missing or not JSON is skipped."""
        import mlflow
        from mlflow.exceptions import MlflowException

        where = " and ".join(f"tags.{key} = '{value}'" for key, value in tags.items())
        found = self._client.search_runs(
            [self.experiment_id], where, max_results=limit + 1, order_by=["attributes.start_time DESC"]
        )  # + 1: this run, on a retry
        out = []
        for run in (r for r in found if r.info.run_id != self.run_id):
            try:
                record = json.loads(mlflow.artifacts.load_text(f"{run.info.artifact_uri}/{artifact_file}"))
            except (OSError, ValueError, MlflowException):  # deleted, or the writer died half-way
                continue
            out.append(
                {
                    "run_id": run.info.run_id,
                    "start_ms": run.info.start_time,
                    "git_commit": run.data.tags.get("git_commit", ""),
                    "record": record,
                }
            )
        return out[:limit]

    def transformers_model(
        self, pipeline: Any, name: str, run_id: str | None, input_example: list, pip_requirements: list[str]
    ) -> dict | None:
        """Log ``pipeline`` with MLflow's ``transformers`` flavour under run ``run_id`` (this run when None):
        the model and tokenizer saved as safetensors, ``input_example`` and the signature MLflow infers from it
        (by running the pipeline), ``pip_requirements`` as given (no inference in a subprocess). The pipeline's
        task must be registered with transformers in the loading process (``import clozeline.predict``).
        Returns ``{model_uri, model_id, run_id, signature}``."""
        import mlflow

        info = mlflow.transformers.log_model(
            transformers_model=pipeline,
            name=sanitize_key(name),
            run_id=run_id or self.run_id,
            input_example=input_example,
            pip_requirements=pip_requirements,
        )
        signature = info.signature.to_dict() if info.signature is not None else None
        return {
            "model_uri": info.model_uri,
            "model_id": info.model_id,
            "run_id": run_id or self.run_id,
            "signature": signature,
        }

    def register_version(
        self, model_uri: str, name: str, tags: Mapping[str, Any], alias: str, move_alias: bool, evaluated_alias: str
    ) -> dict | None:
        """Register ``model_uri`` as a new version of the registered model ``name`` (created if absent), set
        ``tags`` on it (sanitized), point ``evaluated_alias`` at it always (every version registered was evaluated)
        and ``alias`` only when ``move_alias`` (the gate passed). Returns ``{name, version, alias, alias_moved,
        alias_version, evaluated_alias}`` (``alias_version``: the version ``alias`` names now, or None)."""
        import mlflow
        from mlflow.exceptions import MlflowException

        version = mlflow.register_model(model_uri, name, await_registration_for=0)
        for key, value in tags.items():
            self._client.set_model_version_tag(name, version.version, sanitize_key(key), sanitize_value(value))
        self._client.set_registered_model_alias(name, evaluated_alias, version.version)
        if move_alias:
            self._client.set_registered_model_alias(name, alias, version.version)
        try:
            current = self._client.get_model_version_by_alias(name, alias).version
        except MlflowException:  # no gate has passed in this store yet
            current = None
        return {
            "name": name,
            "version": int(version.version),
            "alias": alias,
            "alias_moved": move_alias,
            "alias_version": int(current) if current is not None else None,
            "evaluated_alias": evaluated_alias,
        }

    @contextmanager
    def child(self, name: str) -> Iterator[MlflowLog]:
        """A nested run (tag ``mlflow.parentRunId``) with this run's inputs; ends FAILED if the block raises."""
        with open_run(name, parent_run_id=self.run_id) as log:
            log.inputs(self._inputs)
            yield log


class RunKilled(BaseException):
    """Raised from a SIGTERM handler so the active run can be ended KILLED."""


@contextmanager
def open_run(
    name: str,
    parent_run_id: str | None = None,
    experiment: str = "clozeline",
    root: Path | None = None,
    start_ms: int | None = None,
) -> Iterator[MlflowLog]:
    """Start an MLflow run named ``name``; end it FINISHED, FAILED on an exception, KILLED on ``RunKilled``.

    ``parent_run_id`` (or the ``CLOZELINE_PARENT_RUN_ID`` environment variable) makes it a child run. Its start
    is ``start_ms`` (ms since the epoch; now when None), its end ``log.end_ms`` as the block left it."""
    import mlflow

    if root is not None:
        mlflow.set_tracking_uri(tracking_uri(root))
    with store_lock(mlflow.get_tracking_uri()):
        client = mlflow.MlflowClient()
        exp_id = training_experiment(client, experiment)
    parent = parent_run_id or os.environ.get(PARENT_RUN_ENV) or None
    tags = {"mlflow.runName": name}
    if parent:
        tags["mlflow.parentRunId"] = parent
    run = client.create_run(exp_id, start_time=start_ms, tags=tags, run_name=name)
    log = MlflowLog(run.info.run_id, name, exp_id)
    try:
        yield log
    except RunKilled:
        client.set_terminated(log.run_id, "KILLED", log.end_ms)
        raise
    except BaseException:
        client.set_terminated(log.run_id, "FAILED", log.end_ms)
        raise
    client.set_terminated(log.run_id, "FINISHED", log.end_ms)
