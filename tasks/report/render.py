"""Render evaluated claims, figures and the experiment ledger as Markdown and as one self-contained HTML
file (figures embedded as base64 PNG, inline CSS, no script, no external resource)."""

from __future__ import annotations

import base64
import html
from collections.abc import Mapping
from pathlib import Path

from tasks.report.evaluation import Row
from tasks.report.statistics import VERDICTS, Estimate

TABLE_HEADER = ("claim", "treatment", "baseline", "difference", "min_effect", "verdict", "statistics",
                "confounders (measured)", "MLflow runs; data md5 (dvc.lock)")
STATS_NOTE = (
    "Each value is mean [lower, upper] of a two-sided {level:.0%} CI with n units (seeds, probe words or eval "
    "docs). Arms: Student-t over units; rates: Clopper-Pearson. Differences (treatment - baseline): paired "
    "when both arms share their units (paired t, or a paired percentile bootstrap if params say so), "
    "otherwise Welch's t; the method used is named in each row. All quantiles come from scipy. Verdict: "
    "supported when the difference's CI lower bound exceeds min_effect; contradicted when its upper bound is "
    "below min(0, min_effect); inconclusive otherwise. An upper_bound claim compares the treatment's CI with "
    "min_effect as the bound. A claim whose inputs are missing reads `not run: <why>`; one whose "
    "precondition failed (e.g. the pretrained encoder did not beat the unigram baseline) reads "
    "`not resolvable: <precondition>, measured <value>`: its arms say nothing about the claim."
)


def fmt_estimate(est: Estimate | None) -> str:
    """``0.8200 [0.7703, 0.8697] n=3``; ``0.8200 (no CI) n=1``; ``-`` for none."""
    if est is None:
        return "-"
    ci = f"[{est.low:.4f}, {est.high:.4f}]" if est.has_ci else "(no CI)"
    return f"{est.mean:.4f} {ci} n={est.n}"


def table_cells(row: Row) -> tuple[str, ...]:
    """The plain-text cells of one row for the first seven columns of ``TABLE_HEADER``."""
    c = row.claim
    verdict = row.reason if row.verdict in ("not run", "not resolvable") else f"{row.verdict} ({row.reason})"
    return (f"{c.id}: {c.statement}", fmt_estimate(row.treatment), fmt_estimate(row.baseline),
            fmt_estimate(row.difference), f"{c.min_effect:g}", verdict, row.pairing or "-")


def run_url(mlflow_ui_url: str, run_id: str) -> str:
    """The MLflow UI's direct run page (``#/runs/<id>``, which redirects to the run's experiment)."""
    return f"{mlflow_ui_url.rstrip('/')}/#/runs/{run_id}"


def md5_text(row: Row) -> str:
    """``path md5`` pairs of the data behind a row, or why there are none."""
    return "; ".join(f"{p} {m}" for p, m in row.data_md5.items()) or "no dvc.lock entry"


def detail_items(row: Row) -> list[tuple[str, str | list[str]]]:
    """The per-claim detail list: references, confounders, provenance, notes."""
    c = row.claim
    return [
        ("statement", c.statement),
        ("kind / task / data slice / metric", f"{c.kind} / {c.task} / {c.data_slice} / {c.metric}"),
        ("treatment", c.treatment),
        ("baseline", c.baseline),
        ("ablation (removed in the baseline)", c.ablation),
        ("verdict", f"{row.verdict}: {row.reason}"),
        ("confounders (measured)", row.confounders or ["none listed"]),
        ("MLflow run ids", row.run_ids or ["none recorded in the metrics"]),
        ("data md5 (dvc.lock)", [f"{p}: {m}" for p, m in row.data_md5.items()] or ["dvc.lock has no entry"]),
        ("notes", row.notes or ["none"]),
    ]


