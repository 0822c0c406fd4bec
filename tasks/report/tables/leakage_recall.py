"""The leakage audit measured in the report: recall against edit strength per detector (the table, with
Clopper-Pearson intervals; the figure is ``tasks.report.render.figures.recall_figure``) and the semantic
detector's threshold, precision and flags. The semantically clean test items the slice tables and
``items: semantically_clean`` claims use are ``tasks.report.claims.arms.items.semantically_flagged``.

Everything is read from ``metrics/leakage.json`` (``planted``, ``semantic``; see ``tasks/leakage``).
"""

from __future__ import annotations

from tasks.report.claims.grammar import Metrics, NotRun, dig

#: Section title of the tables (``evidence.evidence_tables``).
SECTION = "Data: leakage audit recall against edit strength"
#: Detector labels in the tables and the figure (``tasks.report.render.figures.recall_figure``).
LABELS = {
    "ngram": "13-gram",
    "ngram_substituted": "13-gram, words substituted",
    "exact": "whole doc",
    "minhash_doc": "MinHash doc",
    "minhash_passage": "MinHash passage",
    "semantic": "semantic",
    "lexical": "lexical (any)",
    "audit": "audit (any)",
}


def cell(entry: dict) -> str:
    """``0.9712 [0.9581, 0.9811] 829/853`` (Clopper-Pearson 95%)."""
    if entry.get("recall") is None:
        return "-"
    return f"{entry['recall']:.4f} [{entry['ci_low']:.4f}, {entry['ci_high']:.4f}] {entry['found']}/{entry['n']}"


def recall_grids(metrics: Metrics, cfg=None) -> list:
    """The recall-vs-strength table (rows: variants in ladder order; columns: detectors and the audit), the
    strongest variant per family with recall >= 95% (Clopper-Pearson lower bound, and point estimate), and the
    semantic detector's summary. Raises ``NotRun`` without the planted metrics."""
    leakage = metrics.get("leakage")
    planted = dig(leakage, ["planted"], "metrics/leakage.json")
    variants = dig(planted, ["variants"], "metrics/leakage.json planted")
    if not variants or "by_detector" not in next(iter(variants.values())):
        raise NotRun("metrics/leakage.json planted has no per-detector recall (rerun the leakage stage)")
    detectors = list(planted["detectors"])
    header = ["variant (strength)", "words changed", "planted"] + [LABELS.get(d, d) for d in detectors]
    body = []
    for name, v in variants.items():
        changed = "-" if v.get("words_changed_share") is None else f"{v['words_changed_share']:.0%}"
        body.append(
            [f"{name} ({v['strength']})", changed, str(v["planted"])] + [cell(v["by_detector"][d]) for d in detectors]
        )
    grids = [
        (
            f"Recall on planted copies of every eval doc ({planted['eval_docs_planted']} docs, seed "
            f"{planted['seed']}), [95% Clopper-Pearson CI] found/planted",
            header,
            body,
        )
    ]
    up_to = planted.get("recall_95_up_to") or {}
    rows = [
        [family]
        + [
            f"{(up_to[family].get(d) or {}).get('ci') or 'none'} "
            f"(point: {(up_to[family].get(d) or {}).get('point') or 'none'})"
            for d in detectors
        ]
        for family in up_to
    ]
    grids.append(
        (
            "Strongest variant of each family up to which recall stays >= 95% (CI lower bound; point "
            "estimate in brackets)",
            ["family"] + [LABELS.get(d, d) for d in detectors],
            rows,
        )
    )
    semantic = leakage.get("semantic") or {}
    if semantic.get("enabled"):
        grids.append(("Semantic detector", ["what", "value"], semantic_rows(semantic)))
    return grids


def semantic_rows(s: dict) -> list[list[str]]:
    """The semantic detector's settings, threshold choice, review precision, flags and cost, one per row."""
    review = s.get("review") or {}
    prec = review.get("precision")
    precision = (
        "-"
        if prec is None
        else (
            f"{prec:.4f} [{review['precision_ci_low']:.4f}, "
            f"{review['precision_ci_high']:.4f}] {review['flagged_planted']}/"
            f"{review['flagged']} flagged are planted copies"
        )
    )
    sets = "; ".join(f"{k}: {v['flagged']}/{v['docs']}" for k, v in (s.get("by_eval_set") or {}).items())
    skipped = s.get("eval_docs_not_attempted") or {}
    seconds = s.get("seconds") or {}
    return [
        ["encoder", f"{s.get('encoder')}; {s.get('precision')}; {s.get('device')}"],
        [
            "windows",
            f"{s.get('window_tokens')} tokens every {s.get('stride_tokens')}; corpus "
            f"{(s.get('corpus') or {}).get('windows')} windows of {(s.get('corpus') or {}).get('docs')} "
            f"docs ({(s.get('corpus') or {}).get('search')} search)",
        ],
        ["threshold (cosine)", f"{s.get('threshold')}: {s.get('threshold_rule')} ({s.get('threshold_min_precision')})"],
        [
            "on dev",
            f"recall {s.get('threshold_dev_recall')} of {s.get('threshold_dev_planted')} planted copies, "
            f"false flag rate {s.get('threshold_dev_false_flag_rate')} of {s.get('threshold_dev_clean_pairs')} "
            f"known-clean pairs, precision {s.get('threshold_dev_precision')}",
        ],
        ["precision on the review sample (test)", f"{precision}; data/leakage/{review.get('file')}"],
        [
            "eval docs flagged",
            f"{s.get('eval_docs_flagged')} of {s.get('eval_docs')} ({sets}); action {s.get('action')}",
        ],
        [
            "not matched semantically",
            f"{skipped.get('no_words', 0)} without words, {skipped.get('under_min_words', 0)}"
            f" under {s.get('min_words')} words",
        ],
        [
            "cost",
            f"{s.get('tokens_embedded')} tokens in {s.get('windows_embedded')} windows embedded, "
            f"{s.get('windows_from_cache')} from the cache; {seconds.get('total')} s in all",
        ],
    ]
