"""``claims.html``: the claim page of ``pages`` as one self-contained HTML file (figures embedded as base64 PNG,
inline CSS, no script, no external resource)."""

from __future__ import annotations

import base64
import html
from collections.abc import Mapping, Sequence
from pathlib import Path

from tasks.report.claims.row import Row
from tasks.report.render.answer import answer, integrity_line
from tasks.report.render.pages import (
    FOREST,
    SINCE,
    STATS_NOTE,
    TABLE_HEADER,
    Grid,
    Link,
    by_evidence,
    detail_items,
    folded_items,
    folded_summary,
    group_title,
    ledger_items,
    slice_grids,
    table_cells,
    verdict_summary,
)
from tasks.report.tables.slices import SliceTable

CSS = """
body{font-family:system-ui,sans-serif;margin:2em;max-width:1400px;color:#222}
table{border-collapse:collapse;font-size:13px}th,td{border:1px solid #bbb;padding:4px 6px;vertical-align:top}
th{background:#eee}tr.evidence th{background:#dde;text-align:left}.supported{background:#d4f4d4}\
.contradicted{background:#f8d0d0}
.inconclusive{background:#fff3c4}.not-run{background:#e4e4e4;font-style:italic}
.not-resolvable{background:#e0e4f4;font-style:italic}.equivalent{background:#d4eef4}.ruled-out{background:#f4e4d0}
img{max-width:100%;border:1px solid #ddd}ul.tight{margin:0;padding-left:1.1em}
#claims td{max-width:32em}#claims td.verdict{min-width:11em;max-width:22em}
details{margin:.3em 0 1em}summary{cursor:pointer;color:#345}
"""


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def claim_table_html(rows: list[Row]) -> str:
    """The headline claim table as an HTML ``<table id="claims">`` grouped by kind of evidence (a heading row
    per kind, class ``evidence``); each claim row's class is its verdict."""
    head = "".join(f"<th>{_e(h)}</th>" for h in TABLE_HEADER)
    body = []
    for kind, group in by_evidence(rows):
        body.append(
            f'<tr class="evidence" id="evidence-{kind}"><th colspan="{len(TABLE_HEADER)}">'
            f"{_e(group_title(kind, group))}</th></tr>"
        )
        for row in group:
            claim, arms, difference, verdict = table_cells(row)
            cells = f'<td><a href="#detail-{_e(row.claim.id)}">{_e(claim)}</a></td>'
            cells += "".join("<td>" + "<br>".join(map(_e, lines)) + "</td>" for lines in (arms, difference))
            cells += f'<td class="verdict">{_e(verdict)}</td>'
            body.append(f'<tr id="{_e(row.claim.id)}" class="{row.verdict.replace(" ", "-")}">{cells}</tr>')
    return f'<table id="claims"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'


def _html_value(value: str | Link) -> str:
    return f'<a href="{_e(value.url)}">{_e(value.text)}</a>' if isinstance(value, Link) else _e(value)


def _html_items(items) -> str:
    out = []
    for key, value in items:
        if isinstance(value, list):
            inner = "".join(f"<li>{_html_value(v)}</li>" for v in value)
            out.append(f"<li><b>{_e(key)}</b>:<ul>{inner}</ul></li>")
        else:
            out.append(f"<li><b>{_e(key)}</b>: {_e(value)}</li>")
    return "<ul>" + "".join(out) + "</ul>"


def claim_details_html(row: Row, mlflow_ui_url: str) -> str:
    """One claim's details (``<section class="claim" id="detail-<id>">``): the open list, then confounders and
    provenance folded into a ``<details>`` element."""
    folded = (
        f"<details><summary>{_e(folded_summary(row))}</summary>"
        f"{_html_items(folded_items(row, mlflow_ui_url))}</details>"
    )
    return (
        f'<section class="claim" id="detail-{_e(row.claim.id)}"><h3>{_e(row.claim.id)}</h3>'
        f"{_html_items(detail_items(row))}{folded}</section>"
    )


def _img(path: Path, title: str) -> str:
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return f'<img alt="{_e(title)}" src="data:image/png;base64,{data}">'


def slice_html(task: str, table: SliceTable | str) -> str:
    """One task's slice tables as HTML, or the reason they were not computed."""
    return grids_html(task, table if isinstance(table, str) else slice_grids(table))


def grids_html(name: str, grids: list[Grid] | str) -> str:
    """Titled tables as HTML (class ``slices``), or ``name`` with the reason there are none."""
    if isinstance(grids, str):
        return f"<h3>{_e(name)}</h3><p><i>{_e(grids)}</i></p>"
    out = []
    for title, header, body in grids:
        head = "".join(f"<th>{_e(h)}</th>" for h in header)
        rows = "".join("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in row) + "</tr>" for row in body)
        out.append(
            f'<h3>{_e(title)}</h3><table class="slices"><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>'
        )
    return "".join(out)


def html_page(
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
    """The full ``claims.html``, self-contained, as ``markdown``; ``figures``: title -> absolute PNG path or why not."""

    def figure(title: str, fig: Path | str) -> list[str]:
        return [f"<h3>{_e(title)}</h3>", _img(fig, title) if isinstance(fig, Path) else f"<p><i>{_e(fig)}</i></p>"]

    parts = [
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">',
        "<title>clozeline claim table</title>",
        f"<style>{CSS}</style></head><body>",
        "<h1>clozeline claim table</h1>",
        *(f'<p class="warning"><b>Warning.</b> {_e(w)}</p>' for w in warnings),
        f"<p><b>Question.</b> {_e(question)}</p>",
        f'<p id="answer"><b>Answer.</b> {_e(answer(rows))}</p>',
        f'<p id="integrity"><b>Integrity.</b> {_e(integrity_line(rows))}</p>',
        f"<p><b>Verdicts.</b> {_e(verdict_summary(rows))}</p>",
        '<ul id="by-evidence">' + "".join(f"<li>{_e(group_title(k, g))}</li>" for k, g in by_evidence(rows)) + "</ul>",
        claim_table_html(rows),
    ]
    parts += [f'<h2 id="since">{SINCE}</h2>', grids_html(SINCE, tables[SINCE])] if SINCE in tables else []
    if FOREST in figures:
        parts += figure(FOREST, figures[FOREST])
    parts += [f"<p>{_e(STATS_NOTE.format(level=level, alpha=1 - level))}</p>", "<h2>Claims in detail</h2>"]
    for row in (r for _, group in by_evidence(rows) for r in group):  # the table's order
        parts.append(claim_details_html(row, mlflow_ui_url))
    parts += ["<h2>Slices</h2>"] + [slice_html(task, table) for task, table in slices.items()]
    for name, grids in ((n, g) for n, g in tables.items() if n != SINCE):
        parts += [f'<h2 id="{_e(name.split(":")[0].lower())}">{_e(name)}</h2>', grids_html(name, grids)]
    parts.append("<h2>Figures</h2>")
    for title, fig in figures.items():
        parts += figure(title, fig) if title != FOREST else []
    parts += ["<h2>Experiment ledger</h2>", _html_items(ledger_items(ledger)), "</body></html>"]
    return "\n".join(parts) + "\n"
