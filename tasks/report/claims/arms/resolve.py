"""A claim's reference resolved to the values of one arm (``resolve``), following the grammar in
``tasks.report.claims.grammar``: finetune runs (with the ablation arms' notes, ``ablations``), probe layers
(``probe_arms``), held-out masked-token accuracy, minimal pairs and the leakage audit's proportions.
"""

from __future__ import annotations

from dataclasses import dataclass

from tasks.report.claims.arms.ablations import MARK, ablation_notes
from tasks.report.claims.arms.probe_arms import probe_sample
from tasks.report.claims.grammar import SELECTED, Metrics, NotRun, Sample, dig, selected_run


def resolve(ref: str, metric: str, metrics: Metrics) -> Sample:
    """The ``Sample`` a reference points at; raises ``NotRun`` when the file, run, metric or layer is absent.

    A finetune sample holds seed-level values and its arm's MLflow run; ``items.with_items`` adds its test items.
    """
    kind, *rest = ref.split("/")
    if kind == "finetune" and len(rest) == 2 and rest[1] in SELECTED:
        return _finetune_sample(rest[0], selected_run(rest[0], rest[1], metrics), metric, metrics)
    if kind == "finetune" and len(rest) == 4:
        return _finetune_sample(rest[0], "/".join(rest[1:]), metric, metrics)
    if kind == "probe" and len(rest) == 3 and rest[1] in ("layer", "shuffled"):
        return probe_sample(rest[0], rest[1], rest[2], metric, metrics)
    if kind == "pretrain" and len(rest) == 2 and rest[0] == "heldout":
        return _heldout_sample(rest[1], metrics)
    if kind == "probe" and len(rest) == 3 and rest[1] == "pairs":
        return _pairs_sample(rest[0], rest[2], metrics)
    if kind == "leakage" and len(rest) >= 2:
        width = 1 if rest[0] == "all" else 2
        if len(rest) in (width + 1, width + 2):
            return _leakage_sample("/".join(rest[:width]), rest[width:-1], rest[-1], metrics)
    raise NotRun(f"malformed reference {ref!r} (see the grammar in tasks/report/claims/grammar.py)")


def _finetune_sample(task: str, run_key: str, metric: str, metrics: Metrics) -> Sample:
    name = f"finetune/{task}"
    where = f"metrics/{name}.json"
    ablation = ()
    if MARK in run_key:  # a run from a pretraining ablation arm
        ablation = ablation_notes(task, run_key, metrics.get(name))  # NotRun "not computed" when the arms are off
    run = dig(metrics.get(name), ["runs", run_key], where)
    entry = dig(run, [metric], f"{where} runs[{run_key!r}]")
    values = [float(v) for v in dig(entry, ["per_seed"], f"{where} runs[{run_key!r}].{metric}")]
    seeds = entry.get("seeds") or list(range(len(values)))
    if not values:
        raise NotRun(f"{where} runs[{run_key!r}].{metric}.per_seed is empty")
    diverged = tuple(str(s) for s in run.get("diverged_seeds") or [])
    notes = (f"{run_key}: diverged seeds {', '.join(diverged)}",) if diverged else ()
    notes += ablation
    run_id = run.get("mlflow_run_id")
    name = str(run.get("mlflow_run_name") or f"{task}/{run_key}")  # the finetune stage's naming
    mlflow_run = (name, str(run_id), str(run.get("mlflow_experiment_id") or ""))
    return Sample(
        tuple(values),
        tuple(str(s) for s in seeds),
        "seed",
        where,
        runs=(mlflow_run,) if run_id else (),
        notes=notes,
        diverged=diverged,
        run_key=run_key,
    )


#: ``pretrain/heldout/<model>`` -> the masked-token accuracy key of metrics/pretrain.json
HELDOUT = {"mlm": "heldout_mlm_accuracy", "unigram": "heldout_unigram_accuracy"}


@dataclass(frozen=True)
class BlockHits:
    """One model's hits on the held-out masks, per held-out block (``metrics/pretrain.json`` ``heldout_per_block``):
    the blocks are the resampling units of a held-out claim, not the tokens."""

    masked: tuple[int, ...]
    hits: tuple[int, ...]


def _heldout_sample(model: str, metrics: Metrics) -> Sample:
    """Masked-token accuracy on the held-out masks of the pretrained MLM or of the unigram baseline (the same
    masks), as a rate over the masked tokens, with its hits per held-out block as ``items`` (``BlockHits``) when
    the pretrain stage recorded them."""
    where = "metrics/pretrain.json"
    if model not in HELDOUT:
        raise NotRun(f"malformed reference pretrain/heldout/{model} (have: {sorted(HELDOUT)})")
    pretrain = metrics.get("pretrain")
    accuracy = float(dig(pretrain, [HELDOUT[model]], where))
    tokens = int(dig(pretrain, ["heldout_masked_tokens"], where))
    if tokens == 0:
        raise NotRun(f"{where}: 0 held-out masked tokens")
    hits = round(accuracy * tokens)
    note = f"{model}: {hits} of {tokens} held-out masked tokens predicted ({pretrain.get('heldout_blocks')} blocks)"
    blocks = pretrain.get("heldout_per_block")
    items = None
    if blocks:
        column = {"mlm": "correct", "unigram": "unigram_correct"}[model]
        items = BlockHits(tuple(int(v) for v in blocks["masked"]), tuple(int(v) for v in blocks[column]))
    return Sample(
        (hits / tokens,), ("heldout",), "masked tokens", where, notes=(note,), proportion=(hits, tokens), items=items
    )


