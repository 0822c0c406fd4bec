"""Fixtures of the report tests: ``workspace``, a temporary project (the shipped claims.yaml, a dvc.lock, the report
params) that test_report.py and test_report_ablations.py write metrics into."""

from __future__ import annotations

import shutil

import pytest
import yaml

from report_fixtures import CLAIMS_YAML, PARAMS
from tasks.config.model.report import ReportParams
from tasks.config.paths import Paths


@pytest.fixture()
def workspace(tmp_path):
    paths = Paths(
        data=tmp_path / "data", models=tmp_path / "models", metrics=tmp_path / "metrics", reports=tmp_path / "reports"
    )
    paths.reports.mkdir(parents=True)
    shutil.copy(CLAIMS_YAML, paths.reports / "claims.yaml")
    lock = {
        "schema": "2.0",
        "stages": {
            "finetune@cls": {
                "cmd": "python -m tasks finetune cls",
                "deps": [
                    {"path": "data/tokenize", "md5": "aaaa.dir"},
                    {"path": "tasks/finetune/__init__.py", "md5": "code"},
                ],
            },
            "ingest": {"cmd": "python -m tasks ingest", "outs": [{"path": "data/ingest", "md5": "bbbb.dir"}]},
        },
    }
    (tmp_path / "dvc.lock").write_text(yaml.safe_dump(lock), encoding="utf-8")
    section = PARAMS.report.model_dump()  # with the default tasks and switches (ReportParams.setup)
    section.update(dvc_lock_file=str(tmp_path / "dvc.lock"), figure_dpi=50, max_diverged_seed_fraction=0.5)
    return ReportParams.model_validate(section), paths
