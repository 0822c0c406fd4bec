"""Which MLflow store the stages log to (``tracking_uri``), the lock that serialises a fresh sqlite store's
opening (``store_lock``), and the experiment the runs go to, tagged as model training (``training_experiment``)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from filelock import FileLock

#: The experiment tag MLflow 3 reads for an experiment's kind, and the value of a model-training experiment (the
#: values are the UI's ``ExperimentKind`` enum; ``genai_development`` is the other common one).
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
TRAINING_KIND = "custom_model_development"


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
    with FileLock(uri.removeprefix("sqlite:///") + ".lock", timeout=600):
        yield


def training_experiment(client: Any, name: str) -> str:
    """The id of experiment ``name``, created if absent, tagged ``mlflow.experimentKind`` =
    ``custom_model_development`` (MLflow's kind for model training) when it has no kind yet."""
    exp = client.get_experiment_by_name(name)
    exp_id = exp.experiment_id if exp else client.create_experiment(name)
    if exp is None or EXPERIMENT_KIND_TAG not in exp.tags:
        client.set_experiment_tag(exp_id, EXPERIMENT_KIND_TAG, TRAINING_KIND)
    return exp_id
