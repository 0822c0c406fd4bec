"""The report's "Since the last run" section, from runs written into a test MLflow store (issue 35 item 5).

Each night is a pipeline run with a report child run, as the flow makes them; the report part is
``since.section`` + ``since.store`` on made claim rows and made ``metrics/{ingest,dedup,split}.json``. Every
expected value below is read off the made inputs by hand.
"""

from __future__ import annotations

import json
from pathlib import Path

import mlflow
import pytest

from tasks.report.claims.grammar import Claim, Metrics
from tasks.report.claims.row import Row
from tasks.report.render import claims_html, since, since_plot
from tasks.report.render import pages as render
from tasks.report.stats.estimates import Estimate
from tasks.tracking import NullLog, open_run

NAN = float("nan")

#: Night 1 and night 2: claim id -> (verdict, difference, CI low, CI high).
NIGHT1 = {
    "a": ("supported", 0.05, 0.01, 0.09),
    "b": ("inconclusive", 0.02, -0.01, 0.05),
    "c": ("supported", 0.10, 0.06, 0.14),
    "old": ("inconclusive", 0.00, -0.02, 0.02),
}
# a: flips supported -> inconclusive, 0.04 inside [0.01, 0.09]; b: same verdict, 0.08 outside [-0.01, 0.05];
# c: 0.11 inside [0.06, 0.14], same verdict; new: only tonight; old: dropped
NIGHT2 = {
    "a": ("inconclusive", 0.04, -0.01, 0.09),
    "b": ("inconclusive", 0.08, 0.03, 0.13),
    "c": ("supported", 0.11, 0.07, 0.15),
    "new": ("supported", 0.20, 0.10, 0.30),
}
#: (ingest docs in, out; dedup in, kept; split train, dev, test of source "news")
DATA1 = (100, 98, 98, 90, 70, 10, 10)
DATA2 = (105, 103, 103, 94, 73, 11, 10)


@pytest.fixture()
def store(tmp_path, monkeypatch):
    """A fresh MLflow file store for this test alone."""
    uri = f"file://{tmp_path / 'mlruns'}"
    before = mlflow.get_tracking_uri()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    mlflow.set_tracking_uri(uri)
    yield uri
    mlflow.set_tracking_uri(before)


def made_row(cid: str, verdict: str, diff: float | None, low: float = NAN, high: float = NAN) -> Row:
    claim = Claim.model_validate(
        {
            "id": cid,
            "statement": "s",
            "evidence": "extrinsic",
            "kind": "difference",
            "task": "news",
            "data_slice": "news/test",
            "metric": "test_macro_f1",
            "treatment": "finetune/news/pretrained/full/cls",
            "baseline": "finetune/news/baseline/majority/labels",
            "ablation": "the encoder",
            "min_effect": 0.0,
            "known_confounders": [],
        }
    )
    difference = Estimate(diff, low, high, 3, "made") if diff is not None else None
    return Row(claim, verdict, "made", difference=difference)


def rows_of(night: dict) -> list[Row]:
    return [made_row(cid, *values) for cid, values in night.items()]


def write_metrics(folder: Path, data: tuple[int, ...]) -> Metrics:
    ing_in, ing_out, dd_in, dd_kept, train, dev, test = data
    folder.mkdir(parents=True, exist_ok=True)
    files = {
        "ingest": {"totals": {"docs_in": ing_in, "docs_out": ing_out, "dropped_total": ing_in - ing_out}},
        "dedup": {"all": {"docs_in": dd_in, "docs_kept": dd_kept, "fraction_removed": 0.1}},
        "split": {"sources": {"news": {"docs_kept": {"train": train, "dev": dev, "test": test}}}},
    }
    for name, body in files.items():
        (folder / f"{name}.json").write_text(json.dumps(body), encoding="utf-8")
    return Metrics(folder)


#: The task names of the made runs, and the tags a report searches its history by.
TASKS = ("cls", "ner")
SAME_TASKS = {since.RECORD_TAG: "true", since.TASKS_TAG: "cls,ner"}


def night(tmp: Path, rows: list[Row], data: tuple[int, ...] | None, history_runs: int = 30, tasks=TASKS):
    """One pipeline run with a report child; returns (pipeline run id, Since, since_last_run.md text)."""
    reports = tmp / "reports"
    reports.mkdir(parents=True, exist_ok=True)
    metrics = write_metrics(tmp / "metrics", data) if data else Metrics(tmp / "no-metrics")
    with open_run("pipeline") as pipeline:
        pipeline.tags({"git_commit": "0123456789abcdef0123"})
        with pipeline.child("report") as report:
            result = since.section(rows, metrics, report, history_runs, reports, 50, tasks)
            since.store(report.pipeline(), result)
    return pipeline.run_id, result, (reports / since.SECTION_FILE).read_text(encoding="utf-8")


