"""The calibration arm of a finetune run: its per-seed calibration units read from the prediction files
(``load_calibration``, the units of ``tasks.report.stats.calibration``, before and after temperature scaling on
dev; ``pooled_calibration``: with its runs from the further pretraining seeds), its ECE, Brier score and NLL as
report ``Estimate`` s (``calibration_estimates``), for the calibration claims and the calibration table, and the
point values a calibration claim reports beside its proper score (``beside_notes``: ECE, Brier, NLL before and
after scaling, and ``T``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from functools import lru_cache
from pathlib import Path

import numpy as np

from tasks.report.claims.arms.items import file_versions, read_predictions
from tasks.report.claims.arms.nested_seeds import FIRST, further_runs
from tasks.report.claims.grammar import Metrics, NotRun, dig
from tasks.report.claims.tasks_run import task_module
from tasks.report.stats.calibration import (
    ArmCalibration,
    SeedUnits,
    brier_terms,
    cls_confidence,
    estimates,
    nll_binary_terms,
    nll_terms,
    point_estimate,
    span_confidences,
)
from tasks.report.stats.estimates import Estimate, StatsConfig

#: Claim metrics that are calibration statistics (lower is better) -> ``calibration.Statistic``; ``_scaled``: of
#: the probabilities after temperature scaling on dev (``tasks.finetune.temperature``).
CALIBRATION_METRICS = {
    f"test_{name}{scaled}": f"{name}{scaled}" for scaled in ("", "_scaled") for name in ("ece", "brier", "nll")
}


def arm_calibration(task: str, run_key: str, metrics: Metrics) -> ArmCalibration:
    """The calibration units of one finetune run (every seed it ran), from the prediction files; raises
    ``NotRun`` when the predictions folder, the run or its ``probs`` are missing."""
    if metrics.predictions is None:
        raise NotRun("no predictions folder (data/finetune): calibration needs the test predictions")
    where = f"metrics/finetune/{task}.json"
    finetune = metrics.get(f"finetune/{task}")
    per_seed = dig(finetune, ["runs", run_key, "details", "per_seed"], where)
    seeds = sorted(int(s) for s in per_seed)
    try:
        arm = load_calibration(
            metrics.predictions, task, run_key, seeds, finetune.get("labels") or [], task_module(metrics, task)
        )
    except ValueError as err:
        raise NotRun(str(err)) from None
    found = [(per_seed[str(s)].get("temperature") or {}).get("temperature") for s in seeds]
    return replace(arm, temperatures=tuple(found)) if None not in found else arm


def pooled_calibration(task: str, run_key: str, metrics: Metrics) -> ArmCalibration:
    """``arm_calibration`` of ``run_key`` with its runs from the further pretraining seeds (``metrics/finetune/
    <task>.json`` ``pretraining_seeds.runs``) stacked after its own, pretraining-seed-major, each run named by its
    pretraining seed in ``pretrain``, as ``nested_seeds.with_pretraining_seeds`` stacks an arm's test items: the
    calibration claims then resample pretraining seeds too. Unchanged without further seeds. Raises ``NotRun`` as
    ``arm_calibration``, and when a further run has other fine-tuning seeds or test items."""
    arm, further = arm_calibration(task, run_key, metrics), further_runs(task, run_key, metrics)
    if not further:
        return arm
    runs = [arm] + [arm_calibration(task, key, metrics) for _, key in further]
    if any(r.seeds != arm.seeds or r.doc_ids != arm.doc_ids for r in runs):
        raise NotRun(
            f"{task}: the runs of {run_key} from its pretraining seeds differ in fine-tuning seeds or test items"
        )
    labels = [FIRST, *(seed for seed, _ in further)]
    scaled = None if any(r.scaled is None for r in runs) else tuple(u for r in runs for u in r.scaled)
    temperatures = None if any(r.temperatures is None for r in runs) else tuple(t for r in runs for t in r.temperatures)
    return replace(
        arm,
        seeds=tuple(s for r in runs for s in r.seeds),
        per_seed=tuple(u for r in runs for u in r.per_seed),
        scaled=scaled,
        temperatures=temperatures,
        pretrain=tuple(label for label in labels for _ in arm.seeds),
    )


def calibration_estimates(
    arms: list[ArmCalibration], statistic: str, cfg: StatsConfig, resamples: int
) -> tuple[list[Estimate], np.ndarray]:
    """``calibration.estimates`` as report ``Estimate`` s (n = test items), with the bootstrap replicates
    ``(resamples, n_arms)``: the Brier score and NLL with their percentile interval, ECE bias-corrected with the
    basic interval (each scaled or not). Raises ``NotRun`` when a scaled statistic's ``probs_scaled`` are missing."""
    try:
        found, reps = estimates(
            arms, statistic, cfg.calibration_bins, resamples, np.random.default_rng(cfg.seed), cfg.level
        )
    except ValueError as err:
        if "probs_scaled" not in str(err):
            raise
        raise NotRun(str(err)) from None
    method = (
        f"{'bias-corrected, basic' if statistic.startswith('ece') else 'percentile'} hierarchical bootstrap over "
        f"seeds and {len(arms[0].doc_ids)} test items ({resamples} resamples)"
    )
    return [Estimate(f.point, f.low, f.high, len(arms[0].doc_ids), method) for f in found], reps


