"""The gates on a fine-tuning claim: whether the treatment beat a floor on dev, how many optimiser steps each run
took, whether the model's pretraining lineage is known, and whether the exported model agrees with the evaluated one.

The floor gate: a trained treatment arm whose mean dev score (``selection.dev`` of
``metrics/finetune/<task>.json``, the score the finetune stage chose arms by) does not exceed a baseline's dev
score by more than ``floor_margin`` does no better than a fitted baseline already does, so a claim about it
between two arms says nothing about the question: the claim is ``not resolvable: <arm> at floor (dev <score>; ...)``.
The baseline is the best one on dev among the comparators that read the arm's own docs and input
(``selection.comparator_of``: TF-IDF on the arm's tokenizer's cut, not the MiniLM's; ``floor_baseline: best``; a
metrics file without it: ``selection.best_baseline``) or the weakest one on dev (``weakest``: the majority class
for classification, word memorisation for NER). A claim whose
baseline is itself a fitted baseline (``baseline/...``) is not gated: it tests that floor on test. A
baseline arm at the floor is noted, not gated (the treatment may rightly beat a control below the floor).

The lineage gate: a claim scoring our pretrained encoder when the model pretraining continued has an unknown
pretraining lineage (``metrics/leakage.json`` ``lineage.status``) has no evaluation set known to be clean:
``not resolvable: unknown pretraining lineage``.

The export gate: the export stage re-scores the shipped folder in a fresh process from the raw test text. When
any item disagrees with the predictions the claims were computed from (another label, or a probability beyond
``export.probability_tolerance``), what a user gets is not what the table vouches for: every claim of that
task on fine-tuning evidence reads ``not resolvable: exported model disagrees with the evaluated one (k of n
items)``. A task without an export (the stage not run) is not gated.
"""

from __future__ import annotations

import math
import re

from tasks.common.nested import flatten
from tasks.common.provenance import Lock
from tasks.report.claims.grammar import MALFORMED, Claim, Metrics, NotRun, Sample

#: The run keys of fitted baselines in metrics/finetune/<task>.json.
BASELINE_PREFIX = "baseline/"


def floor_of(selection: dict, which: str, arm: str = "") -> tuple[str, float]:
    """``(baseline key, dev score)`` of ``arm``'s floor: the best comparator on dev reading the arm's input
    (``best``) or the weakest baseline of ``selection.dev`` (``weakest``). Raises ``KeyError`` when the
    selection has no baseline."""
    dev = selection["dev"]
    if which == "best":
        key = (selection.get("comparator_of") or {}).get(arm) or selection["best_baseline"]
        return key, float(dev[key])
    if which != "weakest":
        raise ValueError(f"floor_baseline must be 'best' or 'weakest', got {which!r}")
    scores = {k: float(v) for k, v in dev.items() if k.startswith(BASELINE_PREFIX)}
    key = min(scores, key=lambda k: (scores[k], k))
    return key, scores[key]


def floor_gate(claim: Claim, treat: Sample, base: Sample, metrics: Metrics, cfg) -> tuple[list[str], list[str]]:
    """``(failed, notes)``: ``failed`` holds ``<arm> at floor (dev <score>; ...)`` when the trained treatment's
    dev score is at most the floor plus ``cfg.floor_margin``; ``notes`` says when the baseline arm is, or
    why the gate was not checked. Only ``difference`` claims between two trained finetune arms are gated."""
    keys = (treat.run_key, base.run_key)
    if claim.kind != "difference" or not claim.treatment.startswith("finetune/") or not all(keys):
        return [], []
    if any(k.startswith(BASELINE_PREFIX) for k in keys):
        return [], []
    try:
        selection = metrics.get(f"finetune/{claim.task}")["selection"]
        floors = {k: floor_of(selection, cfg.floor_baseline, k) for k in keys}
        dev = {k: float(selection["dev"][k]) for k in keys}
    except KeyError as err:  # an arm the dev selection did not score (learning-curve, further-seed arms) or none
        missing = "dev scores" if err.args[0] == "dev" else f"dev score for {err.args[0]!r}"
        return [], [f"floor gate not checked: metrics/finetune/{claim.task}.json selection has no {missing}"]
    except (NotRun, *MALFORMED) as err:
        return [], [f"floor gate not checked: no dev scores of the arms and baselines ({type(err).__name__}: {err})"]
    bar = {k: f"floor: {floors[k][0]} dev {floors[k][1]:.4f} + margin {cfg.floor_margin:g}" for k in keys}
    at_floor = {k: dev[k] <= floors[k][1] + cfg.floor_margin for k in keys}
    t, b = keys
    failed = [f"{t} at floor (dev {dev[t]:.4f}; {bar[t]})"] if at_floor[t] else []
    notes = (
        [
            f"baseline {b} at floor (dev {dev[b]:.4f}; {bar[b]}): the treatment is compared with an arm that does "
            "not beat that baseline on dev"
        ]
        if at_floor[b]
        else []
    )
    return failed, notes


def batch_size(lock: Lock, task: str) -> int | None:
    """``finetune.recipes.<recipe>.batch_size`` (an older dvc.lock: ``finetune.<task>.batch_size``) as
    ``finetune@<task>`` last ran with it, or None when dvc.lock records none or several."""
    flat = flatten(lock.params(f"finetune@{task}"))
    sizes = [v for k, v in flat.items() if re.fullmatch(r"finetune\.(recipes\.)?[^.]+\.batch_size", k)]
    return int(sizes[0]) if len(sizes) == 1 else None