def tags_of(run_id: str) -> dict[str, str]:
    return mlflow.MlflowClient().get_run(run_id).data.tags


def grid(result, title: str) -> list[list[str]]:
    found = [body for name, _, body in result.grids if name == title]
    return found[0] if found else []


def test_first_run_says_so_and_records_its_claims(store, tmp_path):
    run_id, result, md = night(tmp_path, rows_of(NIGHT1), DATA1)
    assert result.changes is None
    assert grid(result, "Compared with")[0][0] == run_id
    assert "none: first run" in md and md.startswith("## Since the last run")
    assert result.figure.startswith("not drawn: no earlier run")
    tags = tags_of(run_id)
    assert (tags["verdict_flipped"], tags["verdicts_flipped"], tags["claims_compared_with"]) == ("false", "", "none")
    assert tags["claims_recorded"] == "true"
    text = mlflow.artifacts.load_text(f"{mlflow.get_run(run_id).info.artifact_uri}/{since.RECORD_FILE}")
    stored = json.loads(text)
    assert stored["claims"]["a"] == {
        "verdict": "supported",
        "difference": 0.05,
        "ci_low": 0.01,
        "ci_high": 0.09,
        "n": 3,
    }
    assert stored["data"] == {
        "ingest/docs_in": 100,
        "ingest/docs_out": 98,
        "dedup/docs_in": 98,
        "dedup/docs_kept": 90,
        "split/news/dev": 10,
        "split/news/test": 10,
        "split/news/train": 70,
    }


def test_second_run_lists_flips_moves_new_dropped_and_data_and_tags_the_pipeline_run(store, tmp_path):
    first, _, _ = night(tmp_path / "n1", rows_of(NIGHT1), DATA1)
    second, result, md = night(tmp_path / "n2", rows_of(NIGHT2), DATA2)
    changes = result.changes
    assert changes.previous.run_id == first and changes.previous.git_commit == "0123456789abcdef0123"
    assert changes.flipped == [("a", "supported", "inconclusive")]
    assert changes.moved == ["b"]
    assert (changes.new, changes.dropped) == (["new"], ["old"])
    assert grid(result, "Compared with") == [
        [second, first, changes.previous.started.strftime("%Y-%m-%d %H:%M:%S"), "0123456789ab", "1", "1", "1", "1"]
    ]
    assert grid(result, "Differences outside the earlier CI") == [
        ["b", "0.0200 [-0.0100, 0.0500]", "0.0800 [0.0300, 0.1300]"]
    ]
    assert grid(result, "Dropped claims") == [["old", "inconclusive", "0.0000 [-0.0200, 0.0200]"]]
    assert grid(result, "Data: docs per stage counter") == [
        ["dedup/docs_in", "98", "103", "+5"],
        ["dedup/docs_kept", "90", "94", "+4"],
        ["ingest/docs_in", "100", "105", "+5"],
        ["ingest/docs_out", "98", "103", "+5"],
        ["split/news/dev", "10", "11", "+1"],
        ["split/news/test", "10", "10", "+0"],
        ["split/news/train", "70", "73", "+3"],
    ]
    assert "| a | supported | inconclusive |" in md and "| new | supported | 0.2000 [0.1000, 0.3000] |" in md
    tags = tags_of(second)
    assert (tags["verdict_flipped"], tags["verdicts_flipped"], tags["claims_compared_with"]) == ("true", "a", first)
    assert isinstance(result.figure, Path) and result.figure.read_bytes()[:4] == b"\x89PNG"
    found = mlflow.search_runs(
        filter_string="tags.verdict_flipped = 'true'", output_format="list", search_all_experiments=True
    )
    assert [r.info.run_id for r in found] == [second]  # the runs table's filter


def test_runs_without_a_readable_record_are_skipped(store, tmp_path):
    first, _, _ = night(tmp_path / "n1", rows_of(NIGHT1), DATA1)
    with open_run("pipeline") as idle:  # the report did not rerun: no record, no tag
        idle.tags({"git_commit": "idle"})
    with open_run("pipeline") as lost:  # tagged, but the record is gone
        lost.tags(SAME_TASKS)
    with open_run("pipeline") as broken:  # tagged, but the record is not JSON
        broken.tags(SAME_TASKS)
        broken.text("{not json", since.RECORD_FILE)
    with open_run("pipeline") as odd:  # JSON, but its claims are not {id: {verdict: str}}
        odd.tags(SAME_TASKS)
        odd.text(json.dumps({"claims": {"a": "supported"}}), since.RECORD_FILE)
    _, result, _ = night(tmp_path / "n2", rows_of(NIGHT2), DATA2)
    assert result.changes.previous.run_id == first


