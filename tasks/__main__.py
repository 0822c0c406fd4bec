"""``python -m tasks <stage> [item]``: run one pipeline stage as DVC calls it.

Loads params, opens an MLflow run named after the stage (a child of the flow's run when the flow set
``CLOZELINE_PARENT_RUN_ID``; held by a child process, ``tasks/tracking/sidecar.py``, so that MLflow's start-up
overlaps the stage's work), logs the stage's flattened params, the git commit and the md5 of each input
(tags, and its data inputs as MLflow datasets), calls ``tasks.<stage>.run``, writes
``metrics/<stage>[/<item>].json`` and logs the same metrics. The run ends FAILED on an exception and KILLED
on SIGTERM.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import json
import logging
import os
import shutil
import signal
import sys
import traceback
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from tasks.common.files.ioerrors import one_line
from tasks.common.provenance import declared_outs, git_commit, input_md5s, stage_modules, stage_names
from tasks.config import ParamsError, load_params
from tasks.tracking import DataInput, NullLog, RunKilled
from tasks.tracking.sidecar import TrackingError, open_sidecar_run

if TYPE_CHECKING:
    from tasks.config.root import Params

#: What the stages raise for bad input, with a message naming the file, line or key (see tasks/CONTRACTS.md).
DATA_ERRORS = (ValueError, FileNotFoundError)
#: errno of a write that ran out of room (a full disk, a file size limit, a quota): one line too. Shared writers name
#: the file (``tasks/common/files/ioerrors.py``, whose ``NoRoom`` is a ValueError); any other names the stage's outputs.
NO_ROOM = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)
#: The same, raised without an errno by writers outside Python's I/O: tokenizers' and safetensors' Rust writers
#: (``Exception`` / ``SafetensorError``: "... File too large (os error 27)"), found by their words.
NO_ROOM_WORDS = {
    errno.EFBIG: ("File too large", "os error 27)"),
    errno.ENOSPC: ("No space left on device", "os error 28)"),
    errno.EDQUOT: ("Disk quota exceeded", "os error 122)"),
}
#: torch.save's zip writer failing: a ``RuntimeError`` that names neither errno nor reason ("unexpected pos 704 vs
#: 598" past a file size limit); out of room is its likely cause, said with a question mark.
TORCH_WRITE_FAILED = ("PytorchStreamWriter failed writing", "inline_container.cc")
TRACEBACK_ARTIFACT = "traceback.txt"
#: What a stage uses its input data for: MLflow's dataset context. A stage not listed prepares data.
DATA_CONTEXT = {
    "tokenizer": "training",
    "pretrain": "training",
    "finetune": "training",
    "probe": "evaluation",
    "report": "evaluation",
}


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the process exit code (143 when killed by SIGTERM)."""
    root = Path.cwd()
    args = _parse(argv, root)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
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
    clear_outputs(root, run_name)  # as dvc repro does: a run started by hand must not read its stale outputs
    try:
        tracked_run(root, params, args.stage, args.item)
    except RunKilled:
        clear_outputs(root, run_name)
        logging.getLogger("clozeline").error("%s: killed by SIGTERM", run_name)
        return 143
    except TrackingError as err:  # the store cannot be opened or refused a call: one line, MLflow's message
        clear_outputs(root, run_name)
        print(f"clozeline: {run_name}: {one_line(err)}", file=sys.stderr)
        return 1
    except DATA_ERRORS as err:  # bad input: one line naming the file, line or key; the traceback is in MLflow
        clear_outputs(root, run_name)
        print(
            f"clozeline: {run_name}: {one_line(err)} (traceback: MLflow run {run_name!r}, artifact "
            f"{TRACEBACK_ARTIFACT})",
            file=sys.stderr,
        )
        return 1
    except Exception as err:
        clear_outputs(root, run_name)  # a failed stage leaves nothing a later stage could take for its result
        if room_errno(err) is None:
            raise
        print(
            f"clozeline: {run_name}: {no_room(err, root, run_name)} (traceback: MLflow run {run_name!r}, artifact "
            f"{TRACEBACK_ARTIFACT})",
            file=sys.stderr,
        )
        return 1
    except BaseException:
        clear_outputs(root, run_name)  # a failed stage leaves nothing a later stage could take for its result
        raise
    return 0


def tracked_run(root: Path, params: Params, stage: str, item: str | None) -> None:
    """Run ``stage`` inside its MLflow run: params, provenance tags and dataset inputs, then the stage, then
    ``metrics/<stage>.json`` and the same metrics logged."""
    run_name = f"{stage}@{item}" if item else stage
    md5s, commit = input_md5s(root, run_name), git_commit(root)  # once: sources are hashed afresh
    with open_sidecar_run(run_name, root) as log:
        log.params(params.section(stage).model_dump(mode="json"))
        log.tags({"git_commit": commit, "stage": stage, **input_md5_tags(md5s)})
        log.inputs(input_datasets(root, run_name, md5s, params.paths.models, commit))
        try:
            metrics = run_stage(stage, params, log, item)
        except DATA_ERRORS:
            log.text(traceback.format_exc(), TRACEBACK_ARTIFACT)
            raise
        except Exception as err:
            if room_errno(err) is not None:
                log.text(traceback.format_exc(), TRACEBACK_ARTIFACT)
            raise
        write_metrics(params.paths.metrics / metrics_name(stage, item), metrics)
        log.metrics(metrics)


