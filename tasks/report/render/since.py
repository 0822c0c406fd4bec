"""What changed since the last run: this run's claims against the previous run's, read back from MLflow.

Each report stores a *claims record* on its pipeline run (the flow's parent MLflow run; the report's own run
when the stage ran outside the flow, e.g. a bare ``dvc repro``): the JSON artifact ``claims/claims.json`` =
``{"format": 1, "claims": {id: {verdict, difference, ci_low, ci_high, n}}, "data": {counter: docs},
"tasks": [names]}`` (a difference without a CI has ``null`` bounds; a ``not run`` claim has only its verdict)
and the tags ``claims_recorded=true`` and ``claims_tasks=<the run's task names, sorted, comma-separated>``.
``history`` reads the latest ``report.history_runs`` records of runs *of the same tasks* back
(``tracking.MlflowLog.tagged_records``), newest first: a study whose tasks were replaced starts a history of its
own, so its report names no removed task; a run without a record (the report stage did not rerun in it) or with
one that is unreadable is skipped. ``compare`` sets this run against the newest record:

- verdicts that flipped (``before -> now``, any change of verdict, ``not run`` included);
- differences outside the earlier CI: this run's point difference lies outside the previous run's CI of the
  same claim (a claim without a difference or an earlier CI is not compared);
- new claims (in this run only) and dropped claims (in the previous run only);
- data: each counter of ``data_sizes`` (docs into and out of ingest and dedup, kept docs per source and split)
  before, now and the change.

The result is the section "Since the last run" (``pages.SINCE``) of ``claims.md``/``claims.html``, the file
``reports/since_last_run.md`` (the Prefect artifact of the pipeline run), the tags ``verdict_flipped=true|false``,
``verdicts_flipped=<ids>`` and ``claims_compared_with=<run id>`` on the pipeline run (the runs table filters on
them), and the trend figure (``since_plot``). These outputs depend on the MLflow history, which DVC does not
see: the same inputs give another section after another run, so dvc.yaml marks them ``cache: false``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import NamedTuple

from tasks.report.claims.grammar import Metrics, NotRun
from tasks.report.claims.row import Row
from tasks.report.render import since_plot
from tasks.report.render.pages import SINCE, Grid, grids_md

RECORD_FILE = "claims/claims.json"  # the artifact, on the pipeline run
RECORD_TAG = "claims_recorded"  # =true on a run that holds a record: what the next report searches for
TASKS_TAG = "claims_tasks"  # the run's task names: a report compares only with runs of the same tasks
RECORD_FORMAT = 1
SECTION_FILE = "since_last_run.md"  # under the reports folder


@dataclass(frozen=True)
class PastRun:
    """An earlier run's claims record: its MLflow run id, start (UTC), ``git_commit`` tag, ``claims``
    (``{id: {verdict, difference, ci_low, ci_high, n}}``) and ``data`` (``{counter: docs}``)."""

    run_id: str
    started: datetime
    git_commit: str
    claims: dict[str, dict]
    data: dict[str, int]


@dataclass(frozen=True)
class Changes:
    """This run against ``previous``: ``flipped`` ``(claim, before, now)`` verdicts, ``moved`` claims whose
    difference left the earlier CI, ``new`` and ``dropped`` claim ids, ``data`` ``(counter, before, now)``
    with ``None`` where a run did not count it."""

    previous: PastRun
    flipped: list[tuple[str, str, str]]
    moved: list[str]
    new: list[str]
    dropped: list[str]
    data: list[tuple[str, int | None, int | None]]


class Since(NamedTuple):
    """What ``section`` computed: the rendered ``grids``, this run's ``record``, the ``changes`` against the
    newest earlier record (None: nothing to compare) and the trend ``figure`` (its path, or ``not drawn:
    <why>``)."""

    grids: list[Grid]
    record: dict
    changes: Changes | None
    figure: Path | str


def section(
    rows: list[Row], metrics: Metrics, log, history_runs: int, reports: Path, dpi: int, tasks: tuple[str, ...]
) -> Since:
    """Compare this run's claims with the latest earlier record of ``log``'s pipeline run's experiment whose
    run had the same ``tasks`` (params.yaml's task names), draw the trend figure into ``<reports>/figures`` and
    write ``<reports>/since_last_run.md``. ``store`` records this run afterwards, once the report is written."""
    current = record(rows, metrics, tasks)
    pipeline_log = log.pipeline()
    past = history(pipeline_log, history_runs, tasks)
    changes = compare(current, past[0]) if past else None
    grids = section_grids(current, past, changes, pipeline_log.run_id)
    log.info(f"report: since the last run: {summary(past, changes)}")
    out = reports / "figures" / since_plot.FILE
    try:
        figure: Path | str = since_plot.draw(past, current, datetime.now(UTC), out, dpi)
    except NotRun as why:
        figure = f"not drawn: {why}"
    shown = Path("figures") / since_plot.FILE if isinstance(figure, Path) else figure
    (reports / SECTION_FILE).write_text(section_markdown(grids, shown), encoding="utf-8")
    return Since(grids, current, changes, figure)


def summary(past: list[PastRun] | None, changes: Changes | None) -> str:
    """The comparison in one line, for the stage's log."""
    if changes is None:
        return "not compared (no MLflow tracking)" if past is None else "first run"
    return (
        f"run {changes.previous.run_id}: {len(changes.flipped)} verdicts flipped "
        f"{[cid for cid, _, _ in changes.flipped]}, {len(changes.moved)} differences outside the earlier CI, "
        f"{len(changes.new)} new and {len(changes.dropped)} dropped claims"
    )


def claim_record(row: Row) -> dict:
    """One claim as recorded: its verdict and, when it has one, the difference's mean, CI bounds (``None``
    when not finite) and n."""
    out: dict = {"verdict": row.verdict}
    if row.difference is not None:
        est = row.difference
        out.update(difference=_finite(est.mean), ci_low=_finite(est.low), ci_high=_finite(est.high), n=est.n)
    return out


def _finite(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None


def data_sizes(metrics: Metrics) -> dict[str, int]:
    """Docs counted by the data stages, ``{counter: docs}``: ``ingest/docs_in``, ``ingest/docs_out``
    (``metrics/ingest.json`` totals), ``dedup/docs_in``, ``dedup/docs_kept`` (``dedup.json`` all) and
    ``split/<source>/<split>`` (``split.json``: the docs kept in each split). A missing file or key leaves its
    counters out."""
    ingest = _dict(_dict(metrics.optional("ingest")).get("totals"))
    dedup = _dict(_dict(metrics.optional("dedup")).get("all"))
    out = {f"ingest/{k}": ingest.get(k) for k in ("docs_in", "docs_out")}
    out |= {f"dedup/{k}": dedup.get(k) for k in ("docs_in", "docs_kept")}
    for source, body in sorted(_dict(_dict(metrics.optional("split")).get("sources")).items()):
        out |= {f"split/{source}/{part}": n for part, n in sorted(_dict(_dict(body).get("docs_kept")).items())}
    return {k: v for k, v in out.items() if isinstance(v, int) and not isinstance(v, bool)}


def _dict(value) -> dict:
    return value if isinstance(value, dict) else {}  # a metrics file of another shape counts nothing


def record(rows: list[Row], metrics: Metrics, tasks: tuple[str, ...]) -> dict:
    """This run's claims record (the module docstring gives its shape; ``tasks`` sorted)."""
    return {
        "format": RECORD_FORMAT,
        "claims": {row.claim.id: claim_record(row) for row in rows},
        "data": data_sizes(metrics),
        "tasks": sorted(tasks),
    }


def tasks_tag(tasks) -> str:
    """The ``claims_tasks`` tag value: the task names, sorted, comma-separated (names are ``[A-Za-z0-9_-]``)."""
    return ",".join(sorted(tasks))


def history(log, limit: int, tasks: tuple[str, ...]) -> list[PastRun] | None:
    """The ``limit`` latest earlier records of runs of the same ``tasks``, newest first, from ``log`` (a
    pipeline run's RunLog): None without tracking; a record whose ``claims`` is not ``{id: {verdict: str, ...}}``
    is skipped."""
    found = log.tagged_records({RECORD_TAG: "true", TASKS_TAG: tasks_tag(tasks)}, RECORD_FILE, limit)
    if found is None:
        return None
    out = []
    for entry in found:
        body = entry["record"] if isinstance(entry["record"], dict) else {}
        claims, data = body.get("claims"), body.get("data")
        if not isinstance(claims, dict) or not all(
            isinstance(c, dict) and isinstance(c.get("verdict"), str) for c in claims.values()
        ):
            continue
        started = datetime.fromtimestamp(entry["start_ms"] / 1000, UTC)
        data = {k: v for k, v in data.items() if isinstance(v, int)} if isinstance(data, dict) else {}
        out.append(PastRun(entry["run_id"], started, entry["git_commit"], claims, data))
    return out


def outside(before: dict, now: dict) -> bool:
    """Whether ``now``'s difference lies outside ``before``'s CI (False when either is missing)."""
    low, high, value = before.get("ci_low"), before.get("ci_high"), now.get("difference")
    return None not in (low, high, value) and not low <= value <= high


def compare(current: dict, previous: PastRun) -> Changes:
    """This run's record against ``previous`` (claims in this run's order, counters sorted)."""
    now, before = current["claims"], previous.claims
    both = [cid for cid in now if cid in before]
    flipped = [
        (cid, before[cid]["verdict"], now[cid]["verdict"])
        for cid in both
        if before[cid]["verdict"] != now[cid]["verdict"]
    ]
    counters = sorted(set(current["data"]) | set(previous.data))
    return Changes(
        previous,
        flipped,
        [cid for cid in both if outside(before[cid], now[cid])],
        [cid for cid in now if cid not in before],
        [cid for cid in before if cid not in now],
        [(k, previous.data.get(k), current["data"].get(k)) for k in counters],
    )


def fmt_difference(claim: dict) -> str:
    """``0.0500 [0.0100, 0.0900]``, ``0.0500 (no CI)``, or ``-`` without a difference."""
    if claim.get("difference") is None:
        return "-"
    low, high = claim.get("ci_low"), claim.get("ci_high")
    ci = f"[{low:.4f}, {high:.4f}]" if low is not None and high is not None else "(no CI)"
    return f"{claim['difference']:.4f} {ci}"


def _change(before: int | None, now: int | None) -> str:
    return f"{now - before:+d}" if before is not None and now is not None else "-"


def section_grids(current: dict, past: list[PastRun] | None, changes: Changes | None, run_id: str | None) -> list[Grid]:
    """The section's tables: what was compared (or why nothing was), then each non-empty list of changes."""
    this = run_id or "not tracked"
    if past is None:
        return [
            (
                "Compared with",
                ["this run", "previous run"],
                [[this, "not compared: the report ran without MLflow tracking, so it has no run history"]],
            )
        ]
    if changes is None:
        return [
            (
                "Compared with",
                ["this run", "previous run"],
                [[this, "none: first run (no earlier run of this MLflow experiment recorded its claims)"]],
            )
        ]
    prev = changes.previous
    head = [
        "this run",
        "previous run",
        "started (UTC)",
        "git commit",
        "verdicts flipped",
        "differences outside the earlier CI",
        "new claims",
        "dropped claims",
    ]
    grids: list[Grid] = [
        (
            "Compared with",
            head,
            [
                [
                    this,
                    prev.run_id,
                    prev.started.strftime("%Y-%m-%d %H:%M:%S"),
                    prev.git_commit[:12] or "-",
                    str(len(changes.flipped)),
                    str(len(changes.moved)),
                    str(len(changes.new)),
                    str(len(changes.dropped)),
                ]
            ],
        )
    ]
    now, before = current["claims"], prev.claims
    tables: list[Grid] = [
        ("Verdicts that flipped", ["claim", "before", "now"], [list(flip) for flip in changes.flipped]),
        (
            "Differences outside the earlier CI",
            ["claim", "before [CI]", "now [CI]"],
            [[cid, fmt_difference(before[cid]), fmt_difference(now[cid])] for cid in changes.moved],
        ),
        (
            "New claims",
            ["claim", "verdict", "difference [CI]"],
            [[cid, now[cid]["verdict"], fmt_difference(now[cid])] for cid in changes.new],
        ),
        (
            "Dropped claims",
            ["claim", "last verdict", "difference [CI]"],
            [[cid, before[cid]["verdict"], fmt_difference(before[cid])] for cid in changes.dropped],
        ),
        (
            "Data: docs per stage counter",
            ["counter", "before", "now", "added"],
            [
                [k, "-" if b is None else str(b), "-" if n is None else str(n), _change(b, n)]
                for k, b, n in changes.data
            ],
        ),
    ]
    return grids + [table for table in tables if table[2]]


def section_markdown(grids: list[Grid], figure: Path | str) -> str:
    """``since_last_run.md``: the section's title, its tables and where the trend figure is (or why not)."""
    where = f"`{figure}` (also in claims.html)" if isinstance(figure, Path) else f"_{figure}_"
    return "\n".join([f"## {SINCE}", "", *grids_md(SINCE, grids), f"Trend of every claim: {where}", ""])


def tags(changes: Changes | None) -> dict[str, str]:
    """The pipeline run's tags: ``verdict_flipped`` (``true``/``false``), ``verdicts_flipped`` (the claim ids,
    comma-separated, empty when none) and ``claims_compared_with`` (the previous run's id, or ``none``)."""
    flipped = [cid for cid, _, _ in changes.flipped] if changes else []
    return {
        "verdict_flipped": str(bool(flipped)).lower(),
        "verdicts_flipped": ",".join(flipped),
        "claims_compared_with": changes.previous.run_id if changes else "none",
    }


def store(pipeline_log, since: Since) -> None:
    """Attach this run's record to the pipeline run and tag it (``tags``, ``claims_recorded=true`` and
    ``claims_tasks``), so the next report of the same tasks finds it; ``pipeline_log`` is ``log.pipeline()`` of
    the report's RunLog."""
    pipeline_log.text(json.dumps(since.record, indent=2, sort_keys=True) + "\n", RECORD_FILE)
    pipeline_log.tags(tags(since.changes) | {RECORD_TAG: "true", TASKS_TAG: tasks_tag(since.record["tasks"])})