def test_a_third_run_compares_with_the_second_and_the_trend_has_every_run(store, tmp_path):
    night(tmp_path / "n1", rows_of(NIGHT1), DATA1)
    second, _, _ = night(tmp_path / "n2", rows_of(NIGHT2), DATA2)
    third = rows_of(NIGHT2 | {"b": ("supported", 0.09, 0.04, 0.14)})  # b flips; 0.09 inside [0.03, 0.13]
    run_id, result, _ = night(tmp_path / "n3", third, DATA2)
    assert result.changes.previous.run_id == second
    assert (result.changes.flipped, result.changes.moved) == ([("b", "inconclusive", "supported")], [])
    assert all(row[3] == "+0" for row in grid(result, "Data: docs per stage counter"))
    assert tags_of(run_id)["verdicts_flipped"] == "b"
    past = since.history(mlflow_log(run_id), 30, TASKS)
    assert [p.claims["b"]["verdict"] for p in past] == ["inconclusive", "inconclusive"]  # newest first
    assert len(since.history(mlflow_log(run_id), 1, TASKS)) == 1
    runs = [(p.started, p.claims) for p in reversed(past)] + [(past[0].started, result.record["claims"])]
    points = since_plot.series(runs)
    assert list(points) == ["a", "b", "c", "new", "old"]
    assert [i for i, _ in points["old"]] == [0] and [i for i, _ in points["new"]] == [1, 2]
    assert [rec["difference"] for _, rec in points["b"]] == [0.02, 0.08, 0.09]


def mlflow_log(run_id: str):
    from tasks.tracking import MlflowLog

    return MlflowLog(run_id, "pipeline", mlflow.get_run(run_id).info.experiment_id)


def test_without_tracking_nothing_is_compared_or_stored(tmp_path):
    (tmp_path / "reports").mkdir()
    result = since.section(rows_of(NIGHT1), Metrics(tmp_path), NullLog(), 30, tmp_path / "reports", 50, TASKS)
    assert grid(result, "Compared with") == [
        ["not tracked", "not compared: the report ran without MLflow tracking, so it has no run history"]
    ]
    since.store(NullLog().pipeline(), result)  # a no-op, no error
    assert result.record["data"] == {}  # no metrics files: no counters


def test_the_section_sits_under_the_claim_table_in_md_and_html(tmp_path):
    rows = rows_of(NIGHT2)
    grids = [("Verdicts that flipped", ["claim", "before", "now"], [["a", "supported", "inconclusive"]])]
    tables = {"Minimal pairs": "not computed: made", render.SINCE: grids}
    md = render.markdown("q?", rows, {}, {}, 0.95, "http://h:1", {}, tables)
    assert md.index("## Since the last run") < md.index("## Claims in detail") < md.index("## Minimal pairs")
    assert md.count("## Since the last run") == 1 and "| a | supported | inconclusive |" in md
    page = claims_html.html_page("q?", rows, {}, {}, 0.95, "http://h:1", {}, tables)
    assert page.index('<h2 id="since">Since the last run</h2>') < page.index("<h2>Claims in detail</h2>")
    assert "<td>a</td><td>supported</td><td>inconclusive</td>" in page


def test_prefect_artifact_notes_a_section_from_an_earlier_run():
    from flows.pipeline import since_markdown

    text = "## Since the last run\n\n| this run | previous run |\n|---|---|\n| run-2 | run-1 |\n"
    assert since_markdown(text, "run-2") == text
    stale = since_markdown(text, "run-3")
    assert stale.startswith("_The report stage did not rerun in this pipeline run") and stale.endswith(text)


