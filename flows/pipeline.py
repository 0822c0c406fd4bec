"""The Prefect flow: one task per DVC stage, in ``dvc.yaml`` order.

DVC owns the graph and the cache: each task runs ``dvc repro --single-item <stage>``, so an up-to-date stage
is skipped by DVC, and Prefect's own result caching stays off. The flow opens the parent MLflow run and
hands its id to the stage processes through ``CLOZELINE_PARENT_RUN_ID``.

Usage::

    python -m flows.pipeline                       # run once, no Prefect server needed
    python -m flows.pipeline serve --cron "0 3 * * *"   # scheduled deployment (needs a Prefect server)
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import yaml
from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE

from tasks.config import load_params
from tasks.tracking import PARENT_RUN_ENV, open_run

ROOT = Path(__file__).resolve().parents[1]


def stage_names(dvc_yaml: Path = ROOT / "dvc.yaml") -> list[str]:
    """Stage names in file order; a ``foreach`` stage expands to ``<stage>@<item>`` per item."""
    stages = (yaml.safe_load(dvc_yaml.read_text(encoding="utf-8")) or {}).get("stages", {})
    names: list[str] = []
    for name, body in stages.items():
        items = body.get("foreach") if isinstance(body, dict) else None
        names.extend(f"{name}@{item}" for item in items) if items else names.append(name)
    return names


def dvc_env(parent_run_id: str | None) -> dict[str, str]:
    """Environment for a ``dvc repro`` subprocess: the venv's bin first on PATH, the parent MLflow run id."""
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.pop("MLFLOW_RUN_ID", None)  # would make every stage write into one run
    if parent_run_id:
        env[PARENT_RUN_ENV] = parent_run_id
    return env


@task(cache_policy=NO_CACHE, log_prints=False)
def repro_stage(stage: str, position: str, parent_run_id: str | None) -> None:
    """``dvc repro --single-item <stage>``, forwarding every output line to the Prefect run logger.

    Raises ``RuntimeError`` with the last lines when DVC exits non-zero.
    """
    logger = get_run_logger()
    logger.info("stage %s: %s", position, stage)
    cmd = [sys.executable, "-m", "dvc", "repro", "--single-item", stage]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=dvc_env(parent_run_id), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, bufsize=1)
    tail: list[str] = []
    for line in proc.stdout:
        logger.info("[%s] %s", stage, line.rstrip())
        tail = (tail + [line.rstrip()])[-30:]
    if proc.wait() != 0:
        raise RuntimeError(f"dvc repro {stage} failed (exit {proc.returncode}):\n" + "\n".join(tail))


@flow(name="clozeline-pipeline", log_prints=True)
def pipeline(stages: list[str] | None = None) -> list[str]:
    """Run every stage of ``dvc.yaml`` (or the given subset, in dvc.yaml order); returns the stages run."""
    params = load_params(ROOT / "params.yaml")
    wanted = [s for s in stage_names() if stages is None or s in stages or s.split("@")[0] in stages]
    retrying = repro_stage.with_options(retries=params.pipeline.retries,
                                        retry_delay_seconds=params.pipeline.retry_delay_seconds)
    with open_run("pipeline", root=ROOT) as run:
        for index, stage in enumerate(wanted, start=1):
            retrying(stage, f"{index}/{len(wanted)}", run.run_id)
    return wanted


def main(argv: list[str] | None = None) -> None:
    """CLI: run the flow once, or ``serve --cron`` a scheduled deployment."""
    parser = argparse.ArgumentParser(prog="python -m flows.pipeline")
    sub = parser.add_subparsers(dest="command")
    serve = sub.add_parser("serve", help="serve a scheduled deployment (needs PREFECT_API_URL)")
    serve.add_argument("--cron", default="0 3 * * *", help="cron schedule, default: 03:00 daily")
    serve.add_argument("--name", default="clozeline-nightly")
    args = parser.parse_args(argv)
    if args.command == "serve":
        pipeline.serve(name=args.name, cron=args.cron)
    else:
        pipeline()


if __name__ == "__main__":
    main()
