"""The claim page: what it shows of evaluated claims, figures and the experiment ledger (the headline table's
cells, the details, the grouping by kind of evidence, the statistics note), and ``claims.md``, its Markdown;
``claims_html`` writes the same page as HTML."""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

from tasks.report.claims.arms.seed_scores import READING
from tasks.report.claims.grammar import EVIDENCE
from tasks.report.claims.row import Row
from tasks.report.render.answer import answer, integrity_line, verdict_cell
from tasks.report.stats.estimates import VERDICTS, Estimate
from tasks.report.stats.power import describe, describe_components
from tasks.report.tables.slices import SliceTable
from tasks.tracking import training_view_url

#: The headline table: one row per claim. The arms' and the difference's lines share a cell; the statement,
#: reason, confounders and provenance are in the claim's details.
TABLE_HEADER = ("claim", "arms [CI]", "difference [CI]", "verdict")
#: A titled table: ``(title, header cells, rows of cells)``.
Grid = tuple[str, list[str], list[list[str]]]
#: The figure drawn right under the claim table, above the details.
FOREST = "Forest plot: every claim's difference with its CI"
SINCE = "Since the last run"  # the entry of ``tables`` right under the claim table (``render.since``)
STATS_NOTE = (
    "Each value is mean [lower, upper] of a two-sided {level:.0%} interval, clipped to the metric's range. "
    "Fine-tuning claims: a paired hierarchical bootstrap that resamples seeds (jointly when both arms ran the "
    "same seeds), then test items with the same draw for both arms; both arms come from the same resamples, the "
    "best baseline (chosen on dev) from its own. Sense-probe claims: a paired nested bootstrap that resamples "
    "probe words, then sentences within each sense of each drawn word, the same draws for both arms; other probe "
    "claims: Student-t over probe words or pairs (paired t, or a percentile bootstrap if params say so); rates: "
    "Clopper-Pearson. The difference of fine-tuning arms: a t interval on Satterthwaite's degrees of freedom over "
    "its variance components (pretraining seed, fine-tuning seed, test item; the details list them), as a "
    "percentile bootstrap over a few seeds understates the seed part. Verdict: supported when the CI's lower "
    "bound exceeds "
    "min_effect; contradicted when its upper bound is below min(0, min_effect); equivalent when two one-sided "
    "tests put the difference within +-min_effect; ruled out when, for a positive min_effect, the CI's upper bound "
    "is below min_effect; inconclusive otherwise. An upper_bound claim compares the "
    "treatment's CI with min_effect as the bound. Every decisive verdict must also survive Holm's step-down "
    "correction within its family, declared before the data (primary: the claims the question names; findings: "
    "the rest; integrity: checks and positive controls, preconditions of the run, outside the headline; m counts "
    "every claim of the family, tested or not) at family-wise "
    "alpha = {alpha:.2g} per family (two-sided p-values, as the CIs are; TOST for equivalent), or it reads "
    "inconclusive, with the unadjusted verdict beside it. MDE: the true difference found with the power "
    "report.mde_power sets, against the claim's margin at Holm's first step (alpha / m): min_effect + (q + q) x "
    "the SE of the difference (Bloom 1995); an inconclusive claim whose |difference - min_effect| is below that "
    "reach says underpowered, and its details name the seeds x test items that would decide it. An "
    "upper_bound claim's MDE is how far below the bound the true value must lie to be supported with that power "
    "(one-sample binomial design for a rate); underpowered there means its point estimate's gap to the bound is "
    "below it. "
    "`not run: <why>`: an input is missing. `not resolvable: <why>`: a precondition failed (e.g. the pretrained "
    "encoder did not beat the unigram baseline, too many seeds diverged, or the claim is undecided and its "
    "treatment arm's CI against its floor baseline on test lies at or below report.floor_margin: `<arm> at "
    "floor`), so the arms say nothing about the claim. A decided claim keeps its verdict; the floor gate adds its "
    "scope to its notes."
)


def fmt_estimate(est: Estimate | None, with_n: bool = True) -> str:
    """``0.8200 [0.7703, 0.8697] n=3``; ``0.8200 (no CI) n=1``; ``-`` for none."""
    if est is None:
        return "-"
    ci = f"[{est.low:.4f}, {est.high:.4f}]" if est.has_ci else "(no CI)"
    return f"{est.mean:.4f} {ci}" + (f" n={est.n}" if with_n else "")


