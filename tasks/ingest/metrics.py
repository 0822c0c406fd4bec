"""The ingest stage's metrics and log lines: per-source counts (in = out + dropped), drops by reason, labels."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SHOWN_PER_REASON = 5  # dropped documents named in the log per reason (all are in dropped.jsonl)


@dataclass
class SourceResult:
    """What one source produced: its output shards (input order, ``ROW_SCHEMA``: one a unit, in the ingest cache),
    dropped entries, counters (``docs_in``, ``docs_out``, ``chars_out``, ``tokens_out``, ``nfc_changed``,
    ``whitespace_normalized``), the docs out per label and the paths its file search skipped (``(path, reason)``,
    see ``records.FoundFiles``)."""

    name: str
    shards: list[Path] = field(default_factory=list)
    labels: Counter = field(default_factory=Counter)
    dropped: list[dict[str, Any]] = field(default_factory=list)
    counts: Counter = field(default_factory=Counter)
    skipped_paths: list[tuple[str, str]] = field(default_factory=list)


def source_metrics(result: SourceResult) -> dict[str, Any]:
    """``docs_in, docs_out, dropped_total, dropped: {reason: n}, nfc_changed, whitespace_normalized,
    chars_out, labels: {label: n}, tokens_out, paths_skipped: {reason: n}`` (files and folders the file
    search passed over: not matching ``include``, a second path to one file or folder, a broken link)."""
    reasons = Counter(entry["reason"] for entry in result.dropped)
    return {
        "docs_in": result.counts["docs_in"],
        "docs_out": result.counts["docs_out"],
        "dropped_total": len(result.dropped),
        "dropped": dict(sorted(reasons.items())),
        "nfc_changed": result.counts["nfc_changed"],
        "whitespace_normalized": result.counts["whitespace_normalized"],
        "chars_out": result.counts["chars_out"],  # code points, as len()
        "tokens_out": result.counts["tokens_out"],
        "labels": dict(sorted(result.labels.items())),
        "paths_skipped": dict(sorted(Counter(reason for _, reason in result.skipped_paths).items())),
    }


def summarize(results: list[SourceResult]) -> dict[str, Any]:
    """Per-source metrics plus totals over all sources."""
    per_source = {result.name: source_metrics(result) for result in results}
    totals = {key: sum(m[key] for m in per_source.values()) for key in ("docs_in", "docs_out", "dropped_total")}
    return {"sources": per_source, "totals": totals}


def log_drops(result: SourceResult, log) -> None:
    """Log the drop counts of a source and the first few dropped documents of each reason by name."""
    shown: Counter = Counter()
    for path, reason in result.skipped_paths:
        if shown[reason] < SHOWN_PER_REASON:
            shown[reason] += 1
            log.info(f"{result.name}: skipped {path} ({reason})")
    for entry in result.dropped:
        if entry["reason"] != "max_docs" and shown[entry["reason"]] < SHOWN_PER_REASON:
            shown[entry["reason"]] += 1
            detail = f": {entry['detail']}" if entry["detail"] else ""
            log.info(f"{result.name}: dropped {entry['where']} ({entry['reason']}{detail})")
    metrics = source_metrics(result)
    skipped = f", paths skipped {metrics['paths_skipped']}" if metrics["paths_skipped"] else ""
    counts = f"{metrics['docs_in']} in, {metrics['docs_out']} out, dropped {metrics['dropped']}"
    log.info(f"{result.name}: {counts}{skipped}")
