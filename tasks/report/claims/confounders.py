"""Known confounders of a claim, each measured from the metrics files where it can be.

``eval_leakage`` (metrics/leakage.json, with the eval docs found in the ``init_from`` model's lineage),
``duplicate_rate`` (metrics/dedup.json), ``truncation_rate`` (metrics/tokenize.json and the fine-tuning length
buckets) and ``diverged_seeds`` (metrics/finetune_*.json); any other name is listed as ``not measured``.
"""

from __future__ import annotations

from tasks.report.claims.grammar import MALFORMED, Claim, Metrics, finetune_run


def measure_confounders(claim: Claim, metrics: Metrics) -> list[str]:
    """One line per known confounder, with its measured value or why it is not measured."""
    lines = []
    for name in claim.known_confounders:
        try:
            lines.append(_measure(name, claim, metrics))
        except MALFORMED as err:
            lines.append(f"{name}: not measured (malformed metrics: {type(err).__name__}: {err})")
    return lines


def _measure(name: str, claim: Claim, metrics: Metrics) -> str:
    source = claim.data_slice.split("/")[0]
    if name == "eval_leakage":
        entry = (metrics.optional("leakage") or {}).get("eval_sets", {}).get(claim.data_slice)
        if entry is None:
            return f"eval_leakage: not measured (no eval set {claim.data_slice!r} in metrics/leakage.json)"
        task_train = ""
        if "task_train_rate_before" in entry:
            task_train = (
                f"; task-train overlap (flagged, kept) {_pct(entry['task_train_rate_before'])} -> "
                f"{_pct(entry.get('task_train_rate_after'))}"
            )
        return (
            f"eval_leakage: {_pct(entry.get('rate_before'))} of {entry.get('docs')} eval docs found in the "
            f"pretraining corpus before the audit, {_pct(entry.get('rate_after'))} after{task_train}"
            f"{_lineage(claim, metrics)}"
        )
    if name == "duplicate_rate":
        entry = (metrics.optional("dedup") or {}).get("sources", {}).get(source)
        if entry is None:
            return f"duplicate_rate: not measured (no source {source!r} in metrics/dedup.json)"
        return (
            f"duplicate_rate: {_pct(entry.get('fraction_removed'))} of {entry.get('docs_in')} docs removed "
            f"({entry.get('exact_duplicates')} exact, {entry.get('near_duplicates')} near)"
        )
    if name == "truncation_rate":
        return _truncation(claim, metrics)
    if name == "diverged_seeds":
        return _diverged(claim, metrics)
    return f"not measured: {name}"


def _lineage(claim: Claim, metrics: Metrics) -> str:
    """The eval docs of the claim's slice found in what the ``pretrain.init_from`` model's lineage trained on
    (``tasks/leakage/lineage_audit.py``): removed from the set, or kept flagged (then they are in the scores)."""
    lineage = (metrics.optional("leakage") or {}).get("lineage") or {}
    entry = (lineage.get("eval_sets") or {}).get(claim.data_slice)
    if not entry or not entry.get("flagged"):
        return ""
    fate = "removed" if lineage.get("action") == "remove" else "flagged, kept"
    return f"; in the init_from model's pretraining lineage ({fate}) {entry['flagged']} of {entry['docs']}"


def _truncation(claim: Claim, metrics: Metrics) -> str:
    tok = metrics.optional("tokenize") or {}
    parts = []
    for tok_name in sorted({_tokenizer_of(ref, metrics) for ref in (claim.treatment, claim.baseline)}):
        rate = tok.get(claim.task, {}).get(tok_name, {}).get("truncation_rate")
        parts.append(f"{tok_name} {_pct(rate)}" if rate is not None else f"{tok_name} not measured")
    parts += [_finetune_truncation(ref, metrics) for ref in dict.fromkeys((claim.treatment, claim.baseline))]
    return (
        f"truncation_rate ({claim.task}; docs longer than tokenize.max_seq_len_tokens, then the cut at "
        "fine-tuning): " + ", ".join(p for p in parts if p)
    )


def _finetune_truncation(ref: str, metrics: Metrics) -> str:
    """Share of test docs cut at the fine-tuning length, the mean share of each doc's tokens the model saw,
    and accuracy on cut vs whole docs (cls details)."""
    found = finetune_run(ref, metrics)
    if found is None:
        return ""
    task, key = found
    run = (metrics.optional(f"finetune/{task}") or {}).get("runs", {}).get(key) or {}
    buckets = (run.get("details") or {}).get("accuracy_by_length")
    if not isinstance(buckets, dict) or not {"truncated", "not_truncated"} <= set(buckets):
        return ""
    cut, whole = buckets["truncated"], buckets["not_truncated"]
    total = (cut.get("docs") or 0) + (whole.get("docs") or 0)
    share = _pct(cut.get("docs", 0) / total) if total else "n/a"
    seen = run.get("test_seen_fraction_mean")
    seen_text = f", tokens seen per doc {_pct(seen)} on average" if seen is not None else ""
    return (
        f"{key} test docs cut at fine-tuning {share}{seen_text}, accuracy cut {_num(cut.get('accuracy'))}"
        f" vs whole {_num(whole.get('accuracy'))}"
    )


def _num(value) -> str:
    return "n/a" if value is None else f"{float(value):.4f}"


def _tokenizer_of(ref: str, metrics: Metrics) -> str:
    found = finetune_run(ref, metrics)
    variant = found[1].split("/")[0] if found else ref.split("/")[1] if "/" in ref else ""
    return "reference" if variant in ("reference", "adapted") else "clozeline"


def _diverged(claim: Claim, metrics: Metrics) -> str:
    found = []
    for ref in (claim.treatment, claim.baseline):
        resolved = finetune_run(ref, metrics)
        if resolved is None:
            continue
        run = (metrics.optional(f"finetune/{resolved[0]}") or {}).get("runs", {}).get(resolved[1])
        if run is not None:
            found.append(f"{resolved[1]}: {len(run.get('diverged_seeds') or [])}")
    return "diverged_seeds: " + ("; ".join(found) if found else "not measured")


def _pct(value) -> str:
    return "n/a" if value is None else f"{100 * float(value):.2f}%"