def verdict_text(row: Row) -> str:
    """The verdict cell: the verdict, why an inconclusive one was underpowered, its Holm-adjusted p-value and
    the verdict before Holm when Holm changed it (``answer.verdict_cell``)."""
    return verdict_cell(row)


class Link(NamedTuple):
    """A hyperlink in a details list: shown as ``text``, pointing at ``url``."""

    text: str
    url: str


#: One headline-table cell: its lines (joined by a line break in both formats).
Cell = list[str]


def table_cells(row: Row) -> tuple[str, Cell, Cell, str]:
    """The cells of one row of the headline table (``TABLE_HEADER``): the claim id, the arms with their CIs
    (treatment, baseline, and the best baseline chosen on dev when there is one), the difference with its CI,
    min_effect and the test items x seeds behind it, and the verdict."""
    arms = [f"treatment {fmt_estimate(row.treatment, False)}", f"baseline {fmt_estimate(row.baseline, False)}"]
    if row.best_baseline:
        arms.append(f"best baseline (dev) {row.best_baseline_key}: {fmt_estimate(row.best_baseline, False)}")
    flipped = f" ({row.difference_label})" if row.difference_label != "treatment - baseline" else ""
    difference = [fmt_estimate(row.difference, False) + flipped, f"min_effect {row.claim.min_effect:g}"]
    items = row.items or (f"n={row.difference.n}" if row.difference is not None else "")
    return row.claim.id, arms, difference + ([items] if items else []), verdict_text(row)


def run_url(mlflow_ui_url: str, run_id: str, experiment_id: str = "") -> str:
    """The MLflow UI's page of a run: under its experiment on the model-training view when the experiment is
    known (``#/experiments/<e>/runs/<id>?workflowType=machine_learning``: ``tracking.training_view_url``),
    else ``#/runs/<id>`` (which redirects to the run's experiment, on the UI's default view)."""
    if experiment_id:
        return training_view_url(mlflow_ui_url, experiment_id, run_id)
    return f"{mlflow_ui_url.rstrip('/')}/#/runs/{run_id}"


def run_links(row: Row, mlflow_ui_url: str) -> list[Link]:
    """The arms' MLflow runs as links named by run name (``cls/pretrained/full/mean-pool``), not by id."""
    return [Link(name, run_url(mlflow_ui_url, run_id, experiment)) for name, run_id, experiment in row.runs]


Items = list[tuple[str, str | list[str] | list[Link]]]


def detail_items(row: Row) -> Items:
    """The per-claim details shown open: statement, references, statistics and notes."""
    c = row.claim
    effect = (
        f"{row.effect_size:.3g}"
        if row.effect_size is not None
        else (
            f"not computed (the CI resamples two levels, {row.items}; a d over the upper level alone would not match "
            "it)"
            if row.items
            else "not defined (no spread over units)"
        )
    )
    p_values = (
        f"{row.p_value:.3g} (two-sided; TOST for equivalent); Holm-adjusted {row.p_adjusted:.3g}"
        if row.p_adjusted is not None
        else "none (no test: see the verdict)"
    )
    return [
        ("statement", c.statement),
        ("evidence / kind / task / metric", f"{c.evidence} / {c.kind} / {c.task} / {c.metric}"),
        ("Holm family", f"{c.family}; verdict before Holm: {row.unadjusted or row.verdict}"),
        ("data slice", f"{c.data_slice}; items: {c.items}; " + (row.items or "see the units below")),
        ("treatment", f"{c.treatment}: {fmt_estimate(row.treatment)}"),
        ("baseline", f"{c.baseline}: {fmt_estimate(row.baseline)}"),
        (
            "best baseline (chosen on dev)",
            f"{row.best_baseline_key}: {fmt_estimate(row.best_baseline)}"
            if row.best_baseline
            else "none (not a fine-tuning claim, or no baseline was fitted)",
        ),
        (
            "difference",
            f"{row.difference_label}: {fmt_estimate(row.difference)}; Cohen's d over the units of the CI {effect}",
        ),
        ("minimum detectable effect", describe(row.power)),
        ("variance components", describe_components(row.power) or "not computed (not a contrast of fine-tuning arms)"),
        (
            "probability of improvement and ASO (per-run scores)",
            (
                f"{row.comparison.describe()}. Reading: {READING}"
                if row.comparison
                else "not computed (not a difference of fine-tuning arms, or a calibration claim)"
            )
            + "; tuning budgets and variance shares: see Figures",
        ),
        ("ablation (removed in the baseline)", c.ablation),
        ("verdict", row.reason if row.reason.startswith(row.verdict) else f"{row.verdict}: {row.reason}"),
        ("statistics", row.pairing or "-"),
        ("p-value of the verdict's test", p_values),
        ("optimiser steps per run", row.steps or ["not a fine-tuning claim between trained arms"]),
        ("notes", row.notes or ["none"]),
    ]


