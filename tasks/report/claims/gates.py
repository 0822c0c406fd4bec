"""The gates on a fine-tuning claim: whether an arm is above a fitted baseline's floor on test, how many optimiser
steps each run took, whether the model's pretraining lineage is known, and whether the exported model agrees with
the evaluated one.

The floor gate compares each trained arm a claim reads with its floor baseline, with a CI, on the test items (the
dev set chose the learning rate, the epoch and the baselines' settings, so it is not used again): the difference
``arm - floor`` from the same statistics as a claim's (the t interval over seed and item variance components,
``estimation.contrast``). An arm is ``at floor`` when that CI's upper end is at most ``floor_margin``: it does no
better than a fitted baseline already does. The floor is the comparator chosen on dev that reads the arm's own
docs and input (``selection.comparator_of``: TF-IDF on the arm's tokenizer's cut; a learning-curve arm's at its
size, ``learning_curve.selection.n<docs>``; ``floor_baseline: best``; a metrics file without it:
``best_baseline``) or the weakest baseline on dev (``weakest``). The gate scopes, never hides: when the claim's
own CI is decisive, its verdict stands and the gate adds its scope as a note ("both arms at floor: holds for
encoders at this scale"); an undecided claim whose treatment arm (for a gap claim, either pretrained arm) is at
floor keeps its verdict too, with the scope note that says so (a gate that turned it into ``not resolvable`` read
as a verdict the data did not give, and treated decided and undecided claims on the same arm differently); any
other arm's standing is a ``floor:`` note. A claim with a fitted baseline as an arm (``baseline/...``) tests that
floor itself: not gated.

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
from collections.abc import Callable
from dataclasses import dataclass

from tasks.common.nested import flatten
from tasks.common.provenance import Lock
from tasks.report.claims.arms.items import metric_function
from tasks.report.claims.estimation import contrast
from tasks.report.claims.grammar import MALFORMED, Claim, Metrics, NotRun, Sample
from tasks.report.stats import bootstrap as bs
from tasks.report.stats.estimates import Estimate

#: The run keys of fitted baselines in metrics/finetune/<task>.json.
BASELINE_PREFIX = "baseline/"


def floor_of(selection: dict, which: str, arm: str = "") -> str:
    """The key of ``arm``'s floor baseline: the comparator chosen on dev reading the arm's input (``best``:
    ``comparator_of``, else ``best_baseline``) or the weakest baseline of ``selection.dev`` (``weakest``). Raises
    ``KeyError`` when the selection has neither."""
    if which == "best":
        return (selection.get("comparator_of") or {}).get(arm) or selection["best_baseline"]
    if which != "weakest":
        raise ValueError(f"floor_baseline must be 'best' or 'weakest', got {which!r}")
    scores = {k: float(v) for k, v in selection["dev"].items() if k.startswith(BASELINE_PREFIX)}
    return min(scores, key=lambda k: (scores[k], k))


def floor_key(finetune: dict, run_key: str, which: str) -> str:
    """The run key of ``run_key``'s floor baseline (``floor_of``): a learning-curve arm (``<variant>@n<docs>/...``)
    by its size's selection, the comparator of its full-size arm at that size where it ran; a further-seed or
    ablation arm by its main arm's. Raises ``KeyError`` naming what the selection lacks."""
    main = re.sub(r"@[^/]*", "", run_key)
    sized = re.search(r"@n(\d+)/", run_key)
    if not sized:
        return floor_of(finetune["selection"], which, main)
    at = finetune["learning_curve"]["selection"][f"n{sized.group(1)}"]
    comparator = ((finetune["selection"].get("comparator_of") or {}).get(main) or "") + f"@n{sized.group(1)}"
    mapped = {"comparator_of": {run_key: comparator}} if comparator in (at.get("dev") or {}) else {}
    return floor_of({**at, **mapped}, which, run_key)


