"""The Prefect flow: stage order, output forwarding, and a cron deployment run once through Prefect."""

import asyncio
import io
import logging
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_stage_names_follow_dvc_yaml_and_expand_foreach():
    from tasks.common.provenance import stage_names

    assert stage_names(ROOT) == [
        "ingest",
        "dedup",
        "split",
        "leakage",
        "tokenizer",
        "tokenize",
        "pretrain",
        "finetune@cls",
        "finetune@ner",
        "probe",
        "export@cls",
        "export@ner",
        "report",
        "release@cls",
        "release@ner",
    ]


def test_forward_output_logs_lines_and_throttles_progress_bars(caplog):
    from flows.pipeline import forward_output  # the first prefect import replaces the root logger's handlers

    bars = "".join(f"\rdedup:  {p}%|###| {p}/100 [00:01<00:00, 90.0it/s]" for p in range(1, 101))
    stream = io.BufferedReader(io.BytesIO(f"Running stage 'dedup':\n{bars}\nUpdating lock file\n".encode()))
    logger = logging.getLogger("test-forward")
    logger.addHandler(caplog.handler)  # so caplog sees the records whatever prefect did to the root logger
    logger.propagate = False  # and sees each record once
    try:
        with caplog.at_level(logging.INFO, logger="test-forward"):
            tail = forward_output(stream, logger, "dedup")
    finally:
        logger.removeHandler(caplog.handler)
        logger.propagate = True
    messages = [r.getMessage() for r in caplog.records]
    assert messages[0] == "[dedup] Running stage 'dedup':"
    assert messages[-1] == "[dedup] Updating lock file"
    assert 1 <= sum("%|" in m for m in messages) < 5  # 100 refreshes within 5 s collapse to about one
    assert tail[-1] == "Updating lock file"


def test_dvc_env_puts_venv_first_and_never_exports_mlflow_run_id(monkeypatch):
    import sys

    from flows.pipeline import dvc_env

    monkeypatch.setenv("MLFLOW_RUN_ID", "should-not-leak")
    env = dvc_env("parent123")
    assert "MLFLOW_RUN_ID" not in env
    assert env["CLOZELINE_PARENT_RUN_ID"] == "parent123"
    assert env["PATH"].split(":")[0] == str(Path(sys.executable).parent)


@pytest.mark.slow
def test_cron_deployment_runs_the_flow_once(tmp_path):
    """A deployment with a cron schedule is registered, and one run through it completes (no stages selected)."""
    from prefect import get_client
    from prefect.deployments import run_deployment
    from prefect.runner import Runner
    from prefect.testing.utilities import prefect_test_harness

    from flows.pipeline import pipeline

    async def scenario():
        runner = Runner(name="test-runner")
        deployment_id = await runner.aadd_flow(pipeline, name="nightly", cron="0 3 * * *", parameters={"stages": []})
        async with get_client() as client:
            deployment = await client.read_deployment(deployment_id)
            run = await run_deployment(f"{pipeline.name}/nightly", timeout=0)
            await runner.start(run_once=True, webserver=False)  # one poll: picks up and executes the run
            finished = await client.read_flow_run(run.id)
        return deployment, finished

    with prefect_test_harness(server_startup_timeout=120):
        deployment, finished = asyncio.run(scenario())
    assert [s.schedule.cron for s in deployment.schedules] == ["0 3 * * *"]
    assert finished.state.is_completed(), finished.state


@pytest.mark.parametrize("profile_applied", [False, True])
def test_serve_warns_when_the_scheduled_params_can_move_documents_between_splits(
    tmp_path, monkeypatch, capsys, profile_applied
):
    import yaml

    from flows import pipeline

    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["split"].update(assignment="hash", ledger=True, task_sizing="fractions") if profile_applied else params[
        "split"
    ].update(ledger=False)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    monkeypatch.setattr(pipeline, "ROOT", tmp_path)
    pipeline.warn_if_splits_can_move()
    warned = "split.ledger is false" in capsys.readouterr().err
    assert warned is not profile_applied