def folded_items(row: Row, mlflow_ui_url: str) -> Items:
    """The per-claim details folded away by default: measured confounders and provenance."""
    return [
        ("confounders (measured)", row.confounders or ["none listed"]),
        ("MLflow runs", run_links(row, mlflow_ui_url) or ["none recorded in the metrics"]),
        ("data md5 (dvc.lock)", [f"{p}: {m}" for p, m in row.data_md5.items()] or ["dvc.lock has no entry"]),
    ]


def folded_summary(row: Row) -> str:
    """The one line shown for the folded details: ``confounders (3) and provenance (2 runs, 4 data md5s)``."""
    return (
        f"confounders ({len(row.confounders)}) and provenance ({len(row.runs)} MLflow runs, "
        f"{len(row.data_md5)} data md5s)"
    )


# ---------------------------------------------------------------- markdown


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def by_evidence(rows: list[Row]) -> list[tuple[str, list[Row]]]:
    """The rows grouped by kind of evidence, in ``EVIDENCE`` order (file order within a kind); empty kinds kept."""
    return [(kind, [row for row in rows if row.claim.evidence == kind]) for kind in EVIDENCE]


def group_title(kind: str, rows: list[Row]) -> str:
    """``behavioural evidence: 1 supported, 2 inconclusive (3 claims)``, or ``... : no claims``."""
    if not rows:
        return f"{kind} evidence: no claims"
    counts = {v: sum(row.verdict == v for row in rows) for v in VERDICTS}
    noun = "claim" if len(rows) == 1 else "claims"
    return f"{kind} evidence: " + ", ".join(f"{n} {v}" for v, n in counts.items() if n) + f" ({len(rows)} {noun})"


def claim_table_md(rows: list[Row]) -> str:
    """The headline claim table as a Markdown (GFM) table grouped by kind of evidence, one line per claim,
    each linking to its details; a cell's lines are joined by ``<br>``."""
    lines = ["| " + " | ".join(TABLE_HEADER) + " |", "|" + "---|" * len(TABLE_HEADER)]
    for kind, group in by_evidence(rows):
        lines.append(f"| **{group_title(kind, group)}** |" + " |" * (len(TABLE_HEADER) - 1))
        for row in group:
            claim, arms, difference, verdict = table_cells(row)
            joined = ("<br>".join(map(_md_cell, lines)) for lines in (arms, difference))
            cells = [f"[{_md_cell(claim)}](#{row.claim.id})", *joined, _md_cell(verdict)]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _md_value(value: str | Link) -> str:
    return f"[{value.text}]({value.url})" if isinstance(value, Link) else str(value)


def _md_items(items) -> list[str]:
    out = []
    for key, value in items:
        if isinstance(value, list):
            out.append(f"- **{key}**:")
            out += [f"  - {_md_value(v)}" for v in value]
        else:
            out.append(f"- **{key}**: {value}")
    return out


def claim_details_md(row: Row, mlflow_ui_url: str) -> list[str]:
    """One claim's details: the open list, then confounders and provenance in a ``<details>`` block."""
    return [
        f'### <a id="{row.claim.id}"></a>{row.claim.id}',
        "",
        *_md_items(detail_items(row)),
        "",
        f"<details><summary>{html.escape(folded_summary(row))}</summary>",
        "",
        *_md_items(folded_items(row, mlflow_ui_url)),
        "",
        "</details>",
        "",
    ]


def verdict_summary(rows: list[Row]) -> str:
    """``"2 supported, 6 inconclusive, 1 contradicted, 0 not run (of 9 claims; the 7 integrity checks are on their own
    line)"``: the table in one line, the integrity checks left out (preconditions of the run, on their own line:
    ``answer.integrity_line``)."""
    counted = [row for row in rows if row.claim.family != "integrity"]
    counts = {verdict: sum(row.verdict == verdict for row in counted) for verdict in VERDICTS}
    checks = len(rows) - len(counted)
    apart = f"; the {checks} integrity checks are on their own line" if checks else ""
    return ", ".join(f"{n} {verdict}" for verdict, n in counts.items()) + f" (of {len(counted)} claims{apart})"