@dataclass(frozen=True)
class Floor:
    """One arm against its floor baseline on test: ``difference`` ``arm - floor`` with its CI."""

    arm: str
    floor: str
    difference: Estimate
    margin: float

    @property
    def at_floor(self) -> bool:
        """The CI's upper end is at most the margin: no better than the fitted baseline."""
        return self.difference.high <= self.margin

    def text(self) -> str:
        """``<arm> at floor on test (<arm> - <floor> = d [lo, hi], upper end <= margin m; ...)`` or above it."""
        d = self.difference
        where = "at floor" if self.at_floor else ("above its floor" if d.low > self.margin else "near its floor")
        return (
            f"{self.arm} {where} on test ({self.arm} - {self.floor} = {d.mean:+.4f} [{d.low:.4f}, {d.high:.4f}] "
            f"against margin {self.margin:g}; test items, not used for selection)"
        )


def floor_gate(
    claim: Claim, samples: list[Sample], metrics: Metrics, cfg, load: Callable
) -> tuple[list[str], list[str]]:
    """``(failed, notes)`` of the floor gate (module docstring) on a claim's arms ``samples`` (treatment,
    baseline; a gap claim: T1, T2, B1, B2). ``load(ref, claim)`` gives an arm's sample with its test items;
    ``failed`` holds the gated arms at floor, ``notes`` the other arms' standing and why the gate was not checked.
    ``evaluation.floor_scope`` turns ``failed`` into scope notes; the verdict stands."""
    keys = [s.run_key for s in samples]
    if claim.kind != "difference" or not claim.treatment.startswith("finetune/") or not all(keys):
        return [], []
    if any(k.startswith(BASELINE_PREFIX) for k in keys):
        return [], []
    gated = {keys[0], keys[2]} if len(keys) == 4 else {keys[0]}
    try:
        finetune = metrics.get(f"finetune/{claim.task}")
        headline = claim.model_copy(update={"metric": finetune.get("metric") or claim.metric})
        floors = [
            floor_of_arm(headline, s, floor_key(finetune, s.run_key, cfg.floor_baseline), cfg, load) for s in samples
        ]
    except KeyError as err:
        where = f"metrics/finetune/{claim.task}.json"
        return [], [f"floor gate not checked: {where} has no {err.args[0]!r} (to name each arm's floor baseline)"]
    except (NotRun, *MALFORMED) as err:
        return [], [f"floor gate not checked: {type(err).__name__}: {err}"]
    failed = [f.text() for f in floors if f.at_floor and f.arm in gated]
    notes = [f"floor: {f.text()}" for f in floors if not (f.at_floor and f.arm in gated)]
    return failed, notes


def floor_of_arm(claim: Claim, sample: Sample, floor: str, cfg, load: Callable) -> Floor:
    """``arm_floor``, computed once per arm, floor, metric and item slice (memoised in ``load.memo``, the dict of
    ``evaluation.cached_arm``): many claims read the same arms."""
    memo = getattr(load, "memo", {})
    key = ("floor", sample.run_key, floor, claim.metric, claim.items)
    if key not in memo:
        memo[key] = arm_floor(claim, sample, floor, cfg, load)
    return memo[key]


def arm_floor(claim: Claim, sample: Sample, floor: str, cfg, load: Callable) -> Floor:
    """``Floor`` of one arm: ``arm - floor`` on the claim's test items (the headline metric); raises ``NotRun``
    without test predictions."""
    mine, base = load(f"finetune/{claim.task}/{sample.run_key}", claim), load(f"finetune/{claim.task}/{floor}", claim)
    if mine.items is None or base.items is None:
        raise NotRun("no test predictions to compare the arms with their floor")
    if mine.items.doc_ids != base.items.doc_ids:
        raise NotRun(f"{sample.run_key} and its floor {floor} scored different test items")
    point = bs.point_estimate(mine.items.headline, metric_function(claim.metric))
    point -= bs.point_estimate(base.items.headline, metric_function(claim.metric))
    diff, _, _ = contrast(claim, [mine.items, base.items], (1.0, -1.0), point, cfg)
    return Floor(sample.run_key, floor, diff, cfg.floor_margin)


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
