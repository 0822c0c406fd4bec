"""What the finetune stage's runs cost, by group of arms: the ``cost`` section of ``metrics/finetune/<task>.json``
and one log line.

The stage's time goes mostly to training runs (``docs/pipeline.md`` "Time budget" models ``make run`` from these
numbers). A group is the reason a run exists: the arms of ``configs`` by variant (``pretrained``, ``random``,
``reference``, ``adapted``: the reference MiniLM runs fewer seeds, ``finetune.variant_seed_counts``), and the
reruns (``learning_curve``, ``pretraining_seeds``, ``ablations``, ``dose_response``). Per group: ``arms``,
``runs`` (learning-rate sweep runs + reported seed runs) and ``train_minutes`` (the runs' ``train_seconds``
summed: training with its dev evaluations, without model loading and test prediction; the stage's
``elapsed_minutes`` is the wall clock with ``workers`` runs at a time).
"""

from __future__ import annotations

#: Run-key markers of the reruns (``tasks/finetune/reruns``, ``jobs.dose_jobs``), checked in this order: a curve run
#: from a further pretraining seed (``...@pretrain_seed<s>@n<docs>/...``) counts with the pretraining seeds.
GROUPS = (("@pretrain_seed", "pretraining_seeds"), ("@ablation_", "ablations"), ("@step_", "dose_response"))
CURVE = "learning_curve"


def group_of(key: str) -> str:
    """The group of run key ``key`` (``<variant>[@...]/<mode>/<head>``): a rerun's marker, a curve run
    (``@n<docs>``), else the variant."""
    head = key.split("/")[0]
    for mark, name in GROUPS:
        if mark in head:
            return name
    return CURVE if "@n" in head else head


def section(results: dict[str, dict]) -> dict[str, dict]:
    """``{group: {"arms", "runs", "train_minutes"}}`` over ``results`` (``sweep.sweep_and_train``'s: run key ->
    ``{"sweep": {scale: run}, "seeds": [run]}``, each run with ``train_seconds``), groups in key order."""
    out: dict[str, dict] = {}
    for key, result in sorted(results.items()):
        runs = [*result["sweep"].values(), *result["seeds"]]
        entry = out.setdefault(group_of(key), {"arms": 0, "runs": 0, "train_minutes": 0.0})
        entry["arms"] += 1
        entry["runs"] += len(runs)
        entry["train_minutes"] += sum(float(run["train_seconds"]) for run in runs) / 60
    return {group: {**entry, "train_minutes": round(entry["train_minutes"], 2)} for group, entry in out.items()}


def log_line(item: str, groups: dict[str, dict]) -> str:
    """One INFO line: runs and summed train minutes per group (``section``)."""
    parts = ", ".join(f"{g} {e['runs']} runs / {e['train_minutes']:.1f} min" for g, e in groups.items())
    return f"finetune[{item}]: cost by group (sweep + seed runs, summed train minutes): {parts}"