@pytest.mark.slow
def test_the_report_stage_under_a_pipeline_run_compares_with_the_previous_one(store, tmp_path):
    """The stage end to end (test_report's made metrics) in three pipeline runs: the same inputs twice (nothing
    changes), then claims.yaml dropping the last standard claim (one dropped claim)."""
    from report_fixtures import CLAIMS_YAML, DEFAULT_CLAIMS, PARAMS
    from tasks import report
    from tasks.config import read_yaml
    from tasks.config.model.report import ReportParams
    from tasks.config.paths import Paths
    from test_report import write_metrics

    paths = Paths(
        data=tmp_path / "data", models=tmp_path / "models", metrics=tmp_path / "metrics", reports=tmp_path / "reports"
    )
    paths.reports.mkdir(parents=True)
    claims = read_yaml(CLAIMS_YAML)
    (paths.reports / "claims.yaml").write_text(json.dumps(claims), encoding="utf-8")
    write_metrics(paths.metrics)
    (tmp_path / "dvc.lock").write_text("schema: '2.0'\nstages: {}\n", encoding="utf-8")
    section = PARAMS.report.model_dump() | {
        "dvc_lock_file": str(tmp_path / "dvc.lock"),
        "figure_dpi": 50,
        "bootstrap_resamples": 1000,
        "slice_bootstrap_resamples": 500,
    }
    cfg = ReportParams.model_validate(section)

    def pipeline_run() -> str:
        with open_run("pipeline") as pipeline, pipeline.child("report") as log:
            report.run(cfg, paths, log)
        return pipeline.run_id

    first, second = pipeline_run(), pipeline_run()
    ids = [c.id for c in DEFAULT_CLAIMS.claims]
    stored = mlflow.artifacts.load_text(f"{mlflow.get_run(second).info.artifact_uri}/{since.RECORD_FILE}")
    assert list(json.loads(stored)["claims"]) == sorted(ids)  # sort_keys
    md = (paths.reports / "claims.md").read_text(encoding="utf-8")
    section_at = md.index("## Since the last run")
    assert md.index("| claim |") < section_at < md.index("## Claims in detail")
    summary_row = next(line for line in md[section_at:].splitlines() if line.startswith(f"| {second} |"))
    assert summary_row.startswith(f"| {second} | {first} | ") and summary_row.endswith("| - | 0 | 0 | 0 | 0 |")
    assert (tags_of(second)["verdict_flipped"], tags_of(second)["claims_compared_with"]) == ("false", first)
    assert (paths.reports / "figures" / since_plot.FILE).exists()
    assert "since_last_run.md" in [p.name for p in report.report_files(paths)]

    claims["drop"] = [ids[-1]]
    (paths.reports / "claims.yaml").write_text(json.dumps(claims), encoding="utf-8")
    third = pipeline_run()
    md = (paths.reports / "since_last_run.md").read_text(encoding="utf-8")
    assert f"| {third} | {second} | " in md and md.count(f"| {ids[-1]} | ") == 1  # the Dropped claims table
    assert "### Dropped claims" in md and "### New claims" not in md and "### Verdicts that flipped" not in md


@pytest.mark.slow
def test_the_pipeline_run_publishes_the_section_as_a_prefect_markdown_artifact(store, tmp_path, monkeypatch):
    """``publish_report`` inside a flow (a Prefect test server): the section the report wrote for this pipeline
    run is the ``since-last-run`` artifact as written, and it is logged to the run under ``report/``."""
    import asyncio

    from prefect import flow, get_client
    from prefect.testing.utilities import prefect_test_harness

    import flows.pipeline as pipeline_module

    (tmp_path / "reports").mkdir()
    (tmp_path / "reports" / "claims.md").write_text("# clozeline claim table\n", encoding="utf-8")
    monkeypatch.setattr(pipeline_module, "ROOT", tmp_path)

    @flow(name="publish-only")
    def publish_only(run_id: str) -> None:
        pipeline_module.publish_report(run_id)

    async def latest_artifacts() -> list:
        async with get_client() as client:
            return await client.read_latest_artifacts()

    with open_run("pipeline") as run:
        text = f"## Since the last run\n\n| this run | previous run |\n|---|---|\n| {run.run_id} | none: first run |\n"
        (tmp_path / "reports" / since.SECTION_FILE).write_text(text, encoding="utf-8")
        with prefect_test_harness(server_startup_timeout=120):
            publish_only(run.run_id)
            latest = {a.key: a.data for a in asyncio.run(latest_artifacts())}
    assert latest["since-last-run"] == text and latest["claim-table"] == "# clozeline claim table\n"
    logged = [a.path for a in mlflow.MlflowClient().list_artifacts(run.run_id, "report")]
    assert f"report/{since.SECTION_FILE}" in logged


def test_a_run_of_other_tasks_is_not_compared_and_names_none_of_them(store, tmp_path):
    # a user who replaced the default tasks saw the old run's cls/ner claims listed as dropped, and its
    # bbc_news/wnut16 counters, in "Since the last run" (the report must be of this run's tasks only)
    night(tmp_path / "n1", rows_of(NIGHT1), DATA1)
    run_id, result, text = night(tmp_path / "n2", rows_of(NIGHT2), DATA2, tasks=("shop_ner",))
    assert result.changes is None and "dropped" not in text
    assert tags_of(run_id)[since.TASKS_TAG] == "shop_ner" and result.record["tasks"] == ["shop_ner"]
    _, again, _ = night(tmp_path / "n3", rows_of(NIGHT2), DATA2, tasks=("shop_ner",))
    assert again.changes.previous.run_id == run_id  # the new study's own history
