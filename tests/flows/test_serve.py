"""A schedule that is safe by default: ``python -m flows.pipeline serve`` refuses to start without a Prefect server
that can schedule (it used to log "Cannot schedule flows on an ephemeral server" and poll forever); its runs write
the scheduled profile into params.yaml through the flow unless told not to; ``--profile`` writes a profile the same
way, changing only its keys; ``--help`` says what the commands and options do."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from flows import pipeline as flow_module
from flows import profiles
from tasks.config import load_params

ROOT = Path(__file__).resolve().parents[2]


def cli(*args: str, **env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"} | env
    return subprocess.run(
        [sys.executable, "-m", "flows.pipeline", *args],
        cwd=ROOT,
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_serve_without_a_server_exits_at_once_with_one_line():
    done = cli("serve", "--cron", "0 3 * * *")  # what the user types, PREFECT_API_URL unset
    assert done.returncode == 2, done.stdout + done.stderr
    assert (
        done.stderr.startswith(
            "clozeline: serve needs a Prefect server to schedule runs, and PREFECT_API_URL is not set"
        )
        and len(done.stderr.strip().splitlines()) == 1
    ), done.stderr


def test_serve_with_a_server_that_does_not_answer_exits_with_one_line(capsys):
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings({PREFECT_API_URL: "http://127.0.0.1:9/api"}):  # port 9: nothing listens
        assert flow_module.main(["serve"]) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith("clozeline: serve: the Prefect server at PREFECT_API_URL=http://127.0.0.1:9/api does not answer")
        and len(err.strip().splitlines()) == 1
    ), err


def helped(capsys, *argv: str) -> str:
    with pytest.raises(SystemExit) as done:
        flow_module.main([*argv, "--help"])
    assert done.value.code == 0
    return " ".join(capsys.readouterr().out.split())


def test_help_describes_the_commands_and_every_option(capsys):
    text = helped(capsys)
    assert "With no command: one full run now" in text and "--profile NAME apply profiles/NAME.yaml" in text
    assert "serve serve a scheduled deployment: needs a Prefect server" in text
    serve = helped(capsys, "serve")
    for option in (
        "--cron CRON cron schedule",
        "--name NAME deployment name",
        "--profile NAME apply",
        "--no-scheduled-profile opt out of the scheduled profile",
    ):
        assert option in serve, option


def served(monkeypatch, tmp_path, *argv: str) -> dict:
    """``main(["serve", *argv])`` with a server that answers and ``Flow.serve`` recorded; returns its arguments."""
    shutil.copyfile(ROOT / "params.yaml", tmp_path / "params.yaml")
    monkeypatch.setattr(flow_module, "ROOT", tmp_path)
    monkeypatch.setattr(flow_module, "scheduler_problem", lambda: None)
    calls = []
    monkeypatch.setattr(flow_module.pipeline, "serve", lambda **kwargs: calls.append(kwargs))
    assert flow_module.main(["serve", *argv]) == 0
    [call] = calls
    return call


def test_serve_runs_the_flow_with_the_scheduled_profile_unless_opted_out(monkeypatch, tmp_path, capsys):
    assert served(monkeypatch, tmp_path, "--cron", "5 4 * * *") == {
        "name": "clozeline-nightly",
        "cron": "5 4 * * *",
        "parameters": {"profiles": ["scheduled"]},
    }
    assert "split.ledger is false" not in capsys.readouterr().err  # the default params with the profile: kept
    opted_out = served(monkeypatch, tmp_path, "--no-scheduled-profile", "--profile", "cpu")
    assert opted_out["parameters"] == {"profiles": ["cpu"]}
    assert "clozeline: warning: split.ledger is false" in capsys.readouterr().err


def test_a_profile_is_written_into_params_yaml_changing_only_its_keys(tmp_path):
    params = tmp_path / "params.yaml"
    shutil.copyfile(ROOT / "params.yaml", params)
    before = params.read_text(encoding="utf-8").splitlines()
    values = profiles.checked_values(["scheduled"], params)
    assert profiles.write_values(values, params) == {
        "split.assignment": "hash",
        "split.ledger": True,
        "split.task_sizing": "fractions",
        "tokenizer.vocab_from": "train_once",
    }
    after = params.read_text(encoding="utf-8").splitlines()
    changed = [(old, new) for old, new in zip(before, after) if old != new]
    assert len(after) == len(before) and len(changed) == 4  # every other line, comment and list style kept
    for old, new in changed:  # the value replaced, its comment where it was
        assert old.split("#")[1:] == new.split("#")[1:] and old.split(":")[0] == new.split(":")[0]
    assert load_params(params) == load_params(ROOT / "params.yaml", values)
    assert yaml.safe_load(params.read_text())["split"]["ledger"] is True
    stamp = params.stat().st_mtime_ns
    assert profiles.write_values(values, params) == {} and params.stat().st_mtime_ns == stamp  # a second night


def test_a_profile_that_does_not_fit_stops_the_run_with_one_line(capsys):
    assert flow_module.main(["--profile", "nosuch"]) == 2
    assert capsys.readouterr().err.startswith("clozeline: profile 'nosuch': no profiles/nosuch.yaml")


def test_a_cron_that_does_not_parse_stops_serve_before_the_server_check(capsys):
    # it was a pydantic traceback from Flow.serve, after the server check passed
    for cron in ("61 3 * * *", "not a cron", "0 3 * *"):
        with pytest.raises(SystemExit) as done:
            flow_module.main(["serve", "--cron", cron])
        assert done.value.code == 2
        assert capsys.readouterr().err.strip().splitlines()[-1] == (
            f"python -m flows.pipeline serve: error: argument --cron: not a cron schedule: {cron!r} (5 fields: minute "
            "hour day-of-month month day-of-week, e.g. '0 3 * * *'; or @daily, @hourly ...)"
        )
