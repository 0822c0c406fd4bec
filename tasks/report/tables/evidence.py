"""Tables of the report beyond the claims: behavioural minimal pairs per phenomenon and model, and the
operational evidence (calibration, inference cost) of the fine-tuned models.

Each builder returns ``render.pages.Grid`` tables, or a ``not computed: <why>`` string when its input is missing.
"""

from __future__ import annotations

from tasks.report.claims.arms.calibration_arms import arm_calibration, calibration_estimates
from tasks.report.claims.grammar import MALFORMED, Metrics, NotRun, dig
from tasks.report.claims.switches import Off, off
from tasks.report.claims.tasks_run import finetune_tasks, task_module
from tasks.report.stats.calibration import point_estimate
from tasks.report.stats.estimates import StatsConfig, proportion_ci
from tasks.report.tables.exported_models import EXPORTED, export_cost_row, export_grids
from tasks.report.tables.leakage_recall import SECTION as LEAKAGE_RECALL
from tasks.report.tables.leakage_recall import recall_grids

#: Section titles, in report order.
PAIRS, CALIBRATION, COST = "Behavioural: minimal pairs", "Operational: calibration", "Operational: inference cost"


def evidence_tables(metrics: Metrics, cfg: StatsConfig) -> dict[str, list | str]:
    """``{section title: grids or why not}`` for every section of this module."""
    out: dict[str, list | str] = {}
    for title, build in (
        (PAIRS, pair_grids),
        (CALIBRATION, calibration_grids),
        (COST, cost_grids),
        (EXPORTED, export_grids),
        (LEAKAGE_RECALL, recall_grids),
    ):
        try:
            out[title] = build(metrics, cfg)
        except Off as why:
            out[title] = str(why)
        except (NotRun, *MALFORMED) as why:
            out[title] = f"not computed: {why}"
    return out


def pair_grids(metrics: Metrics, cfg: StatsConfig) -> list:
    """Accuracy per phenomenon (rows) and model (columns) with a Clopper-Pearson interval over pairs, and the
    pairs whose two sentences have unequal token counts under each model's tokenizer."""
    level = cfg.level
    pairs = dig(metrics.get("probe"), ["minimal_pairs"], "metrics/probe.json")
    variants = dig(pairs, ["variants"], "metrics/probe.json minimal_pairs")
    phenomena = list(pairs["phenomena"]) + ["all"]
    header = ["phenomenon (pairs)"] + [f"{v}: accuracy [{level:.0%} CI]" for v in variants]
    body, lengths = [], []
    for name in phenomena:
        cells = [table["all"] if name == "all" else table["per_phenomenon"][name] for table in variants.values()]
        label = f"{name} ({cells[0]['pairs']})"
        body.append([label] + [accuracy_cell(c, level) for c in cells])
        lengths.append([label] + [str(c["length_mismatched"]) for c in cells])
    return [
        (f"Pairs passed, PLL(good) > PLL(bad): {pairs['method']}", header, body),
        (
            "Pairs with unequal token counts (a summed score favours the shorter sentence)",
            ["phenomenon (pairs)", *variants],
            lengths,
        ),
    ]


def accuracy_cell(counts: dict, level: float) -> str:
    """``0.7308 [0.5221, 0.8843] 19/26`` (Clopper-Pearson), with the tie count when there are ties."""
    est = proportion_ci(int(counts["passed"]), int(counts["pairs"]), level)
    ties = f", {counts['ties']} ties" if counts.get("ties") else ""
    return f"{est.mean:.4f} [{est.low:.4f}, {est.high:.4f}] {counts['passed']}/{counts['pairs']}{ties}"


# --- calibration -------------------------------------------------------------------------------------------


def calibration_grids(metrics: Metrics, cfg: StatsConfig) -> list:
    """Per task, every arm and baseline with prediction files: ECE (bias-corrected, basic bootstrap CI),
    the plug-in ECE, the Brier score (percentile CI), the NLL, the same three (plug-in) after temperature scaling
    on dev with the mean ``T`` over seeds, and the units (docs or predicted spans) pooled over seeds."""
    grids = []
    for task in finetune_tasks(metrics):
        finetune, cls = metrics.get(f"finetune/{task}"), task_module(metrics, task) == "cls"
        unit = "docs" if cls else "predicted entity spans"
        brier = "multi-class, 0-2" if cls else "binary, per span, 0-1"
        header = [
            "run",
            f"bias-corrected ECE, {cfg.calibration_bins} equal-mass bins [{cfg.level:.0%} basic CI]",
            "ECE (plug-in)",
            f"Brier ({brier}) [{cfg.level:.0%} CI]",
            "NLL (nats)",
            "after temperature scaling on dev: ECE / Brier / NLL (plug-in), mean T",
            f"seeds, {unit}",
        ]
        body = [calibration_row(task, key, metrics, cfg) for key in sorted(finetune.get("runs", {}))]
        grids.append((f"{task}: calibration of the test predictions ({unit})", header, body))
    if not grids:
        raise NotRun("no metrics/finetune/<task>.json")
    return grids