# ---------------------------------------------------------------- markdown


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def claim_table_md(rows: list[Row], mlflow_ui_url: str) -> str:
    """The claim table alone as a Markdown (GFM) table, one line per claim; run ids link to the MLflow UI."""
    lines = ["| " + " | ".join(TABLE_HEADER) + " |", "|" + "---|" * len(TABLE_HEADER)]
    for row in rows:
        runs = ", ".join(f"[{r}]({run_url(mlflow_ui_url, r)})" for r in row.run_ids) or "no run ids"
        confounders = _md_cell("; ".join(row.confounders) or "none listed")
        cells = [_md_cell(c) for c in table_cells(row)] + [confounders, f"{runs}; {_md_cell(md5_text(row))}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _md_items(items) -> list[str]:
    out = []
    for key, value in items:
        if isinstance(value, list):
            out.append(f"- **{key}**:")
            out += [f"  - {v}" for v in value]
        else:
            out.append(f"- **{key}**: {value}")
    return out


def verdict_summary(rows: list[Row]) -> str:
    """``"2 supported, 6 inconclusive, 1 contradicted, 0 not run (of 9 claims)"``: the table in one line."""
    counts = {verdict: sum(row.verdict == verdict for row in rows)
              for verdict in VERDICTS}
    return ", ".join(f"{n} {verdict}" for verdict, n in counts.items()) + f" (of {len(rows)} claims)"


def markdown(question: str, rows: list[Row], figures: Mapping[str, Path | str], ledger: Mapping[str, object],
             level: float, mlflow_ui_url: str) -> str:
    """The full ``claims.md``: question, claim table, statistics note, per-claim details, figures, ledger.

    ``figures`` maps a title to a PNG path relative to the Markdown file, or to a ``not drawn: <why>`` string.
    """
    parts = ["# clozeline claim table", "", f"**Question.** {question}", "",
             f"**Verdicts.** {verdict_summary(rows)}", "", claim_table_md(rows, mlflow_ui_url),
             STATS_NOTE.format(level=level), "", "## Claims in detail", ""]
    for row in rows:
        parts += [f"### {row.claim.id}", "", *_md_items(detail_items(row)), ""]
    parts += ["## Figures", ""]
    for title, fig in figures.items():
        parts += [f"### {title}", "", f"![{title}]({fig})" if isinstance(fig, Path) else f"_{fig}_", ""]
    parts += ["## Experiment ledger", "", *_md_items(_ledger_items(ledger)), ""]
    return "\n".join(parts)


def _ledger_items(ledger: Mapping[str, object]) -> list[tuple[str, str | list[str]]]:
    items = []
    for key, value in ledger.items():
        if isinstance(value, Mapping):
            items.append((key, [f"{k}: {v}" for k, v in value.items()] or ["none"]))
        elif isinstance(value, list):
            items.append((key, [str(v) for v in value] or ["none"]))
        else:
            items.append((key, str(value)))
    return items


# ---------------------------------------------------------------- html

CSS = """
body{font-family:system-ui,sans-serif;margin:2em;max-width:1400px;color:#222}
table{border-collapse:collapse;font-size:13px}th,td{border:1px solid #bbb;padding:4px 6px;vertical-align:top}
th{background:#eee}.supported{background:#d4f4d4}.contradicted{background:#f8d0d0}
.inconclusive{background:#fff3c4}.not-run{background:#e4e4e4;font-style:italic}
.not-resolvable{background:#e0e4f4;font-style:italic}
img{max-width:100%;border:1px solid #ddd}ul.tight{margin:0;padding-left:1.1em}
"""


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def claim_table_html(rows: list[Row], mlflow_ui_url: str) -> str:
    """The claim table as an HTML ``<table id="claims">``; each row's class is its verdict."""
    head = "".join(f"<th>{_e(h)}</th>" for h in TABLE_HEADER)
    body = []
    for row in rows:
        runs = ", ".join(f'<a href="{_e(run_url(mlflow_ui_url, r))}">{_e(r)}</a>' for r in row.run_ids)
        provenance = f"{runs or 'no run ids'}; {_e(md5_text(row))}"
        confounders = "".join(f"<li>{_e(c)}</li>" for c in row.confounders) or "<li>none listed</li>"
        cells = "".join(f"<td>{_e(c)}</td>" for c in table_cells(row))
        cells += f'<td><ul class="tight">{confounders}</ul></td><td>{provenance}</td>'
        body.append(f'<tr id="{_e(row.claim.id)}" class="{row.verdict.replace(" ", "-")}">{cells}</tr>')
    return f'<table id="claims"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'


def _html_items(items) -> str:
    out = []
    for key, value in items:
        if isinstance(value, list):
            inner = "".join(f"<li>{_e(v)}</li>" for v in value)
            out.append(f"<li><b>{_e(key)}</b>:<ul>{inner}</ul></li>")
        else:
            out.append(f"<li><b>{_e(key)}</b>: {_e(value)}</li>")
    return "<ul>" + "".join(out) + "</ul>"


def _img(path: Path, title: str) -> str:
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return f'<img alt="{_e(title)}" src="data:image/png;base64,{data}">'


def html_page(question: str, rows: list[Row], figures: Mapping[str, Path | str], ledger: Mapping[str, object],
              level: float, mlflow_ui_url: str) -> str:
    """The full ``claims.html``, self-contained. ``figures`` maps a title to an absolute PNG path or a reason."""
    parts = ['<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">',
             "<title>clozeline claim table</title>", f"<style>{CSS}</style></head><body>",
             "<h1>clozeline claim table</h1>", f"<p><b>Question.</b> {_e(question)}</p>",
             f"<p><b>Verdicts.</b> {_e(verdict_summary(rows))}</p>",
             claim_table_html(rows, mlflow_ui_url), f"<p>{_e(STATS_NOTE.format(level=level))}</p>", "<h2>Claims in detail</h2>"]
    for row in rows:
        parts += [f'<h3 id="detail-{_e(row.claim.id)}">{_e(row.claim.id)}</h3>', _html_items(detail_items(row))]
    parts.append("<h2>Figures</h2>")
    for title, fig in figures.items():
        parts += [f"<h3>{_e(title)}</h3>", _img(fig, title) if isinstance(fig, Path) else f"<p><i>{_e(fig)}</i></p>"]
    parts += ["<h2>Experiment ledger</h2>", _html_items(_ledger_items(ledger)), "</body></html>"]
    return "\n".join(parts) + "\n"
