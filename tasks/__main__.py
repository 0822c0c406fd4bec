"""``python -m tasks <stage> [item]``: run one pipeline stage as DVC calls it.

Loads params, opens an MLflow run named after the stage (a child of the flow's run when the flow set
``CLOZELINE_PARENT_RUN_ID``), logs the stage's flattened params, the git commit and the dvc.lock md5 of each
input, calls ``tasks.<stage>.run``, writes ``metrics/<stage>[_<item>].json`` and logs the same metrics. The
run ends FAILED on an exception and KILLED on SIGTERM.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from tasks.config import ParamsError, load_params
from tasks.tracking import NullLog, RunKilled, open_run

STAGES = ("ingest", "dedup", "split", "leakage", "tokenizer", "tokenize", "pretrain", "finetune", "probe", "report")


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the process exit code (143 when killed by SIGTERM)."""
    args = _parse(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    root = Path.cwd()
    try:
        params = load_params(root / "params.yaml")
    except ParamsError as err:
        print(f"clozeline: {err}", file=sys.stderr)
        return 2
    run_name = f"{args.stage}@{args.item}" if args.item else args.stage
    signal.signal(signal.SIGTERM, _raise_killed)
    if int(os.environ.get("RANK", "0")) != 0:  # torchrun: rank 0 alone tracks and writes metrics
        run_stage(args.stage, params, NullLog(), args.item)
        return 0
    try:
        with open_run(run_name, root=root) as log:
            log.params(params.section(args.stage).model_dump(mode="json"))
            log.tags({"git_commit": git_commit(root), "stage": args.stage, **input_md5_tags(root, run_name)})
            metrics = run_stage(args.stage, params, log, args.item)
            write_metrics(params.paths.metrics / metrics_name(args.stage, args.item), metrics)
            log.metrics(metrics)
    except RunKilled:
        logging.getLogger("clozeline").error("%s: killed by SIGTERM", run_name)
        return 143
    return 0


def run_stage(stage: str, params, log, item: str | None = None) -> dict[str, Any]:
    """Import ``tasks.<stage>`` and call its ``run(cfg, paths, log[, item])``; returns its metrics."""
    module = importlib.import_module(f"tasks.{stage}")
    cfg = params.section(stage)
    if item is None:
        return module.run(cfg, params.paths, log)
    return module.run(cfg, params.paths, log, item)


def metrics_name(stage: str, item: str | None) -> str:
    """``<stage>.json``, or ``<stage>_<item>.json`` for a foreach item."""
    return f"{stage}_{item}.json" if item else f"{stage}.json"


def write_metrics(path: Path, metrics: dict[str, Any]) -> None:
    """Write metrics as sorted, indented JSON (stable bytes for DVC)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(metrics, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def git_commit(root: Path) -> str:
    """The HEAD commit (with ``-dirty`` if the tree has changes), or ``unknown`` outside git."""
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "-uno"], cwd=root, capture_output=True, text=True)
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return sha.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def input_md5_tags(root: Path, dvc_stage: str) -> dict[str, str]:
    """``dvc.dep.<path>: <md5>`` for each dependency of ``dvc_stage`` (``stage`` or ``stage@item``).

    Data inputs take the md5 that dvc.lock records for the upstream stage's output, which DVC has updated
    by the time this stage runs; the stage's own dvc.lock entry (its previous run) fills in source files.
    Unknown md5s are left out, so a first run on a fresh clone tags only what is known.
    """
    lock_path = root / "dvc.lock"
    lock = (yaml.safe_load(lock_path.read_text(encoding="utf-8")) or {}) if lock_path.exists() else {}
    stages = lock.get("stages", {})
    md5 = {dep["path"]: dep.get("md5") for dep in stages.get(dvc_stage, {}).get("deps", [])}
    md5.update({out["path"]: out.get("md5") for body in stages.values() for out in body.get("outs", [])})
    return {f"dvc.dep.{path}": md5[path] for path in declared_deps(root, dvc_stage) if md5.get(path)}


def declared_deps(root: Path, dvc_stage: str) -> list[str]:
    """The ``deps`` of a stage in dvc.yaml, with ``${item}`` filled in for a foreach item."""
    name, _, item = dvc_stage.partition("@")
    if not (root / "dvc.yaml").exists():
        return []
    body = (yaml.safe_load((root / "dvc.yaml").read_text(encoding="utf-8")) or {}).get("stages", {}).get(name, {})
    deps = [dep.replace("${item}", item) for dep in body.get("do", body).get("deps", []) if isinstance(dep, str)]
    return [dep for dep in deps if "${" not in dep]  # other templated paths need DVC's params to resolve


def _raise_killed(signum, frame) -> None:
    raise RunKilled(f"signal {signum}")


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tasks", description=__doc__.splitlines()[0])
    parser.add_argument("stage", choices=STAGES)
    parser.add_argument("item", nargs="?", default=None, help="foreach item, e.g. the task of finetune (cls|ner)")
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(main())