def room_errno(err: BaseException) -> int | None:
    """The errno of a write out of room (``NO_ROOM``): an ``OSError``'s, or one its message names
    (``NO_ROOM_WORDS``); 0 for torch.save's failed write (``TORCH_WRITE_FAILED``: no reason given); else None."""
    if isinstance(err, OSError) and err.errno in NO_ROOM:
        return err.errno
    text = str(err)
    for number, words in NO_ROOM_WORDS.items():
        if any(word in text for word in words):
            return number
    if isinstance(err, RuntimeError) and any(word in text for word in TORCH_WRITE_FAILED):
        return 0
    return None


def no_room(err: BaseException, root: Path, dvc_stage: str) -> str:
    """A write out of room, in words: the file when the error names it, else the stage's declared outputs."""
    where = getattr(err, "filename", None) or ", ".join(declared_outs(root, dvc_stage)) or "its outputs"
    number = room_errno(err)
    if not number:  # torch.save: its writer failed without saying why
        return (
            f"{where}: cannot be written: a write failed ({one_line(err)}); out of room? (free space on its file "
            "system or raise the file size limit, then rerun)"
        )
    return (
        f"{where}: cannot be written: {os.strerror(number)} (free space on its file system or raise the file "
        "size limit, then rerun)"
    )


def clear_outputs(root: Path, dvc_stage: str) -> None:
    """Remove the outputs ``dvc.yaml`` declares for ``dvc_stage``, but those marked ``persist`` (the pretraining
    checkpoints a restart resumes from), as ``dvc repro`` removes them before it runs a stage."""
    for path, persist in declared_outs(root, dvc_stage).items():
        target = root / path
        if persist or not (target.exists() or target.is_symlink()):
            continue
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        else:
            target.unlink()


def run_stage(stage: str, params: Params, log: NullLog, item: str | None = None) -> dict[str, Any]:
    """Import ``tasks.<stage>`` and call its ``run(cfg, paths, log[, item])``; returns its metrics."""
    module = importlib.import_module(f"tasks.{stage}")
    cfg = params.section(stage)
    if item is None:
        return module.run(cfg, params.paths, log)
    return module.run(cfg, params.paths, log, item)


def metrics_name(stage: str, item: str | None) -> str:
    """``<stage>.json``, or ``<stage>/<item>.json`` for a foreach item (a folder the report depends on whole)."""
    return f"{stage}/{item}.json" if item else f"{stage}.json"


def write_metrics(path: Path, metrics: dict[str, Any]) -> None:
    """Write metrics as sorted, indented JSON (stable bytes for DVC)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(metrics, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def input_md5_tags(md5s: dict[str, str]) -> dict[str, str]:
    """``dvc.dep.<path>: <md5>`` for each declared dependency of a stage (``provenance.input_md5s``)."""
    return {f"dvc.dep.{path}": md5 for path, md5 in md5s.items()}


def input_datasets(root: Path, dvc_stage: str, md5s: dict[str, str], models: Path, commit: str) -> list[DataInput]:
    """The data deps among ``md5s`` (``provenance.input_md5s`` of ``dvc_stage``) as MLflow dataset inputs
    (digest = DVC md5, context ``DATA_CONTEXT``, read by the code at ``commit``).

    Code deps (a ``.py`` file, a package folder) and models (under ``models``, which stay ``dvc.dep.*`` tags)
    are not datasets; a dep without a known md5 is left out, as in the tags.
    """
    context = DATA_CONTEXT.get(dvc_stage.partition("@")[0], "preprocessing")
    return [
        DataInput(path, md5, context, commit)
        for path, md5 in md5s.items()
        if not _is_code(root / path) and not (root / path).resolve().is_relative_to(models.resolve())
    ]


def _is_code(path: Path) -> bool:
    return path.suffix == ".py" or (path / "__init__.py").is_file()


def _raise_killed(signum: int, frame: FrameType | None) -> None:
    raise RunKilled(f"signal {signum}")


def _parse(argv: list[str] | None, root: Path) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tasks", description=__doc__.splitlines()[0])
    try:
        names = stage_names(root)  # the stages are what dvc.yaml declares, not a list kept here
    except FileNotFoundError as err:
        parser.error(str(err))
    parser.add_argument("stage", choices=stage_modules(names))
    parser.add_argument(
        "item", nargs="?", default=None, help="foreach item: the task name of finetune (params.yaml tasks)"
    )
    args = parser.parse_args(argv)
    items: list[str | None] = [name.partition("@")[2] for name in names if name.startswith(f"{args.stage}@")]
    if (args.item or None) not in (items or [None]):
        wanted = f"one item of {items}" if items else "no item"
        parser.error(f"stage {args.stage!r} takes {wanted}")
    return args


if __name__ == "__main__":
    sys.exit(main())