def run_steps(task: str, run_key: str, metrics: Metrics, lock: Lock) -> str:
    """One arm's optimiser steps per seed run: ``epochs run x ceil(train docs / batch size)``, the train docs
    kept for the arms (``docs.<tokenization>.train.docs_kept``, the same docs for every variant) and the batch
    size from dvc.lock. Early stopping ends a run at ``epochs_run`` (its model is the ``best_epoch`` one). A
    frozen classification arm (``probe`` in its seeds' details) takes no gradient steps: its lbfgs iterations.
    A learning-curve run (``<variant>@n<docs>/...``) trains on its ``<docs>``. The seeds whose best epoch was the
    last one run are counted: their dev score was still rising when ``max_epochs`` stopped them."""
    data = metrics.get(f"finetune/{task}")
    per_seed = data["runs"][run_key]["details"]["per_seed"]
    probes = [s["probe"] for s in per_seed.values() if s.get("probe")]
    if probes:  # a frozen classification arm: a logistic-regression probe, no gradient steps
        iters = sorted({int(p["n_iter_by_c"][f"{float(p['chosen_c']):g}"]) for p in probes})
        return (
            f"{run_key}: no optimiser steps: a logistic-regression probe on the frozen features (lbfgs, "
            f"{'-'.join(map(str, sorted({iters[0], iters[-1]})))} iterations at the C chosen on dev)"
        )
    epochs = sorted({int(s["epochs_run"]) for s in per_seed.values()})
    best = sorted({int(s["best_epoch"]) for s in per_seed.values()})
    sized = re.search(r"@n(\d+)/", run_key)  # a curve run (tasks/finetune/reruns/at_train_sizes.py): its own docs
    kept = {int(sized.group(1))} if sized else {int(t["train"]["docs_kept"]) for t in data.get("docs", {}).values()}
    size = batch_size(lock, task)
    span = f"{epochs[0]}-{epochs[-1]}" if len(epochs) > 1 else f"{epochs[0]}"
    last = sum(int(s["best_epoch"]) == int(s["epochs_run"]) for s in per_seed.values())
    text = (
        f"{run_key}: {span} epochs run per seed (best epoch {', '.join(map(str, best))}; the last epoch run in "
        f"{last} of {len(per_seed)} seeds{': dev was still improving' if last else ''})"
    )
    if size is None or len(kept) != 1:
        return text + "; steps not derivable (batch size or train docs not recorded)"
    docs = kept.pop()
    per_epoch = math.ceil(docs / size)
    steps = "-".join(str(e * per_epoch) for e in sorted({epochs[0], epochs[-1]}))
    ner = data.get("kind") == "token_classification"  # a batch holds windows; a sentence is one window or more
    return (
        f"{text}; {steps} optimiser steps per run ({per_epoch} per epoch = ceil({docs} train docs / batch "
        f"size {size}){'; a lower bound: a long sentence is more than one window' if ner else ''})"
    )


def training_steps(claim: Claim, treat: Sample, base: Sample, metrics: Metrics, lock: Lock) -> list[str]:
    """``run_steps`` of each trained finetune arm of the claim (empty for other claims)."""
    if not claim.treatment.startswith("finetune/"):
        return []
    out = []
    for key in dict.fromkeys((treat.run_key, base.run_key)):
        if key and not key.startswith(BASELINE_PREFIX):
            try:
                out.append(run_steps(claim.task, key, metrics, lock))
            except (NotRun, *MALFORMED) as err:
                out.append(f"{key}: optimiser steps not recorded ({type(err).__name__}: {err})")
    return out


#: Variants whose weights come from our pretraining.
PRETRAINED = ("pretrained", "adapted")


#: The reason of a claim refused for a model whose pretraining lineage cannot be established.
UNKNOWN_LINEAGE = "unknown pretraining lineage"


def lineage_gate(claim: Claim, treat: Sample, base: Sample, metrics: Metrics) -> list[str]:
    """``[UNKNOWN_LINEAGE]`` when ``metrics/leakage.json`` says the lineage of the model pretraining started from
    is ``unknown`` (``tasks/leakage/lineage_audit.py``) and the claim scores our pretrained encoder (a ``pretrained``
    or ``adapted`` arm, or ``pretrain/heldout/mlm``) on evaluation text that lineage may have trained on:
    finetune and pretrain claims. Probe claims read the hand-written probe sets, not the corpus: not gated."""
    if not claim.treatment.startswith(("finetune/", "pretrain/")):
        return []
    status = ((metrics.optional("leakage") or {}).get("lineage") or {}).get("status")
    if status != "unknown" or not _uses_pretrained(claim, treat, base):
        return []
    return [UNKNOWN_LINEAGE]


def _uses_pretrained(claim: Claim, treat: Sample, base: Sample) -> bool:
    refs = [claim.treatment, claim.baseline, treat.run_key, base.run_key]
    return any(part in PRETRAINED or part == "mlm" for ref in refs for part in ref.split("/"))


def export_gates(claim: Claim, metrics: Metrics) -> list[str]:
    """``["exported model disagrees with the evaluated one (k of n items)"]`` when ``claim`` rests on
    fine-tuning runs of a task whose export disagrees; else empty."""
    refs = [ref.split("/") for ref in (claim.treatment, claim.baseline)]
    tasks = {parts[1] for parts in refs if parts[0] == "finetune" and len(parts) > 1}
    gates = []
    for task in sorted(tasks):
        export = metrics.optional(f"export/{task}")
        if export is None:
            continue
        agreement = export.get("agreement") or {}
        if not export.get("agrees", False):
            gates.append(
                f"exported model disagrees with the evaluated one ({agreement.get('disagree', '?')} of "
                f"{agreement.get('items', '?')} items)"
            )
    return gates