def calibration_row(task: str, run_key: str, metrics: Metrics, cfg: StatsConfig) -> list[str]:
    """One run's cells of the calibration table, or why they are missing."""
    try:
        arm = arm_calibration(task, run_key, metrics)
        # a descriptive cell, as the slice tables: their resamples (the claims keep cfg.resamples)
        (ece_est,), _ = calibration_estimates([arm], "ece", cfg, cfg.slice_resamples)
        (brier_est,), _ = calibration_estimates([arm], "brier", cfg, cfg.slice_resamples)
    except (NotRun, ValueError) as why:
        return [run_key, f"not computed: {why}", "-", "-", "-", "-", "-"]
    units = sum(u.confidence.size for u in arm.per_seed)
    cls = task_module(metrics, task) == "cls"
    per_seed = f"{len(arm.doc_ids)} test docs" if cls else f"{units / len(arm.seeds):.0f} spans per seed"
    return [
        run_key,
        f"{ece_est.mean:.4f} [{ece_est.low:.4f}, {ece_est.high:.4f}]",
        f"{point_estimate(arm, 'ece', cfg.calibration_bins):.4f}",
        f"{brier_est.mean:.4f} [{brier_est.low:.4f}, {brier_est.high:.4f}]",
        f"{point_estimate(arm, 'nll', cfg.calibration_bins):.4f}",
        scaled_cell(arm, cfg.calibration_bins),
        f"{len(arm.seeds)} seed{'s' if len(arm.seeds) != 1 else ''} x {per_seed} ({units} predictions)",
    ]


def scaled_cell(arm, n_bins: int) -> str:
    """``ECE / Brier / NLL, T <mean>`` of the temperature-scaled probabilities (plug-in), or why not."""
    if arm.scaled is None:
        return "not computed: no probs_scaled (rerun the finetune stage)"
    values = " / ".join(f"{point_estimate(arm, f'{name}_scaled', n_bins):.4f}" for name in ("ece", "brier", "nll"))
    mean_t = f"{sum(arm.temperatures) / len(arm.temperatures):.3f}" if arm.temperatures else "n/a"
    return f"{values}, T {mean_t}"


def reliability_curves(task: str, metrics: Metrics) -> dict[str, tuple]:
    """``{run key: (confidence, correct)}`` pooled over seeds, for every run of ``task`` with usable prediction
    files (the reliability diagram's input); raises ``NotRun`` when none has."""
    finetune = metrics.get(f"finetune/{task}")
    curves = {}
    for key in sorted(finetune.get("runs", {})):
        try:
            curves[key] = arm_calibration(task, key, metrics).pooled()
        except NotRun:
            continue
    if not curves:
        raise NotRun(f"no {task} run has test predictions with probs")
    return curves


# --- inference cost ----------------------------------------------------------------------------------------


def cost_grids(metrics: Metrics, cfg: StatsConfig) -> list:
    """Per task, the latency at each measured batch size, memory, parameter count and size of every measured
    run (``operational`` in metrics/finetune/<task>.json), on the device the stage ran on (a GPU: bf16 autocast),
    and the CPU latencies of a GPU run when measured."""
    grids = []
    for task in finetune_tasks(metrics):
        measured = dict(sorted(((metrics.optional(f"finetune/{task}") or {}).get("operational") or {}).items()))
        if not measured:
            continue
        sizes = sorted({size for entry in measured.values() for size in entry.get("batch") or {}}, key=int)
        header = [
            "run",
            "device, threads",
            "timed from: tokens per doc, mean (max)",
            *(f"batch {size}: p50 / p95 ms per doc" for size in sizes),
            f"batch {sizes[-1]}: docs/s",
            "peak RSS MiB (+ over start)",
            "parameters",
            "size on disk MiB",
        ]
        deployed = [row] if (row := export_cost_row(task, metrics, sizes)) else []  # the export, from raw text
        grids.append(
            (
                f"{task}: inference cost on this machine, measured in the run",
                header,
                [cost_row(key, entry, sizes) for key, entry in measured.items()] + deployed,
            )
        )
        cpu = {key: entry["cpu"] for key, entry in measured.items() if entry.get("cpu")}
        if cpu:
            grids.append(
                (
                    f"{task}: inference cost on the CPU of the GPU host",
                    ["run", *(f"batch {size}: p50 / p95 ms per doc" for size in sizes)],
                    [cpu_row(key, entry, sizes) for key, entry in cpu.items()],
                )
            )
    if not grids:
        raise Off(off("finetune.operational.enabled"))  # the stage measured no task's models
    return grids


def latency_cell(timing: dict | None) -> str:
    """``p50 / p95`` in ms per doc of one batch size, or ``-``."""
    return f"{timing['p50_ms_per_doc']:.3g} / {timing['p95_ms_per_doc']:.3g}" if timing else "-"


def cost_row(key: str, entry: dict, sizes: list[str]) -> list[str]:
    """One run's cells of the cost table (``-`` where a measurement does not apply, e.g. tfidf-lr's memory)."""
    batch = entry.get("batch") or {}
    largest = batch.get(sizes[-1])
    peak, grew = entry.get("peak_rss_mib"), entry.get("rss_increase_mib")
    tokens = entry.get("mean_tokens_per_doc")
    return [
        key,
        f"{entry.get('device')}, {entry.get('threads') or '-'} threads",
        f"token ids: {tokens:.0f} ({entry.get('seq_len_tokens')})"
        if tokens is not None
        else "raw full text (vectorizing timed)",
        *(latency_cell(batch.get(size)) for size in sizes),
        f"{largest['docs_per_s']:.1f}" if largest else "-",
        _memory_cell(peak, grew, entry.get("peak_allocated_mib")),
        f"{entry.get('parameters'):,}",
        f"{entry.get('size_on_disk_mib', float('nan')):.2f}",
    ]


def _memory_cell(peak: float | None, grew: float | None, gpu: float | None) -> str:
    cell = "-" if peak is None else f"{peak:.0f} (+{grew:.0f})"
    return cell if gpu is None else f"{cell}; GPU {gpu:.0f} allocated"


def cpu_row(key: str, entry: dict, sizes: list[str]) -> list[str]:
    """One run's cells of the CPU cost table of a GPU run (``operational.cpu_on_gpu_host``)."""
    return [key, *(latency_cell((entry.get("batch") or {}).get(size)) for size in sizes)]
