"""What the report says first: the answer to its own question from the primary family of claims (decided verdicts
first), the findings in one sentence, the integrity checks on a line of their own, and each claim's verdict cell
(the verdict, why it is inconclusive when it was underpowered, the Holm-adjusted p-value and the verdict before
Holm when Holm demoted it)."""

from __future__ import annotations

from tasks.report.claims.row import Row
from tasks.report.stats.estimates import DECISIVE
from tasks.report.stats.power import underpowered

#: How each verdict reads in the lead sentence.
PHRASES = {
    "supported": "supported",
    "equivalent": "equivalent (no difference beyond min_effect)",
    "ruled out": "ruled out (an effect of min_effect excluded)",
    "contradicted": "contradicted",
    "inconclusive": "inconclusive",
    "not resolvable": "not resolvable",
    "not run": "not run",
}


def verdict_cell(row: Row) -> str:
    """``supported (Holm p 0.004 in the primary family)``; ``inconclusive (underpowered: MDE 0.0600 > min_effect
    0.02; Holm p 0.3 in the secondary family)``; ``inconclusive (Holm p 0.08 in the secondary family; unadjusted:
    supported)``; a ``not resolvable`` row gives its reason."""
    if row.verdict == "not resolvable":
        return row.reason
    parts = []
    why = underpowered(row.power) if row.verdict == "inconclusive" else ""
    if why:
        parts.append(why)
    if row.p_adjusted is not None:
        parts.append(f"Holm p {row.p_adjusted:.2g} in the {row.claim.family} family")
    if row.unadjusted and row.unadjusted != row.verdict:
        parts.append(f"unadjusted: {row.unadjusted}")
    return row.verdict + (f" ({'; '.join(parts)})" if parts else "")


def without_parentheses(text: str) -> str:
    """``text`` without its parenthesized asides (nested ones too), for the one-sentence answer: ``pretrained/full/
    first at floor (dev 0.09; floor: x (y))`` -> ``pretrained/full/first at floor``."""
    out, depth = [], 0
    for char in text:
        depth += char == "("
        if depth == 0:
            out.append(char)
        depth -= char == ")" and depth > 0
    return " ".join("".join(out).split()).replace(" ;", ";").replace(" ,", ",")


def _clause(row: Row) -> str:
    """``pretraining-helps-cls is supported (difference 0.0410 [0.0120, 0.0700])`` or with the reason."""
    text = f"{row.claim.id} is {PHRASES[row.verdict]}"
    if row.verdict in ("not resolvable", "not run"):
        return f"{text} ({without_parentheses(row.reason.split(': ', 1)[-1])})"
    diff = row.difference
    if diff is not None and diff.has_ci:
        text += (
            f" (difference {diff.mean:+.4f} [{diff.low:.4f}, {diff.high:.4f}] against min_effect "
            f"{row.claim.min_effect:g})"
        )
    asides = [underpowered(row.power), deciding_design(row)] if row.verdict == "inconclusive" else []
    asides += [f"scope: {scope}" for scope in floor_scopes(row)]
    return text + "".join(f", {aside}" for aside in asides if aside)


def deciding_design(row: Row) -> str:
    """``what would decide it: <design>`` of an undecided claim (``Power.design``'s note: seeds x items, or why no
    design in reach does), or ``""`` when its gap is detectable or it has no power analysis."""
    p = row.power
    if p is None or p.detectable or p.n_needed is None:
        return ""
    _, note = p.design()
    return f"what would decide it: {note}" if note else ""


def floor_scopes(row: Row) -> list[str]:
    """The floor gate's arms at floor, short: ``pretrained/full/mean-pool at floor on test``."""
    return [without_parentheses(arm) for arm in row.at_floor]


def answer(rows: list[Row]) -> str:
    """The lead: the primary family's decided verdicts with their differences first, then its undecided claims,
    then one sentence on the findings (counts per verdict); integrity checks are left out (``integrity_line``).
    Says so when no claim is primary."""
    primary = [r for r in rows if r.claim.family == "primary"]
    if not primary:
        return "No claim is declared primary (claims.yaml family: primary), so the report gives no one-line answer."
    decided = [r for r in primary if r.verdict in DECISIVE]
    supported = sum(r.verdict == "supported" for r in primary)
    head = (
        f"{len(decided)} of the {len(primary)} primary claims (Holm within the family, m = {len(primary)}) "
        f"{'is' if len(decided) == 1 else 'are'} decided, {supported} supported: "
    )
    ordered = decided + [r for r in primary if r.verdict not in DECISIVE]
    return head + "; ".join(_clause(r) for r in ordered) + ". " + findings_sentence(rows)


def findings_sentence(rows: list[Row]) -> str:
    """``Findings: 3 of 12 decided (2 supported, 1 contradicted), 9 not.`` over the ``findings`` family."""
    findings = [r for r in rows if r.claim.family == "findings"]
    if not findings:
        return "No findings beyond the primary claims."
    decided = [r for r in findings if r.verdict in DECISIVE]
    counts = ", ".join(
        f"{sum(r.verdict == v for r in decided)} {v}" for v in DECISIVE if any(r.verdict == v for r in decided)
    )
    return f"Findings: {len(decided)} of {len(findings)} decided" + (f" ({counts})." if counts else ".")


def integrity_line(rows: list[Row]) -> str:
    """The integrity checks and positive controls (family ``integrity``), on a line of their own: preconditions of
    the run, not findings. ``all 7 passed``, or each one that did not pass with its verdict and reason."""
    checks = [r for r in rows if r.claim.family == "integrity"]
    if not checks:
        return "No integrity checks declared."
    failed = [r for r in checks if r.verdict != "supported"]
    if not failed:
        return f"Integrity checks (preconditions of the run, not findings): all {len(checks)} passed."
    listed = "; ".join(f"{r.claim.id} is {r.verdict} ({without_parentheses(r.reason)})" for r in failed)
    return (
        f"Integrity checks (preconditions of the run, not findings): {len(checks) - len(failed)} of {len(checks)} "
        f"passed; NOT PASSED: {listed}. The claims resting on them say so in their notes."
    )
