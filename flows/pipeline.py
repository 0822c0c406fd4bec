"""The Prefect flow: one task per DVC stage, in ``dvc.yaml`` order.

DVC owns the graph and the cache: each task runs ``dvc repro --single-item <stage>``, so an up-to-date stage
is skipped by DVC, and Prefect's own result caching stays off. The flow opens the parent MLflow run and
hands its id to the stage processes through ``CLOZELINE_PARENT_RUN_ID``; at the end it records the snapshot
(``flows/snapshot.py``) and publishes the claim table and the report's "Since the last run" section
(``tasks.report.render.since``) as Prefect markdown artifacts. A profile (``--profile NAME``: ``profiles/NAME.yaml``) is
written into params.yaml by the flow before the stages run (``flows.profiles.write_values``: only the keys it
changes, comments kept), so dvc.lock, git and the pipeline run's tags record it.

Usage::

    python -m flows.pipeline                            # one full run of every stage, no Prefect server needed
    python -m flows.pipeline --profile gpu              # the same with profiles/gpu.yaml written into params.yaml
    python -m flows.pipeline serve --cron "0 3 * * *"   # a nightly deployment: needs a Prefect server
                                                        #   (PREFECT_API_URL); applies the scheduled profile
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE
from prefect.client.orchestration import get_client
from prefect.client.schemas.schedules import CronSchedule
from prefect.settings import PREFECT_API_URL

from flows import profiles as profile_files
from flows.snapshot import snapshot
from tasks.common.provenance import git_commit, stage_names
from tasks.config import ParamsError, load_params
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
    proc = subprocess.Popen(cmd, cwd=ROOT, env=dvc_env(parent_run_id), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
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


#: The report's "Since the last run" section (``tasks.report.render.since``), also this run's second Prefect artifact.
SINCE_FILE = "since_last_run.md"
#: The report files the pipeline run carries as artifacts (under ``report/``), besides every figure.
REPORT_ARTIFACTS = ("claims.md", "claims.html", "claims.yaml", "summary.md", SINCE_FILE)


def since_markdown(text: str, run_id: str) -> str:
    """The "Since the last run" artifact of pipeline run ``run_id``: the section as the report wrote it, or, when
    the report stage did not rerun in this run (the section names another run as "this run"), that section
    under a note saying so."""
    if run_id in text:
        return text
    return (
        "_The report stage did not rerun in this pipeline run (nothing it reads changed, so no claim changed); "
        "below is the section of the last run that reran it._\n\n" + text
    )


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
    create_markdown_artifact(
        markdown=claims.read_text(encoding="utf-8"), key="claim-table", description="clozeline claim table"
    )
    if (reports / SINCE_FILE).exists():
        create_markdown_artifact(
            markdown=since_markdown((reports / SINCE_FILE).read_text(encoding="utf-8"), run_id),
            key="since-last-run",
            description="clozeline: what changed since the last run",
        )


@flow(name="clozeline-pipeline", log_prints=True)
def pipeline(stages: list[str] | None = None, profiles: list[str] | None = None) -> list[str]:
    """Write ``profiles`` (names under ``profiles/``, merged in order) into params.yaml, then run the stages of
    ``dvc.yaml`` in order (all when ``stages`` is None), then snapshot and publish.

    ``stages`` may name stages (``finetune``) or foreach items (``finetune@cls``); returns those run. Raises
    ``ParamsError`` for a profile that does not validate or asks for a device that is not here.
    """
    changed = apply_profiles(profiles or [])
    params = load_params(ROOT / "params.yaml")
    for warning in params.source_warnings():
        get_run_logger().warning("clozeline: warning: %s", warning)
    wanted = [s for s in stage_names(ROOT) if stages is None or s in stages or s.split("@")[0] in stages]
    retrying = repro_stage.with_options(
        retries=params.pipeline.retries, retry_delay_seconds=params.pipeline.retry_delay_seconds
    )
    with open_run("pipeline", root=ROOT) as run:
        run.tags(
            {
                "git_commit": git_commit(ROOT),
                "stages": ",".join(wanted),
                "profiles": ",".join(profiles or []),
                "profile_changed": json.dumps(changed, sort_keys=True),
            }
        )
        for index, stage in enumerate(wanted, start=1):
            retrying(stage, f"{index}/{len(wanted)}", run.run_id)
        snapshot_step(run.run_id)
        publish_report(run.run_id)
    return wanted


def apply_profiles(profiles: list[str]) -> dict:
    """Write ``profiles`` into params.yaml (``flows.profiles.write_values``, after ``checked_values``: params and
    GPUs); returns the dotted keys changed, each logged."""
    if not profiles:
        return {}
    changed = profile_files.write_values(
        profile_files.checked_values(profiles, ROOT / "params.yaml"), ROOT / "params.yaml"
    )
    for key, value in changed.items():
        get_run_logger().info("profile %s: params.yaml %s = %s", ",".join(profiles), key, json.dumps(value))
    return changed


def warn_if_splits_can_move(values: dict | None = None) -> None:
    """A schedule over a growing corpus without the split ledger can move a doc from one run's test set into the
    next run's training set: say so before serving (params.yaml with ``values``, the profiles' values, which each
    run writes again)."""
    split = load_params(ROOT / "params.yaml", values).split
    if not split.ledger:
        print(
            f"clozeline: warning: split.ledger is false (assignment: {split.assignment}): scheduled runs over a "
            "growing corpus can move documents between splits (serve without --no-scheduled-profile applies "
            "profiles/scheduled.yaml: split: {assignment: hash, ledger: true, task_sizing: fractions})",
            file=sys.stderr,
        )


def scheduler_problem() -> str | None:
    """Why ``serve`` could not fire on schedule, or None: Prefect schedules runs only through a server at
    ``PREFECT_API_URL``; without one it serves on a temporary (ephemeral) server that never fires a schedule, and
    polls forever."""
    url = PREFECT_API_URL.value()
    if not url:
        return (
            "serve needs a Prefect server to schedule runs, and PREFECT_API_URL is not set: start one (`prefect "
            "server start`) and `export PREFECT_API_URL=http://127.0.0.1:4200/api`, or run once without serve"
        )
    failure = asyncio.run(_healthcheck())
    if failure is not None:
        return (
            f"serve: the Prefect server at PREFECT_API_URL={url} does not answer ({failure}); start it, or fix the URL"
        )
    return None


async def _healthcheck() -> Exception | None:
    async with get_client() as client:
        return await client.api_healthcheck()


def serve_profiles(args: argparse.Namespace) -> list[str]:
    """The profiles a scheduled run writes: ``scheduled`` first unless ``--no-scheduled-profile``, then ``--profile``
    in order (a later one wins a key)."""
    return ([] if args.no_scheduled_profile else ["scheduled"]) + args.profiles + args.serve_profiles


PROFILE_HELP = (
    "apply profiles/NAME.yaml ({names}): the flow writes the values it changes into params.yaml before the "
    "stages run (as `dvc exp run -S` would, other lines and comments kept), so params.yaml, dvc.lock and "
    "the MLflow pipeline run (tags profiles, profile_changed) record them; repeat it to merge several, a "
    "later one winning a key"
)


def cron_schedule(text: str) -> str:
    """``text`` if Prefect's ``CronSchedule`` (what ``Flow.serve`` builds) takes it; else ``ArgumentTypeError``, so a
    bad ``--cron`` is argparse's one-line error before the server check, not a traceback from ``serve``."""
    try:
        CronSchedule(cron=text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a cron schedule: {text!r} (5 fields: minute hour day-of-month month day-of-week, e.g. '0 3 * * *'; "
            "or @daily, @hourly ...)"
        ) from None
    return text


def paragraphs(*texts: str) -> str:
    """``texts`` as paragraphs wrapped at 100 columns, a blank line apart (argparse's raw description)."""
    return "\n\n".join(textwrap.fill(text, 100) for text in texts)


def parser() -> argparse.ArgumentParser:
    """The command line: no command = one full run; ``serve`` = a scheduled deployment."""
    names = ", ".join(profile_files.names())
    main_parser = argparse.ArgumentParser(
        prog="python -m flows.pipeline",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=paragraphs(
            "Run the clozeline pipeline (every dvc.yaml stage, in order, each by `dvc repro --single-item`) as a "
            "Prefect flow, with a parent MLflow run, the snapshot step and the claim table as artifacts.",
            "With no command: one full run now (no Prefect server needed); DVC skips the stages whose inputs did not "
            "change.",
        ),
        epilog=paragraphs(
            "Examples: `python -m flows.pipeline`, `python -m flows.pipeline --profile gpu`, "
            "`python -m flows.pipeline serve --cron '0 3 * * *'` (see `serve --help`)."
        ),
    )
    main_parser.add_argument(
        "--profile", dest="profiles", action="append", default=[], metavar="NAME", help=PROFILE_HELP.format(names=names)
    )
    commands = main_parser.add_subparsers(dest="command", title="commands")
    serve = commands.add_parser(
        "serve",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        help="serve a scheduled deployment: needs a Prefect server (PREFECT_API_URL), refuses to start without one",
        description=paragraphs(
            "Serve a deployment that runs the whole flow on a cron schedule, each run with the parent MLflow run and "
            "the snapshot step. Needs a Prefect server at PREFECT_API_URL (`prefect server start`): without one it "
            "exits with one line.",
            "Each run first writes profiles/scheduled.yaml into params.yaml (split: {assignment: hash, ledger: true, "
            "task_sizing: fractions}: no document ever moves split; tokenizer.vocab_from: train_once: the first "
            "run's vocabulary is kept), then the --profile ones; --no-scheduled-profile opts out.",
        ),
    )
    serve.add_argument(
        "--cron", default="0 3 * * *", type=cron_schedule, help="cron schedule (default: %(default)s, 03:00 daily)"
    )
    serve.add_argument("--name", default="clozeline-nightly", help="deployment name (default: %(default)s)")
    serve.add_argument(
        "--profile",
        dest="serve_profiles",
        action="append",
        default=[],
        metavar="NAME",
        help=PROFILE_HELP.format(names=names) + "; written after the scheduled profile",
    )
    serve.add_argument(
        "--no-scheduled-profile",
        action="store_true",
        help="opt out of the scheduled profile: runs use params.yaml as it is, so a document can move "
        "between train and test from one night to the next and the vocabulary is retrained when "
        "the corpus changes (a warning says so when split.ledger is false)",
    )
    return main_parser


def main(argv: list[str] | None = None) -> int:
    """CLI: run the flow once, or ``serve`` a scheduled deployment. Returns 2, one line printed, for a profile that
    does not validate or asks for a device that is not here, and for ``serve`` without a server that schedules."""
    args = parser().parse_args(argv)
    try:
        if args.command == "serve":
            return serve_deployment(args)
        if args.profiles:
            profile_files.checked_values(args.profiles, ROOT / "params.yaml")  # before Prefect starts: one line
    except ParamsError as err:
        print(f"clozeline: {profile_files.one_line(str(err))}", file=sys.stderr)
        return 2
    pipeline(profiles=args.profiles)
    print(
        f"clozeline: done. Claim table: {ROOT / 'reports' / 'claims.html'} (and claims.md); "
        f"runs: `make mlflow-ui`, then {runs_page_url(ROOT)}"
    )
    return 0


def serve_deployment(args: argparse.Namespace) -> int:
    """Check the server and the profiles, then serve (returns only when stopped). Raises ``ParamsError``."""
    problem = scheduler_problem()
    if problem:
        print(f"clozeline: {problem}", file=sys.stderr)
        return 2
    profiles = serve_profiles(args)
    warn_if_splits_can_move(profile_files.checked_values(profiles, ROOT / "params.yaml"))
    pipeline.serve(name=args.name, cron=args.cron, parameters={"profiles": profiles})
    return 0


if __name__ == "__main__":
    sys.exit(main())