def load_calibration(
    folder: Path, task: str, run_key: str, seeds: Sequence[int], labels: Sequence[str], module: str
) -> ArmCalibration:
    """Calibration units of run ``run_key`` per seed, from ``<folder>/<task>/<run_key>/seed<k>.test.jsonl``.

    ``labels`` are the cls class names in ``labels.json`` order (ignored for ner). The units of ``probs_scaled``
    (the temperature-scaled probabilities) are the arm's ``scaled`` when every record of every seed has them.
    Raises ``NotRun`` naming a missing file (``items.read_predictions``) and a one-line ValueError naming the
    file when a record has no ``probs`` (predictions from before they were written), ``probs`` of the wrong
    length, an unknown label, no record at all, or seeds that predicted other test docs.
    """
    if module not in ("cls", "ner"):
        raise ValueError(f"calibration: task {task!r} has unknown kind module {module!r} (expected 'cls' or 'ner')")
    paths = [Path(folder) / task / run_key / f"seed{seed}.test.jsonl" for seed in seeds]
    return _calibration(file_versions(paths), f"{folder}/{task}/{run_key}", task, tuple(seeds), tuple(labels), module)


@lru_cache(maxsize=512)
def _calibration(
    files: tuple[tuple[str, int, int], ...],
    name: str,
    task: str,
    seeds: tuple[int, ...],
    labels: tuple[str, ...],
    module: str,
) -> ArmCalibration:
    """``load_calibration``, read once per version of the files (``items.file_versions``)."""
    paths = [Path(path) for path, _, _ in files]
    records = [read_predictions(path) for path in paths]
    if not records[0]:
        raise ValueError(f"{paths[0]}: no test predictions")
    doc_ids = tuple(r["doc_id"] for r in records[0])
    per_seed = []
    for path, recs in zip(paths, records, strict=True):
        if tuple(r["doc_id"] for r in recs) != doc_ids:
            raise ValueError(f"{path}: other test docs than {paths[0]}")
        missing = next((r["doc_id"] for r in recs if "probs" not in r), None)
        if missing is not None:
            raise ValueError(f"{path}: doc {missing!r} has no 'probs' (rerun the finetune stage)")
        per_seed.append(_units(recs, list(labels), path, module, "probs"))
    has_scaled = all("probs_scaled" in r for recs in records for r in recs)
    scaled = (
        tuple(
            _units(recs, list(labels), path, module, "probs_scaled") for path, recs in zip(paths, records, strict=True)
        )
        if has_scaled
        else None
    )
    return ArmCalibration(name, task, doc_ids, seeds, tuple(per_seed), scaled)


def _units(recs: list[dict], labels: list[str], path: Path, module: str, field: str) -> SeedUnits:
    """One seed's units of the probabilities in ``field`` (``probs`` or ``probs_scaled``)."""
    recs = recs if field == "probs" else [{**r, "probs": r[field]} for r in recs]
    return _cls_units(recs, labels, path) if module == "cls" else _ner_units(recs, path)


def beside_notes(claim_metric: str, arms: dict[str, ArmCalibration], n_bins: int) -> list[str]:
    """One note per arm (``arms``: side -> its calibration) with the point values a calibration claim shows beside
    the score it reads (``claim_metric``): ECE, Brier and NLL before and after temperature scaling and the mean
    ``T`` over seeds; a value that cannot be computed (no ``probs_scaled``) reads ``n/a``."""
    out = []
    for side, arm in arms.items():
        cells = []
        for name in ("ece", "brier", "nll"):
            values = [_point(arm, f"{name}{scaled}", n_bins) for scaled in ("", "_scaled")]
            cells.append(f"{name.upper() if name != 'brier' else 'Brier'} {values[0]} -> {values[1]}")
        temperature = f"{np.mean(arm.temperatures):.3f}" if arm.temperatures else "n/a"
        out.append(
            f"{side} calibration before -> after temperature scaling on dev (mean T over {len(arm.seeds)} seeds "
            f"{temperature}): {'; '.join(cells)}; the verdict reads {claim_metric}"
        )
    return out


def _point(arm: ArmCalibration, statistic: str, n_bins: int) -> str:
    try:
        return f"{point_estimate(arm, statistic, n_bins):.4f}"
    except ValueError:
        return "n/a"


def _cls_units(recs: list[dict], labels: list[str], path: Path) -> SeedUnits:
    index = {name: i for i, name in enumerate(labels)}
    bad = next((r["doc_id"] for r in recs if len(r["probs"]) != len(labels) or r["gold"] not in index), None)
    if bad is not None:
        raise ValueError(f"{path}: doc {bad!r} needs a gold label in {labels} and {len(labels)} probs")
    probs, gold = np.array([r["probs"] for r in recs], dtype=float), np.array([index[r["gold"]] for r in recs])
    confidence, correct = cls_confidence(probs, gold)
    return SeedUnits(np.arange(len(recs)), confidence, correct, brier_terms(probs, gold), nll_terms(probs, gold))


def _ner_units(recs: list[dict], path: Path) -> SeedUnits:
    items, confidence, correct = [], [], []
    for i, r in enumerate(recs):
        try:
            conf, hit = span_confidences(r["gold"], r["pred"], r["probs"])
        except ValueError as err:
            raise ValueError(f"{path}: doc {r['doc_id']!r}: {err}") from None
        items.append(np.full(conf.size, i))
        confidence.append(conf)
        correct.append(hit)
    conf, hit = np.concatenate(confidence), np.concatenate(correct)
    nll = nll_binary_terms(conf, hit) if conf.size else np.zeros(0)
    return SeedUnits(np.concatenate(items).astype(np.intp), conf, hit, (conf - hit) ** 2, nll)
