"""The Prefect flow: one task per DVC stage, in ``dvc.yaml`` order.

DVC owns the graph and the cache: each task runs ``dvc repro --single-item <stage>``, so an up-to-date stage
is skipped by DVC, and Prefect's own result caching stays off. The flow opens the parent MLflow run and
hands its id to the stage processes through ``CLOZELINE_PARENT_RUN_ID``; at the end it publishes the claim table
and the report's "Since the last run" section (``tasks.report.since``) as Prefect markdown artifacts.

Usage::

    python -m flows.pipeline                       # run once, no Prefect server needed
    python -m flows.pipeline serve --cron "0 3 * * *"   # scheduled deployment (needs a Prefect server)
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE

from flows.snapshot import snapshot
from tasks.common.provenance import git_commit, stage_names
from tasks.config import load_params
from tasks.tracking import PARENT_RUN_ENV, MlflowLog, open_run, runs_page_url

ROOT = Path(__file__).resolve().parents[1]


def dvc_env(parent_run_id: str | None) -> dict[str, str]:
    """Environment for a ``dvc repro`` subprocess: the venv's bin first on PATH, the parent MLflow run id."""
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.pop("MLFLOW_RUN_ID", None)  # would make every stage write into one run
    if parent_run_id:
        env[PARENT_RUN_ENV] = parent_run_id
    return env


PROGRESS_EVERY_SECONDS = 5.0  # forward a progress-bar refresh at most this often


def forward_output(stream, logger, stage: str) -> list[str]:
    """Log each output line of a stage; tqdm's carriage-return refreshes are throttled. Returns the last 30."""
    tail: list[str] = []
    last_progress = 0.0
    pending = b""
    for chunk in iter(lambda: stream.read1(4096), b""):
        *lines, pending = re.split(rb"[\r\n]", pending + chunk)
        for raw in lines:
            line = raw.decode("utf-8", "replace").rstrip()
            is_bar = "%|" in line or "it/s]" in line or "s/it]" in line
            if not line or (is_bar and time.monotonic() - last_progress < PROGRESS_EVERY_SECONDS):
                continue
            last_progress = time.monotonic() if is_bar else last_progress
            logger.info("[%s] %s", stage, line)
            tail = (tail + [line])[-30:]
    if pending.strip():
        logger.info("[%s] %s", stage, pending.decode("utf-8", "replace").rstrip())
    return tail


@task(cache_policy=NO_CACHE, log_prints=False)
def repro_stage(stage: str, position: str, parent_run_id: str | None) -> None:
    """``dvc repro --single-item <stage>``, forwarding its output to the Prefect run logger.

    Raises ``RuntimeError`` with the last output lines when DVC exits non-zero.
    """
    logger = get_run_logger()
    logger.info("stage %s: %s", position, stage)
    started = time.monotonic()
    cmd = [sys.executable, "-m", "dvc", "repro", "--single-item", stage]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=dvc_env(parent_run_id), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    tail = forward_output(proc.stdout, logger, stage)
    if proc.wait() != 0:
        raise RuntimeError(f"dvc repro {stage} failed (exit {proc.returncode}):\n" + "\n".join(tail))
    logger.info("stage %s: %s done in %.1f s", position, stage, time.monotonic() - started)


@task(cache_policy=NO_CACHE)
def snapshot_step(run_id: str) -> dict[str, str]:
    """Tag the pipeline run with the dvc.lock md5s, log the data outputs as its dataset inputs, push to the DVC
    remote, optionally git-commit."""
    params = load_params(ROOT / "params.yaml")
    tags = snapshot(ROOT, params.snapshot, MlflowLog(run_id), params.paths.data)
    get_run_logger().info("snapshot: %d outputs recorded, remote: %s", len(tags) - 1, tags["dvc.remote"])
    return tags


#: The report's "Since the last run" section (``tasks.report.since``), also this run's second Prefect artifact.
SINCE_FILE = "since_last_run.md"
#: The report files the pipeline run carries as artifacts (under ``report/``), besides every figure.
REPORT_ARTIFACTS = ("claims.md", "claims.html", "claims.yaml", "summary.md", SINCE_FILE)


