"""The exported models in the report (``metrics/export/<task>.json``, the export stage): the re-scored metric
beside the evaluated one, and the export's row of the inference-cost table. The gate an export that disagrees
puts on a task's claims is ``tasks.report.claims.gates.export_gates``.
"""

from __future__ import annotations

from tasks.report.claims.grammar import Metrics, NotRun
from tasks.report.claims.tasks_run import finetune_tasks

#: Section title of the exported-model table.
EXPORTED = "Exported models: re-scored as shipped"


def export_grids(metrics: Metrics, cfg) -> list:
    """One row per task with an export: the run and seed shipped, the headline test metric the run evaluated
    and the one re-scored from the export (same test items), the items that disagree, the largest probability
    gap, the precision both sets of predictions were computed in and where the export lies."""
    header = [
        "task",
        "exported run (chosen on dev)",
        "metric",
        "evaluated (that seed)",
        "re-scored as exported",
        "items disagreeing",
        "largest probability gap",
        "predictions computed in",
        "folder",
        "dev winner",
    ]
    body = []
    for task in finetune_tasks(metrics):
        export = metrics.optional(f"export/{task}")
        if export is None:
            continue
        name, agreement = export["metric"], export["agreement"]
        winner = export.get("dev_winner", "")
        if export.get("dev_winner_is_baseline"):
            winner += f" ({export.get('dev_winner_score', 0):.4f} > {export.get('arm_dev_score', 0):.4f} on dev)"
        body.append(
            [
                task,
                f"{export['run']} seed {export['seed']} ({export.get('model', '')})",
                name,
                f"{export['evaluated'][name]:.4f}",
                f"{export['rescored'][name]:.4f}",
                f"{agreement['disagree']} of {agreement['items']}",
                f"{agreement['max_abs_probability_difference']:.2g} (tolerance {agreement['probability_tolerance']:g})",
                f"evaluated: {export.get('evaluated_precision', 'not recorded')}; re-scored: "
                f"{export.get('rescored_precision', 'not recorded')}",
                export["folder"],
                winner,
            ]
        )
    if not body:
        raise NotRun("no metrics/export/<task>.json (export stage not run)")
    return [("The model each task ships, re-scored in a fresh process from the raw test text", header, body)]


def export_cost_row(task: str, metrics: Metrics, sizes: list[str]) -> list[str] | None:
    """The export's row of the inference-cost table (the cost table's columns): what a user deploys, timed
    from raw text with tokenization; None without an export."""
    export = metrics.optional(f"export/{task}")
    if not export or not export.get("operational"):
        return None
    entry = export["operational"]
    batch = entry.get("batch") or {}

    def cell(size: str) -> str:
        timing = batch.get(size) or {}
        if "p50_ms_per_doc" in timing:
            return f"{timing['p50_ms_per_doc']:.3g} / {timing['p95_ms_per_doc']:.3g}"
        return f"{timing['docs_per_s']:.1f} docs/s" if timing.get("docs_per_s") else "-"

    largest = batch.get(sizes[-1]) or {}
    return [
        f"export: {export['run']} seed {export['seed']} (deployed row)",
        f"{entry.get('device')}, {entry.get('threads')} threads",
        entry.get("timed_from", "raw text"),
        *(cell(size) for size in sizes),
        f"{largest['docs_per_s']:.1f}" if largest.get("docs_per_s") else "-",
        "-",
        f"{entry.get('parameters'):,}",
        f"{entry.get('size_on_disk_mib', float('nan')):.2f}",
    ]