def _pairs_sample(variant: str, phenomenon: str, metrics: Metrics) -> Sample:
    """The 0/1 outcome of every minimal pair of ``phenomenon`` (``all``: every pair) for ``variant``, units =
    pair lines, so two variants pair by pair; a rate, so one arm's CI is Clopper-Pearson."""
    where = "metrics/probe.json minimal_pairs"
    pairs = dig(metrics.get("probe"), ["minimal_pairs"], "metrics/probe.json")
    passed = dig(pairs, ["variants", variant, "passed"], where)
    items = dig(pairs, ["items"], where)
    index = [i for i, item in enumerate(items) if phenomenon in ("all", item["phenomenon"])]
    if not index or len(passed) != len(items):
        raise NotRun(f"{where}: no {phenomenon!r} pairs for {variant} (have: {sorted(pairs.get('phenomena', {}))})")
    values = tuple(float(passed[i]) for i in index)
    hits = int(sum(values))
    table = dig(pairs, ["variants", variant, "all" if phenomenon == "all" else "per_phenomenon"], where)
    mismatched = (table if phenomenon == "all" else table.get(phenomenon, {})).get("length_mismatched", 0)
    notes = (f"{variant}: {hits} of {len(index)} {phenomenon} pairs passed; {mismatched} with unequal token counts",)
    return Sample(
        values, tuple(str(items[i]["line"]) for i in index), "pair", where, notes=notes, proportion=(hits, len(index))
    )


def _leakage_sample(eval_set: str, check: list[str], key: str, metrics: Metrics) -> Sample:
    where = "metrics/leakage.json"
    if eval_set.split("/")[0] in AUDIT_CHECKS and not check:
        return _audit_check_sample(*eval_set.split("/"), key, metrics)
    sets = dig(metrics.get("leakage"), ["eval_sets"], where)
    names = sorted(sets) if eval_set == "all" else [eval_set]
    if not names:
        raise NotRun(f"{where} lists no eval sets")
    events = trials = 0
    for name in names:
        entry = dig(sets, [name, *check], f"{where} eval_sets")
        docs = int(dig(entry, ["docs"], f"{where} eval_sets[{name!r}]"))
        events += round(float(dig(entry, [key], f"{where} eval_sets[{name!r}]")) * docs)
        trials += docs
    if trials == 0:
        raise NotRun(f"{where}: eval sets {names} hold 0 docs")
    side = f", {check[0]} side" if check else ", pretraining side"  # headline rates: pretraining side
    note = f"{events} of {trials} eval docs ({key}{side}) over {', '.join(names)}"
    return Sample((events / trials,), (eval_set,), "eval docs", where, notes=(note,), proportion=(events, trials))


#: The measurements of the audit itself in metrics/leakage.json: ``{section: {rate key: (events key, trials
#: key)}}`` (counts, not rounded rates, so the Clopper-Pearson interval gets the exact events).
AUDIT_CHECKS = {
    "planted": {"miss_rate": ("missed", "planted")},
    "semantic": {"false_discovery_rate": ("flagged_known_clean", "flagged")},
    "residual": {"rate": ("contaminated_docs", "eval_docs"), "rate_before": ("contaminated_docs_before", "eval_docs")},
}


def _audit_check_sample(section: str, part: str, key: str, metrics: Metrics) -> Sample:
    """A ``planted``, ``residual`` or ``semantic`` reference of the grammar above, as a proportion."""
    where = f"metrics/leakage.json {section}"
    if key not in AUDIT_CHECKS[section] or part != {"residual": "all", "semantic": "review"}.get(section, part):
        raise NotRun(
            f"malformed reference leakage/{section}/{part}/{key} (see the grammar in tasks/report/claims/grammar.py)"
        )
    events_key, trials_key = AUDIT_CHECKS[section][key]
    if part == "all" or section == "semantic":
        parts = [dig(metrics.get("leakage"), [section] + (["review"] if section == "semantic" else []), where)]
    else:  # one variant, or several joined by + (pooled)
        parts = [dig(metrics.get("leakage"), [section, "variants", p], where) for p in part.split("+")]
    entry = {k: sum(int(dig(e, [k], where)) for e in parts) for k in (events_key, trials_key)}
    events, trials = entry[events_key], entry[trials_key]
    if trials == 0:
        raise NotRun(f"{where}: 0 {trials_key} for {part} (nothing to measure)")
    unit = {"planted": "planted docs", "semantic": "flagged review pairs"}.get(section, "eval docs")
    note = f"{events} of {trials} {unit} ({section} {part}, {events_key})"
    if section == "residual":
        note += f"; detector: {parts[0].get('detector', 'not recorded')}"
    return Sample((events / trials,), (part,), unit, where, notes=(note,), proportion=(events, trials))
