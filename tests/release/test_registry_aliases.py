"""The registry aliases of the release stage (``MlflowLog.register_version``), in a temporary sqlite store: every
registered (evaluated) version is reachable as ``models:/<name>@evaluated``, and ``candidate`` names a version
only once a gate has passed. A default run whose gate fails must still give the README's example a model."""

from __future__ import annotations

import mlflow
import pytest
from mlflow.exceptions import MlflowException

from tasks.config.model.release import ReleaseParams
from tasks.tracking import open_run


class Constant(mlflow.pyfunc.PythonModel):
    """A stand-in for an exported model: answers every input with its own name, so a load shows which version."""

    def __init__(self, answer: str) -> None:
        self.answer = answer

    def predict(self, context, model_input: list[str], params=None) -> list[str]:
        return [self.answer] * len(model_input)


def _register(log, answer: str, gate_passed: bool) -> dict:
    with mlflow.start_run(run_id=log.run_id):
        info = mlflow.pyfunc.log_model(name="model", python_model=Constant(answer), pip_requirements=["mlflow"])
    return log.register_version(
        info.model_uri, "clozeline-cls", {"gate": str(gate_passed)}, "candidate", gate_passed, "evaluated"
    )


def _answer(uri: str) -> str:
    return mlflow.pyfunc.load_model(uri).predict(["a document"])[0]


@pytest.fixture
def store(tmp_path, monkeypatch):
    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    mlflow.set_tracking_uri(uri)
    return uri


def test_evaluated_names_every_version_and_candidate_only_those_whose_gate_passed(store):
    with open_run("release@cls") as log:
        first = _register(log, "v1", gate_passed=False)
    assert first == {
        "name": "clozeline-cls",
        "version": 1,
        "alias": "candidate",
        "alias_moved": False,
        "alias_version": None,
        "evaluated_alias": "evaluated",
    }
    assert _answer("models:/clozeline-cls@evaluated") == "v1"  # the README's example on a default run
    with pytest.raises(MlflowException):  # a failed gate on a fresh store: no candidate
        mlflow.pyfunc.load_model("models:/clozeline-cls@candidate")
    with open_run("release@cls") as log:
        second = _register(log, "v2", gate_passed=True)
    assert (second["version"], second["alias_version"]) == (2, 2)
    with open_run("release@cls") as log:
        third = _register(log, "v3", gate_passed=False)
    assert (third["version"], third["alias_version"]) == (3, 2)
    assert (_answer("models:/clozeline-cls@evaluated"), _answer("models:/clozeline-cls@candidate")) == ("v3", "v2")


def test_the_two_aliases_must_differ():
    with pytest.raises(ValueError, match="both 'candidate'"):
        ReleaseParams(
            registered_model_prefix="clozeline-",
            alias="candidate",
            evaluated_alias="candidate",
            dvc_lock_file="dvc.lock",
        )