def markdown(
    question: str,
    rows: list[Row],
    figures: Mapping[str, Path | str],
    ledger: Mapping[str, object],
    level: float,
    mlflow_ui_url: str,
    slices: Mapping[str, SliceTable | str],
    tables: Mapping[str, list[Grid] | str],
    warnings: Sequence[str] = (),
) -> str:
    """The full ``claims.md``: ``warnings`` (the run's params, at the top), question, claim table, "Since the last
    run" (``tables[SINCE]``, if given), forest plot, statistics note, per-claim details, slice tables, the other
    ``tables``, figures (title -> PNG path relative to the Markdown file, or why not), ledger."""

    def figure(title: str, fig: Path | str) -> list[str]:
        return [f"### {title}", "", f"![{title}]({fig})" if isinstance(fig, Path) else f"_{fig}_", ""]

    parts = [
        "# clozeline claim table",
        "",
        *[f"> **Warning.** {w}\n" for w in warnings],
        f"**Question.** {question}",
        "",
        f"**Answer.** {answer(rows)}",
        "",
        f"**Integrity.** {integrity_line(rows)}",
        "",
        f"**Verdicts.** {verdict_summary(rows)}",
        "",
        "**By kind of evidence** (every claim, the integrity checks included). "
        + "; ".join(group_title(k, g) for k, g in by_evidence(rows)),
        "",
        claim_table_md(rows),
    ]
    parts += [f"## {SINCE}", "", *grids_md(SINCE, tables[SINCE])] if SINCE in tables else []
    if FOREST in figures:
        parts += figure(FOREST, figures[FOREST])
    parts += [STATS_NOTE.format(level=level, alpha=1 - level), "", "## Claims in detail", ""]
    for row in (r for _, group in by_evidence(rows) for r in group):  # the table's order
        parts += claim_details_md(row, mlflow_ui_url)
    parts += ["## Slices", ""] + [line for task, table in slices.items() for line in slice_md(task, table)]
    for name, grids in ((n, g) for n, g in tables.items() if n != SINCE):
        parts += [f"## {name}", "", *grids_md(name, grids)]
    parts += ["## Figures", ""]
    for title, fig in figures.items():
        parts += figure(title, fig) if title != FOREST else []
    parts += ["## Experiment ledger", "", *_md_items(ledger_items(ledger)), ""]
    return "\n".join(parts)


def slice_grids(table: SliceTable) -> list[Grid]:
    """``(title, header, rows of cells)`` of a task's two slice grids: the headline metric by item slice, and
    the per-label F1."""

    def grid(columns: tuple[str, ...]) -> tuple[list[str], list[list[str]]]:
        header = ["arm"] + [f"{c} (n={table.sizes[c]})" for c in columns]
        body = [[arm] + [fmt_estimate(cells[c], False) for c in columns] for arm, cells in table.rows.items()]
        return header, body

    kind = "class" if table.module == "cls" else "entity type (n = gold entities)"
    over = " (macro over the classes present in each slice)" if table.module == "cls" else ""
    return [
        (f"{table.task}: {table.metric} by test slice{over}", *grid(table.columns)),
        (f"{table.task}: F1 per {kind}", *grid(table.label_columns)),
    ]


def grids_md(name: str, grids: list[Grid] | str) -> list[str]:
    """Markdown lines of titled tables (``(title, header, rows)``), or ``name`` with the reason there are none."""
    if isinstance(grids, str):
        return [f"### {name}", "", f"_{grids}_", ""]
    lines = []
    for title, header, body in grids:
        lines += [f"### {title}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in body] + [""]
    return lines


def slice_md(task: str, table: SliceTable | str) -> list[str]:
    """Markdown lines of one task's slice tables, or the reason they were not computed."""
    return grids_md(task, table if isinstance(table, str) else slice_grids(table))


def ledger_items(ledger: Mapping[str, object]) -> list[tuple[str, str | list[str]]]:
    items = []
    for key, value in ledger.items():
        if isinstance(value, Mapping):
            items.append((key, [f"{k}: {v}" for k, v in value.items()] or ["none"]))
        elif isinstance(value, list):
            items.append((key, [str(v) for v in value] or ["none"]))
        else:
            items.append((key, str(value)))
    return items
