"""The claims' trend figure: each claim's difference and CI in every recorded run, one small panel per claim.

The runs are the earlier claims records (``since.history``, at most ``report.history_runs``) and this run,
oldest on the left. The x axis is ordinal, one tick per run labelled with its start date (UTC; this run: the
time the report ran), so nightly runs and a burst of runs on one afternoon are equally readable; the dates give
the real spacing. A point's colour is that run's verdict, its bar the CI (none when the run had no CI); the
dotted line is zero. Like the rest of the section, the figure depends on the MLflow history, not only on
DVC's inputs.
"""

from __future__ import annotations

import math
from datetime import datetime
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)
from matplotlib.lines import Line2D  # noqa: E402

from tasks.report.claims.grammar import NotRun  # noqa: E402
from tasks.report.render.figures import PNG_METADATA  # noqa: E402

TITLE = "Claims across runs: difference and CI by run date"
FILE = "claims_trend.png"
COLUMNS = 4  # panels per row
MAX_TICK_LABELS = 8  # more runs than this: every k-th tick is labelled
VERDICT_COLOURS = {
    "supported": "tab:green",
    "equivalent": "tab:blue",
    "ruled out": "tab:brown",
    "inconclusive": "tab:orange",
    "contradicted": "tab:red",
}
OTHER_COLOUR = "0.55"  # not run, not resolvable


def series(runs: list[tuple[datetime, dict]]) -> dict[str, list[tuple[int, dict]]]:
    """``{claim id: [(run index, claim record)]}`` over ``runs`` (``(start, {id: record})``, oldest first) for
    every claim with a difference in at least one run; only the runs where it has one, sorted by claim id."""
    ids = sorted({cid for _, claims in runs for cid, rec in claims.items() if rec.get("difference") is not None})
    return {
        cid: [
            (i, claims[cid]) for i, (_, claims) in enumerate(runs) if claims.get(cid, {}).get("difference") is not None
        ]
        for cid in ids
    }


def draw(past, current: dict, now: datetime, out: Path, dpi: int) -> Path:
    """Draw the figure into ``out`` from ``past`` (``since.PastRun``, newest first) and this run's record
    (``current``, started at ``now``); returns ``out``. Raises ``NotRun`` without an earlier run or when no
    claim has a difference."""
    if not past:
        raise NotRun("no earlier run recorded its claims (first run, or no MLflow tracking)")
    runs = [(p.started, p.claims) for p in reversed(past)] + [(now, current["claims"])]
    panels = series(runs)
    if not panels:
        raise NotRun("no claim has a difference in any run")
    rows = math.ceil(len(panels) / COLUMNS)
    cols = min(COLUMNS, len(panels))
    fig, axes = plt.subplots(rows, cols, figsize=(3.6 * cols, 2.4 * rows), squeeze=False)
    step = math.ceil(len(runs) / MAX_TICK_LABELS)
    labels = [t.strftime("%m-%d %H:%M") if i % step == 0 or i == len(runs) - 1 else "" for i, (t, _) in enumerate(runs)]
    for ax, (cid, points) in zip(axes.flat, panels.items(), strict=False):
        _panel(ax, cid, points)
        ax.set_xticks(range(len(runs)), labels, rotation=60, fontsize=6)
        ax.set_xlim(-0.5, len(runs) - 0.5)
    for ax in list(axes.flat)[len(panels) :]:
        ax.axis("off")
    handles = [Line2D([], [], marker="o", ls="", color=c, label=v) for v, c in VERDICT_COLOURS.items()]
    handles.append(Line2D([], [], marker="o", ls="", color=OTHER_COLOUR, label="not run / not resolvable"))
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize=7, frameon=False)
    fig.suptitle(TITLE, fontsize=10)
    fig.tight_layout(rect=(0, 0.04, 1, 0.97))
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=dpi, format="png", metadata=PNG_METADATA)
    plt.close(fig)
    return out


def _panel(ax, cid: str, points: list[tuple[int, dict]]) -> None:
    """One claim: a grey line through its differences, each point coloured by its verdict with its CI."""
    ax.plot([i for i, _ in points], [rec["difference"] for _, rec in points], color="0.75", lw=0.8, zorder=0)
    for i, rec in points:
        value, low, high = rec["difference"], rec.get("ci_low"), rec.get("ci_high")
        err = [[max(0.0, value - low)], [max(0.0, high - value)]] if low is not None and high is not None else None
        ax.errorbar(
            [i], [value], yerr=err, fmt="o", ms=4, capsize=2, color=VERDICT_COLOURS.get(rec["verdict"], OTHER_COLOUR)
        )
    ax.axhline(0.0, color="0.3", lw=0.6, ls=":")
    ax.set_title(cid, fontsize=7)
    ax.tick_params(axis="y", labelsize=6)
