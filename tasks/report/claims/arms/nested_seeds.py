"""Pretraining seeds behind a finetune claim: an arm on our pretrained encoder has runs from every pretraining seed.

With several ``pretrain.seeds``, finetune runs every arm on our encoder (``pretrained``, ``adapted``) again from
each further seed's model and lists those runs in ``metrics/finetune/<task>.json`` ``pretraining_seeds``
(``tasks/finetune/reruns/from_pretraining_seeds.py``). ``with_pretraining_seeds`` stacks their test items under the
arm's own, pretraining-seed-major, and names each run's pretraining seed in ``Items.pretrain``, so the claim's bootstrap
draws pretraining seeds first, then fine-tuning seeds (crossed with them: the same ones under every pretraining seed),
then test items (the Multi-Bootstrap of Sellam et al. 2022, ``bootstrap.hierarchical_bootstrap``), and the point
estimate is the mean over every run. An arm that does not depend on pretraining (random init, a baseline, the reference
MiniLM) has one. ``notes`` says, for a claim on our encoder, whether its CI carries pretraining variance.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from tasks.report.claims.arms.items import Items, with_items
from tasks.report.claims.arms.resolve import resolve
from tasks.report.claims.grammar import Claim, Metrics, NotRun, Sample
from tasks.report.stats.calibration import ArmCalibration

#: Variants whose encoder is the pretrain stage's model.
OURS = ("pretrained", "adapted")
#: ``Items.pretrain`` of the arm's own runs (the first pretraining seed's, whose number finetune does not know).
FIRST = "first"
ONE_SEED = "CI excludes pretraining variance (1 pretraining seed; pretrain.seeds)"


def with_pretraining_seeds(sample: Sample, task: str, claim: Claim, metrics: Metrics) -> Sample:
    """``sample`` (a finetune arm with test items) with the items of its runs from the further pretraining seeds
    stacked after its own; unchanged without items or further seeds. The seed-level ``values`` (and the diverged
    gate) stay the first seed's; a further run's notes (its diverged seeds) join the arm's. A ner run's entity
    types may differ between runs: then only the headline counts are stacked.

    Raises ``NotRun`` when a further seed's run is missing or has other fine-tuning seeds or test items.
    """
    if sample.items is None:
        return sample
    further = further_runs(task, sample.run_key, metrics)
    if not further:
        return sample
    parts, labels, notes = [sample.items], [FIRST] * len(sample.items.seeds), list(sample.notes)
    for seed, key in further:
        run = with_items(
            resolve(f"finetune/{task}/{key}", claim.metric, metrics), task, claim.metric, metrics, claim.items
        )
        other, notes = run.items, notes + list(run.notes)
        if other is None or other.seeds != sample.items.seeds or other.doc_ids != sample.items.doc_ids:
            raise NotRun(
                f"{task}/{key} (pretraining seed {seed}) has other fine-tuning seeds or test items than "
                f"{sample.run_key}"
            )
        parts.append(other)
        labels += [seed] * len(other.seeds)
    same = all(p.labels == parts[0].labels for p in parts)
    counts = np.concatenate([p.counts if same else p.headline for p in parts])
    items = Items(
        sample.items.module,
        counts,
        sample.items.doc_ids,
        sum((p.seeds for p in parts), ()),
        sample.items.labels if same else (),
        tuple(labels),
        sample.items.clusters,
    )
    return replace(sample, items=items, notes=tuple(notes))


def further_runs(task: str, run_key: str, metrics: Metrics) -> list[tuple[str, str]]:
    """``[(pretraining seed, run key)]`` of ``run_key``'s runs from the further pretraining seeds, by seed
    (``metrics/finetune/<task>.json`` ``pretraining_seeds.runs``); empty when it has none."""
    runs = ((metrics.get(f"finetune/{task}").get("pretraining_seeds") or {}).get("runs") or {}).get(run_key) or {}
    return sorted(runs.items(), key=lambda kv: int(kv[0]))


def pretraining_seeds(items: Items | ArmCalibration | None) -> int:
    """How many pretraining seeds ``items`` (test items, or a calibration arm) rests on (1 when it names none)."""
    return 1 if items is None or items.pretrain is None else len(set(items.pretrain))


def fine_seeds(items: Items) -> tuple[int, ...]:
    """The fine-tuning seeds run under each pretraining seed of ``items``."""
    return items.seeds[: len(items.seeds) // pretraining_seeds(items)]


def describe(items: Items) -> str:
    """How many seeds ``items`` rests on: ``5``, or ``3 pretraining x 5 fine-tuning``."""
    n = pretraining_seeds(items)
    return f"{len(fine_seeds(items))}" if n == 1 else f"{n} pretraining x {len(fine_seeds(items))} fine-tuning"


def uses_ours(claim: Claim, treat: Sample, base: Sample) -> bool:
    """Whether the claim scores our pretrained encoder: a reference or run key on a ``pretrained``/``adapted``
    variant (snapshots, curve and seed runs included: ``pretrained@...``), or the MLM itself (``mlm``)."""
    refs = [claim.treatment, claim.baseline, treat.run_key, base.run_key]
    return any(part.split("@")[0] in OURS or part == "mlm" for ref in refs for part in ref.split("/"))


def notes(claim: Claim, treat: Sample, base: Sample) -> list[str]:
    """A claim on our encoder: ``ONE_SEED`` when its CI rests on one pretraining seed, else how many it resamples."""
    if not uses_ours(claim, treat, base):
        return []
    n = max(pretraining_seeds(s.items if hasattr(s.items, "pretrain") else None) for s in (treat, base))
    return (
        [ONE_SEED]
        if n == 1
        else [
            f"pretraining seeds resampled at the top of the bootstrap ({n} pretraining "
            "seeds, then fine-tuning seeds, crossed with them; pretrain.seeds)"
        ]
    )
