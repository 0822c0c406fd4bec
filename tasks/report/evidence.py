"""Tables of the report beyond the claims: behavioural minimal pairs per phenomenon and model, and the
operational evidence (calibration, inference cost) of the fine-tuned models.

Each builder returns ``render.Grid`` tables, or a ``not computed: <why>`` string when its input is missing.
"""

from __future__ import annotations

from tasks.report.claims import MALFORMED, Metrics, NotRun, dig
from tasks.report.statistics import proportion_ci

#: Section titles, in report order.
PAIRS = "Behavioural: minimal pairs"


def evidence_tables(metrics: Metrics, level: float) -> dict[str, list | str]:
    """``{section title: grids or why not}`` for every section of this module."""
    out: dict[str, list | str] = {}
    for title, build in ((PAIRS, pair_grids),):
        try:
            out[title] = build(metrics, level)
        except (NotRun, *MALFORMED) as why:
            out[title] = f"not computed: {why}"
    return out


def pair_grids(metrics: Metrics, level: float) -> list:
    """Accuracy per phenomenon (rows) and model (columns) with a Clopper-Pearson interval over pairs, and the
    pairs whose two sentences have unequal token counts under each model's tokenizer."""
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
    return [(f"Pairs passed, PLL(good) > PLL(bad): {pairs['method']}", header, body),
            ("Pairs with unequal token counts (a summed score favours the shorter sentence)",
             ["phenomenon (pairs)", *variants], lengths)]


def accuracy_cell(counts: dict, level: float) -> str:
    """``0.7308 [0.5221, 0.8843] 19/26`` (Clopper-Pearson), with the tie count when there are ties."""
    est = proportion_ci(int(counts["passed"]), int(counts["pairs"]), level)
    ties = f", {counts['ties']} ties" if counts.get("ties") else ""
    return f"{est.mean:.4f} [{est.low:.4f}, {est.high:.4f}] {counts['passed']}/{counts['pairs']}{ties}"
