"""The fine-tuning tasks a report reads: which ran, and the kind and headline metric each recorded.

The tasks are those of ``params.yaml`` (``Metrics.tasks``), never whatever files a folder holds: a task removed
from ``tasks`` leaves no section, table or summary entry (``remove_stale`` deletes its metrics files). Each
task's kind and metric are what the finetune stage wrote, ``metrics/finetune/<task>.json`` with its ``kind``
and ``metric`` (the ``tasks.<task>`` entry it ran with).
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

from tasks.config.tasks import MODULE
from tasks.report.claims.grammar import Metrics, dig

#: The foreach stages of dvc.yaml (``<stage>@<task>``) that write ``metrics/<stage>/<task>.json``.
FOREACH_STAGES = ("finetune", "export", "release")


def finetune_tasks(metrics: Metrics) -> list[str]:
    """The run's tasks (``Metrics.tasks``, params order); without them (a unit test's folder), the task names
    with a ``metrics/finetune/<task>.json``, sorted."""
    if metrics.tasks is not None:
        return list(metrics.tasks)
    return sorted(path.stem for path in (metrics.folder / "finetune").glob("*.json"))


def current_stage(stage: str, tasks: Collection[str]) -> bool:
    """False for a dvc.lock entry ``<foreach stage>@<task>`` of a task no longer in ``tasks`` (DVC keeps the
    lock entries of removed foreach items); True for every other stage, and for all when ``tasks`` is empty."""
    name, _, item = stage.partition("@")
    return not (tasks and item and name in FOREACH_STAGES and item not in tasks)


def remove_stale(folder: Path, tasks: Collection[str]) -> list[Path]:
    """Delete ``<folder>/<stage>/<name>.json`` of every foreach stage (``FOREACH_STAGES``) whose ``name`` is
    not in ``tasks``: outputs of a task removed from params.yaml, which no stage writes any more and which
    would otherwise read as this run's. Nothing is deleted without tasks. Returns the deleted paths."""
    if not tasks:
        return []
    stale = [
        path for stage in FOREACH_STAGES for path in sorted((folder / stage).glob("*.json")) if path.stem not in tasks
    ]
    for path in stale:
        path.unlink()
    return stale


def task_module(metrics: Metrics, task: str) -> str:
    """``cls`` (classification, pair classification) or ``ner`` (token classification): the code of ``task``'s
    kind. Raises ``NotRun`` when the metrics or their ``kind`` are missing, ``KeyError`` for an unknown kind."""
    return MODULE[task_field(metrics, task, "kind")]


def task_headline(metrics: Metrics, task: str) -> str:
    """The headline test metric of ``task`` (``test_<tasks.<task>.metric>``, e.g. ``test_macro_f1``)."""
    return task_field(metrics, task, "metric")


def task_field(metrics: Metrics, task: str, key: str) -> str:
    """``key`` of ``metrics/finetune/<task>.json``; raises ``NotRun`` naming the file when it or the key is missing."""
    return str(dig(metrics.get(f"finetune/{task}"), [key], f"metrics/finetune/{task}.json"))