def since_markdown(text: str, run_id: str) -> str:
    """The "Since the last run" artifact of pipeline run ``run_id``: the section as the report wrote it, or, when
    the report stage did not rerun in this run (the section names another run as "this run"), that section
    under a note saying so."""
    if run_id in text:
        return text
    return ("_The report stage did not rerun in this pipeline run (nothing it reads changed, so no claim changed); "
            "below is the section of the last run that reran it._\n\n" + text)


@task(cache_policy=NO_CACHE)
def publish_report(run_id: str) -> None:
    """Log the claim table (md, html, yaml), its summary, "Since the last run", figures and plot data to the
    pipeline's MLflow run, set the summary as the run's description, and publish the table and the section
    as Prefect markdown artifacts (``claim-table``, ``since-last-run``)."""
    reports = ROOT / "reports"
    claims = reports / "claims.md"
    if not claims.exists():
        get_run_logger().warning("no %s: the report stage did not run", claims)
        return
    run_log = MlflowLog(run_id)
    for name in REPORT_ARTIFACTS:
        run_log.artifact(reports / name, "report")
    run_log.artifact(reports / "figures", "report/figures")
    run_log.artifact(reports / "plots", "report/plots")
    if (reports / "summary.md").exists():
        run_log.note((reports / "summary.md").read_text(encoding="utf-8"))
    create_markdown_artifact(markdown=claims.read_text(encoding="utf-8"), key="claim-table",
                             description="clozeline claim table")
    if (reports / SINCE_FILE).exists():
        create_markdown_artifact(markdown=since_markdown((reports / SINCE_FILE).read_text(encoding="utf-8"), run_id),
                                 key="since-last-run", description="clozeline: what changed since the last run")


@flow(name="clozeline-pipeline", log_prints=True)
def pipeline(stages: list[str] | None = None) -> list[str]:
    """Run the stages of ``dvc.yaml`` in order (all when ``stages`` is None), then snapshot and publish.

    ``stages`` may name stages (``finetune``) or foreach items (``finetune@cls``); returns those run.
    """
    params = load_params(ROOT / "params.yaml")
    wanted = [s for s in stage_names(ROOT) if stages is None or s in stages or s.split("@")[0] in stages]
    retrying = repro_stage.with_options(retries=params.pipeline.retries,
                                        retry_delay_seconds=params.pipeline.retry_delay_seconds)
    with open_run("pipeline", root=ROOT) as run:
        run.tags({"git_commit": git_commit(ROOT), "stages": ",".join(wanted)})
        for index, stage in enumerate(wanted, start=1):
            retrying(stage, f"{index}/{len(wanted)}", run.run_id)
        snapshot_step(run.run_id)
        publish_report(run.run_id)
    return wanted


def warn_if_splits_can_move() -> None:
    """A schedule over a growing corpus without the split ledger can move a doc from one run's test set into the
    next run's training set: say so before serving (the params are read again at each run)."""
    split = load_params(ROOT / "params.yaml").split
    if not split.ledger:
        print(f"clozeline: warning: split.ledger is false (assignment: {split.assignment}): scheduled runs over a "
              "growing corpus can move documents between splits; apply the scheduled profile first "
              "(make run PROFILE=scheduled, which writes split: {assignment: hash, ledger: true} to params.yaml)",
              file=sys.stderr)


def main(argv: list[str] | None = None) -> None:
    """CLI: run the flow once, or ``serve --cron`` a scheduled deployment."""
    parser = argparse.ArgumentParser(prog="python -m flows.pipeline")
    sub = parser.add_subparsers(dest="command")
    serve = sub.add_parser("serve", help="serve a scheduled deployment (needs PREFECT_API_URL)")
    serve.add_argument("--cron", default="0 3 * * *", help="cron schedule, default: 03:00 daily")
    serve.add_argument("--name", default="clozeline-nightly")
    args = parser.parse_args(argv)
    if args.command == "serve":
        warn_if_splits_can_move()
        pipeline.serve(name=args.name, cron=args.cron)
    else:
        pipeline()
        print(f"clozeline: done. Claim table: {ROOT / 'reports' / 'claims.html'} (and claims.md); "
              f"runs: `make mlflow-ui`, then {runs_page_url(ROOT)}")


if __name__ == "__main__":
    main()
