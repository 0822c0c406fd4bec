"""Experiment tracking: the only module that imports MLflow.

Stages receive a ``RunLog`` and never import mlflow. ``NullLog`` is a no-op stand-in (tests, dry runs), so
call sites need no ``if``; ``MlflowLog`` writes to MLflow. Names and values MLflow would reject are
sanitized deterministically here, so a run never crashes because of a param value or a metric name.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tasks.common.nested import flatten

LOG = logging.getLogger("clozeline")

#: Environment variable through which the flow hands its parent run id to stage processes. Not
#: ``MLFLOW_RUN_ID``: MLflow would then write every stage into that one run.
PARENT_RUN_ENV = "CLOZELINE_PARENT_RUN_ID"
MAX_PARAM_VALUE = 6000  # MLflow's limit on a param value, characters
MAX_KEY = 250  # MLflow's limit on a param, metric or tag key, characters
_KEY_OK = re.compile(r"[^0-9A-Za-z_\-. /:]")
#: The experiment tag MLflow 3 reads for an experiment's kind, and the value of a model-training experiment (the
#: values are the UI's ``ExperimentKind`` enum; ``genai_development`` is the other common one).
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
TRAINING_KIND = "custom_model_development"
#: MLflow 3.17's UI picks GenAI or model-training pages from a per-browser switch that defaults to GenAI and
#: overrides the experiment tag; this query parameter selects the training view in the links we print.
TRAINING_VIEW_QUERY = "?workflowType=machine_learning"
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


def sanitize_key(key: str) -> str:
    """A key MLflow accepts: bad characters become ``_``, and so does every path segment a store would read as
    a path (empty: ``labels/``, ``a//b``, a leading ``/``; ``.`` or ``..``: ``a/../b``); a changed or too-long
    key gets an 8-hex md5 suffix.

    The suffix hashes the original key, so two different keys never collide after sanitizing.
    """
    segments = _KEY_OK.sub("_", str(key)).split("/")
    clean = "/".join("_" if segment in ("", ".", "..") else segment for segment in segments)
    if clean == key and len(clean) <= MAX_KEY:
        return clean
    digest = hashlib.md5(str(key).encode("utf-8")).hexdigest()[:8]
    return f"{clean[: MAX_KEY - 10]}-h{digest}"


def sanitize_value(value: Any) -> str:
    """A param value as a string of at most ``MAX_PARAM_VALUE`` chars (long ones end in ``...md5:<hex>``)."""
    text = str(value)
    if len(text) <= MAX_PARAM_VALUE:
        return text
    digest = hashlib.md5(text.encode("utf-8")).hexdigest()
    return f"{text[: MAX_PARAM_VALUE - 40]}...md5:{digest}"


def numeric_leaves(tree: Mapping[str, Any]) -> dict[str, float]:
    """The finite int/float/bool leaves of a nested mapping, flattened with ``/`` (what MLflow can plot)."""
    out = {}
    for key, value in flatten(tree, sep="/").items():
        if isinstance(value, bool | int | float) and math.isfinite(float(value)):
            out[key] = float(value)
    return out


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

    def transformers_model(self, pipeline, name: str, run_id: str | None, input_example: list,
                           pip_requirements: list[str]) -> dict | None:  # fmt: skip
        """Log a transformers ``pipeline`` with MLflow's ``transformers`` flavour (here: nothing; None)."""
        return None

    def register_version(self, model_uri: str, name: str, tags: Mapping[str, Any], alias: str,
                         move_alias: bool, evaluated_alias: str) -> dict | None:  # fmt: skip
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

    def __init__(self, run_id: str, run_name: str | None = None, experiment_id: str | None = None,
                 inputs: Sequence[DataInput] = (), uri: str | None = None) -> None:  # fmt: skip
        import mlflow

        if uri is not None:  # the store another process opened the run in (tracking_sidecar), over any earlier URI
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
        import time

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
        entries = [DatasetInput(Dataset(name=d.path, digest=d.digest, source_type=DATASET_SOURCE_TYPE,
                                        source=json.dumps({"path": d.path, "git_commit": d.git_commit})),
                                tags=[InputTag(DATASET_CONTEXT_TAG, d.context)]) for d in datasets]  # fmt: skip
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
        found = self._client.search_runs([run.info.experiment_id], f"tags.mlflow.parentRunId = '{parent}'",
                                         order_by=["attributes.start_time ASC"], max_results=1000)  # fmt: skip
        return {r.info.run_name: (r.info.run_name, r.info.run_id, r.info.experiment_id) for r in found
                if r.info.run_name in names}

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
        found = self._client.search_runs([self.experiment_id], where, max_results=limit + 1,
                                         order_by=["attributes.start_time DESC"])  # + 1: this run, on a retry
        out = []
        for run in (r for r in found if r.info.run_id != self.run_id):
            try:
                record = json.loads(mlflow.artifacts.load_text(f"{run.info.artifact_uri}/{artifact_file}"))
            except (OSError, ValueError, MlflowException):  # deleted, or the writer died half-way
                continue
            out.append({"run_id": run.info.run_id, "start_ms": run.info.start_time,
                        "git_commit": run.data.tags.get("git_commit", ""), "record": record})
        return out[:limit]

    def transformers_model(self, pipeline, name: str, run_id: str | None, input_example: list,
                           pip_requirements: list[str]) -> dict | None:  # fmt: skip
        """Log ``pipeline`` with MLflow's ``transformers`` flavour under run ``run_id`` (this run when None):
        the model and tokenizer saved as safetensors, ``input_example`` and the signature MLflow infers from it
        (by running the pipeline), ``pip_requirements`` as given (no inference in a subprocess). The pipeline's
        task must be registered with transformers in the loading process (``import clozeline.predict``).
        Returns ``{model_uri, model_id, run_id, signature}``."""
        import mlflow

        info = mlflow.transformers.log_model(transformers_model=pipeline, name=sanitize_key(name),
                                             run_id=run_id or self.run_id, input_example=input_example,
                                             pip_requirements=pip_requirements)  # fmt: skip
        signature = info.signature.to_dict() if info.signature is not None else None
        return {"model_uri": info.model_uri, "model_id": info.model_id, "run_id": run_id or self.run_id,
                "signature": signature}

    def register_version(self, model_uri: str, name: str, tags: Mapping[str, Any], alias: str,
                         move_alias: bool, evaluated_alias: str) -> dict | None:  # fmt: skip
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
        return {"name": name, "version": int(version.version), "alias": alias, "alias_moved": move_alias,
                "alias_version": int(current) if current is not None else None, "evaluated_alias": evaluated_alias}

    @contextmanager
    def child(self, name: str) -> Iterator[MlflowLog]:
        """A nested run (tag ``mlflow.parentRunId``) with this run's inputs; ends FAILED if the block raises."""
        with open_run(name, parent_run_id=self.run_id) as log:
            log.inputs(self._inputs)
            yield log


def tracking_uri(root: Path) -> str:
    """``MLFLOW_TRACKING_URI`` if set, else ``sqlite:///<root>/mlruns.db`` as an absolute path.

    The path is absolute so ``dvc exp run --temp`` (which runs in ``.dvc/tmp/exps/...``) writes to the
    project's database, not a throwaway copy.
    """
    env = os.environ.get("MLFLOW_TRACKING_URI")
    if env:
        return env
    root = Path(root).resolve()
    parts = root.parts
    if ".dvc" in parts:  # inside a dvc temp experiment workspace: use the main workspace
        root = Path(*parts[: parts.index(".dvc")])
    return f"sqlite:///{root / 'mlruns.db'}"


@contextmanager
def store_lock(uri: str) -> Iterator[None]:
    """Hold ``<db>.lock`` while a ``sqlite:///<db>`` store is opened and the experiment fetched or created.

    Two stages that start at once on a fresh database would otherwise both run MLflow's schema migration (one
    dies in alembic) or both create the experiment. Other stores need no lock (a server serialises itself).
    """
    if not uri.startswith("sqlite:///"):
        yield
        return
    from filelock import FileLock

    with FileLock(uri.removeprefix("sqlite:///") + ".lock", timeout=600):
        yield


def training_experiment(client, name: str) -> str:
    """The id of experiment ``name``, created if absent, tagged ``mlflow.experimentKind`` =
    ``custom_model_development`` (MLflow's kind for model training) when it has no kind yet."""
    exp = client.get_experiment_by_name(name)
    exp_id = exp.experiment_id if exp else client.create_experiment(name)
    if exp is None or EXPERIMENT_KIND_TAG not in exp.tags:
        client.set_experiment_tag(exp_id, EXPERIMENT_KIND_TAG, TRAINING_KIND)
    return exp_id


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


class RunKilled(BaseException):
    """Raised from a SIGTERM handler so the active run can be ended KILLED."""


@contextmanager
def open_run(name: str, parent_run_id: str | None = None, experiment: str = "clozeline", root: Path | None = None,
             start_ms: int | None = None) -> Iterator[MlflowLog]:  # fmt: skip
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
