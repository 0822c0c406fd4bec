"""The fine-tuning tasks a report reads: which ran, and the kind and headline metric each recorded.

The report does not read ``params.yaml``: a task is what the finetune stage wrote,
``metrics/finetune/<task>.json`` with its ``kind`` and ``metric`` (the ``tasks.<task>`` entry it ran with).
"""

from __future__ import annotations

from tasks.config.tasks import MODULE
from tasks.report.claims import Metrics, dig


def finetune_tasks(metrics: Metrics) -> list[str]:
    """The task names with a ``metrics/finetune/<task>.json`` (the tasks the finetune stages ran), sorted."""
    return sorted(path.stem for path in (metrics.folder / "finetune").glob("*.json"))


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
