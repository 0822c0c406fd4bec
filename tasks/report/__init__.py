"""The ``report`` stage: the claim table.

Reads the hand-written claims (``reports/claims.yaml``), the ``metrics/*.json`` of dedup, leakage, tokenize,
pretrain, finetune and probe, ``metrics/pretrain_curve.tsv`` and ``dvc.lock``; writes ``reports/claims.md``, a
self-contained ``reports/claims.html``, ``reports/figures/*.png`` and, for the places users look first
(``tasks.report.render.summary``), ``metrics/summary.json``, ``reports/plots/*.csv`` and
``reports/summary.md``. Each claim becomes one row, grouped by kind of evidence (intrinsic, extrinsic,
behavioural, operational, data): arms and difference with CIs and the verdict, then measured confounders, MLflow
runs and data md5s in its details; a claim whose inputs are missing becomes a ``not run: <why>`` row. Under the
table, "Since the last run" compares the claims with the previous run's, read back from MLflow
(``tasks.report.render.since``; also written to ``reports/since_last_run.md``, and the pipeline run is tagged
``verdict_flipped``): unlike the rest, it depends on the MLflow history, which DVC does not see.

The stage's entry is ``run`` (here); its parts, one folder each, import downwards only (render -> tables ->
claims -> stats):

- ``claims/``: the claims of the run (standard and ``reports/claims.yaml``), the reference grammar, the arms,
  the gates and the evaluation, one row per claim;
- ``stats/``: the statistics library (bootstrap, tests and verdicts, power, calibration), which knows nothing
  about claims;
- ``tables/``: the tables beside the claim rows (slices, minimal pairs, calibration, cost, exported models,
  leakage recall, the experiment ledger);
- ``render/``: ``claims.md``, ``claims.html``, the figures, the summaries and "Since the last run".
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from tqdm import tqdm

from tasks.common.provenance import Lock
from tasks.config.model.report import ReportParams
from tasks.config.paths import Paths
from tasks.report.claims.evaluation import evaluate_all
from tasks.report.claims.grammar import EVIDENCE, FAMILIES, MALFORMED, Metrics, NotRun, selected_run
from tasks.report.claims.row import Row
from tasks.report.claims.standard import claim_set, gate_claims
from tasks.report.claims.switches import Off, claim_off, figure_off
from tasks.report.claims.tasks_run import finetune_tasks, remove_stale, task_headline, task_module
from tasks.report.render import claims_html, pages, since, since_plot, summary
from tasks.report.render import figures as fig
from tasks.report.render.curve_figure import learning_curve
from tasks.report.render.reviewer_figures import VARIANCE_TITLE, evp_figure, evp_title, variance_figure
from tasks.report.stats.estimates import VERDICTS, StatsConfig
from tasks.report.stats.power import Power, tost_reach
from tasks.report.tables.evidence import evidence_tables, reliability_curves
from tasks.report.tables.ledger import build_ledger
from tasks.report.tables.slices import slice_tables
from tasks.tracking.ui import links_ui_url


def run(cfg: ReportParams, paths: Paths, log: Any) -> dict:
    """Build the claim table and its figures; returns verdict counts and each claim's difference."""
    tasks = tuple(cfg.setup.tasks)
    for stale in remove_stale(paths.metrics, tasks):
        log.info(
            f"report: removed {stale}: task {stale.stem!r} is not in params.yaml tasks (a removed task's "
            "output, not this run's)"
        )
    claims = claim_set(claims_path(paths), cfg.setup)
    off = {claim.id: why for claim in claims.claims if (why := claim_off(claim, cfg.setup))}
    predictions = paths.stage_data("finetune")
    if not predictions.is_dir():  # metrics without the finetune stage's outputs: seed-level statistics only
        log.info(f"report: {predictions} not found; fine-tuning claims get seed-level intervals only")
    metrics = Metrics(paths.metrics, predictions=predictions if predictions.is_dir() else None, tasks=tasks or None)
    lock = Lock.read(cfg.dvc_lock_file)
    rows = evaluate_all(claims, metrics, lock, stats_config(cfg), off)
    link_stage_runs(rows, log.sibling_runs(STAGE_RUNS))
    slices = slice_tables(claims, metrics, stats_config(cfg))
    figures = draw_figures(cfg, paths, metrics, rows, log)
    ledger = build_ledger(claims.question, Path(cfg.dvc_lock_file).resolve().parent, metrics, lock)
    tables = evidence_tables(metrics, stats_config(cfg))
    changed = since.section(rows, metrics, log, cfg.history_runs, paths.reports, cfg.figure_dpi, tasks)
    figures[since_plot.TITLE] = changed.figure
    write_reports(paths, claims.question, rows, figures, ledger, cfg, slices, tables | {pages.SINCE: changed.grids})
    write_summaries(paths, rows, metrics, log)
    for path in report_files(paths):
        log.artifact(path, "report")
    since.store(log.pipeline(), changed)  # last: a report that failed must not become the next run's baseline
    log.info(f"report: {len(rows)} claims, {summarize(rows)}")
    return {
        "verdicts": summarize(rows),
        "integrity_checks": integrity_checks(rows),
        "verdicts_by_evidence": by_evidence(rows),
        "family_wise_alpha": round(1 - cfg.confidence_level, 6),
        "families": {f: [r.claim.id for r in rows if r.claim.family == f] for f in FAMILIES},
        "gate_claims": gate_claims(cfg.setup),
        "claims": {row.claim.id: row_metrics(row) for row in rows},
    }


#: The stages whose claims (``<stage>/...`` references) rest on the stage's one run, not on per-arm runs.
STAGE_RUNS = ("pretrain", "probe", "leakage")


def link_stage_runs(rows: list[Row], runs: dict[str, tuple[str, str, str]]) -> None:
    """Add to each row the MLflow run of every stage its references name (``runs``: the report's sibling runs
    under one pipeline run), so a probe, pretrain or leakage claim links its run as a finetune claim does."""
    for row in rows:
        named = {ref.split("/")[0] for ref in (row.claim.treatment, row.claim.baseline)}
        row.runs = sorted(set(row.runs) | {runs[stage] for stage in named if stage in runs})


def write_summaries(paths: Paths, rows: list[Row], metrics: Metrics, log: Any) -> None:
    """The curated ``metrics/summary.json`` (``dvc exp show``), the plot data under ``<reports>/plots``
    (``dvc plots show``) and ``<reports>/summary.md``, also set as this run's MLflow description."""
    summary.write_summary(paths.metrics / summary.SUMMARY_FILE, summary.summary_metrics(rows, summarize(rows), metrics))
    summary.write_plot_data(paths.reports / "plots", rows, metrics)
    note = summary.summary_md(rows)
    (paths.reports / "summary.md").write_text(note, encoding="utf-8")
    log.note(note)


def claims_path(paths: Paths) -> Path:
    """``<reports>/claims.yaml``, the user's claims: added, overriding or dropping standard ones
    (``tasks.report.claims.standard``)."""
    return paths.reports / "claims.yaml"


def report_files(paths: Paths) -> list[Path]:
    """The generated files that exist: ``claims.md``, ``claims.html``, ``summary.md``, ``since_last_run.md``,
    each figure and each plot data file (sorted)."""
    files = [paths.reports / name for name in ("claims.md", "claims.html", "summary.md", since.SECTION_FILE)]
    files += sorted((paths.reports / "figures").glob("*.png")) + sorted((paths.reports / "plots").glob("*.csv"))
    return [f for f in files if f.exists()]


def stats_config(cfg: ReportParams) -> StatsConfig:
    """The statistics settings of the params section."""
    return StatsConfig(
        cfg.confidence_level,
        cfg.paired_method,
        cfg.bootstrap_resamples,
        cfg.bootstrap_seed,
        cfg.max_diverged_seed_fraction,
        cfg.slice_bootstrap_resamples,
        cfg.calibration_bins,
        cfg.mde_power,
        cfg.floor_margin,
        cfg.floor_baseline,
    )


def summarize(rows: list[Row]) -> dict[str, int]:
    """Number of claims per verdict (every verdict listed, zeros included), the integrity checks left out: they
    are preconditions of the run, not findings (``integrity_checks``)."""
    return count_verdicts([r for r in rows if r.claim.family != "integrity"])


def count_verdicts(rows: list[Row]) -> dict[str, int]:
    """Number of ``rows`` per verdict (every verdict listed, zeros included; ``_`` for spaces)."""
    return {v.replace(" ", "_"): sum(r.verdict == v for r in rows) for v in VERDICTS}


def integrity_checks(rows: list[Row]) -> dict:
    """report.json ``integrity_checks``: ``{passed, of, not_passed: {id: verdict}}`` of the ``integrity`` family."""
    checks = [r for r in rows if r.claim.family == "integrity"]
    failed = {r.claim.id: r.verdict for r in checks if r.verdict != "supported"}
    return {"passed": len(checks) - len(failed), "of": len(checks), "not_passed": failed}


def by_evidence(rows: list[Row]) -> dict[str, dict[str, int]]:
    """``count_verdicts`` per kind of evidence (``grammar.EVIDENCE``; a kind without claims has all zeros), every
    claim counted, the integrity checks too."""
    return {kind: count_verdicts([r for r in rows if r.claim.evidence == kind]) for kind in EVIDENCE}


def row_metrics(row: Row) -> dict:
    """Numeric summary of one row for metrics/report.json (empty difference for a ``not run`` row): the verdict,
    the Holm family, the claim's task and statement (the release stage's model card) and the verdict before
    Holm, p-values, the difference and its CI, and what the design could detect (``power_metrics``)."""
    out: dict = {
        "verdict": row.verdict,
        "family": row.claim.family,
        "task": row.claim.task,
        "statement": " ".join(row.claim.statement.split()),
        "verdict_unadjusted": row.unadjusted or row.verdict,
    }
    out["treatment"] = row.claim.treatment  # the release card lists the claims whose treatment is the shipped arm
    if row.verdict in ("not resolvable", "not run"):
        out["reason"] = row.reason  # and says why one has no verdict
    if row.power is not None:
        out.update(power_metrics(row.power))
    if row.p_adjusted is not None:
        out.update(p_value=row.p_value, p_holm=row.p_adjusted)
    if row.comparison is not None:  # probability of improvement and ASO (claims.arms.seed_scores)
        out.update(row.comparison.metrics())
    if row.baselines_above:  # the release gate and model card give their intervals (claims.arms.statements)
        out["baselines_above"] = row.baselines_above
    if row.difference is not None:
        out.update(difference=row.difference.mean, n=row.difference.n)
        if row.difference.has_ci:
            out.update(difference_ci_low=row.difference.low, difference_ci_high=row.difference.high)
    return out


def power_metrics(p: Power) -> dict:
    """The design of one claim (``tasks.report.stats.power``): ``mde`` (the difference detected against the
    margin with ``mde_power`` at Holm's first-step ``mde_alpha``), ``mde_reach`` (``mde - min_effect``),
    ``gap_detectable`` (the observed ``|difference - min_effect|`` is within reach), and when not, ``n_needed``
    ``n_needed_unit`` and, with variance components, ``decide_with`` (``[{seeds, items}]``) and ``decide_note``;
    with components, ``variance_components`` ``{pretraining_seed, seed, item}`` (metric units squared) and
    ``variance_shares`` (fractions summing to 1); ``tost_note`` where equivalence is unreachable at the SE."""
    out: dict = {"mde": p.mde, "mde_power": p.power, "mde_alpha": p.alpha, "gap_detectable": p.detectable}
    if p.bound is None:
        out["mde_reach"] = p.reach
    if not p.detectable and p.n_needed is not None:
        out.update(n_needed=p.n_needed, n_needed_unit=p.unit)
        designs, note = p.design()
        if note:
            out.update(decide_with=designs, decide_note=note)
    if p.parts is not None:
        out.update(variance_components=p.parts.as_dict(), variance_shares=p.parts.shares())
    if note := tost_reach(p):
        out["tost_note"] = note
    return out


# ---------------------------------------------------------------- figures


def draw_figures(cfg: ReportParams, paths: Paths, metrics: Metrics, rows: list[Row], log: Any) -> dict[str, Path | str]:
    """Draw every figure into ``<reports>/figures``; ``{title: path}``, ``{title: "not drawn: <why>"}`` or
    ``{title: "off (enable with ...)"}`` (a figure of a feature the params turn off)."""
    out = paths.reports / "figures"
    for stale in out.glob("*.png"):
        stale.unlink()  # a figure whose input vanished must not survive from an older run
    dpi = cfg.figure_dpi
    jobs = {
        pages.FOREST: lambda: fig.forest(rows, out / "forest.png", dpi),
        "Pretraining loss curve": lambda: fig.loss_curve(
            paths.metrics / "pretrain_curve.tsv", out / "pretrain_loss.png", dpi
        ),
        "Sense separation by layer": lambda: fig.sense_separation(metrics, out / "sense_separation.png", dpi),
        fig.RECALL_FIGURE: lambda: fig.recall_figure(metrics, out / "leakage_recall.png", dpi),
        VARIANCE_TITLE: lambda: variance_figure(
            rows, {row.claim.id: row_metrics(row) for row in rows}, out / "variance_breakdown.png", dpi
        ),
    }
    drawn: dict[str, Path | str] = {}
    unknown = sorted(set(cfg.figure_runs) - set(finetune_tasks(metrics)))
    if unknown and cfg.setup.tasks:
        log.info(f"report: report.figure_runs names {unknown}, not tasks of params.yaml: ignored")
    for task in finetune_tasks(metrics):
        try:
            jobs |= task_figures(cfg, metrics, task, out)
        except NotRun as why:  # no kind recorded: which figures apply is unknown
            drawn[f"{task}: figures"] = f"not drawn: {why}"
    for title, draw in tqdm(jobs.items(), desc="figures", unit="fig"):
        if isinstance(draw, str):  # a figure of a feature that is off
            drawn[title] = draw
            continue
        try:
            drawn[title] = draw()
        except Off as why:
            drawn[title] = str(why)
        except NotRun as why:
            drawn[title] = f"not drawn: {why}"
        except MALFORMED as err:
            drawn[title] = f"not drawn: malformed input: {type(err).__name__}: {err}"
    return drawn


def task_figures(cfg: ReportParams, metrics: Metrics, task: str, out: Path) -> dict:
    """``{title: draw}`` of one task's figures: per-seed scores, expected validation performance against tuning
    budget (``render.reviewer_figures``), the confusion matrix (classification) or span
    errors (token classification) of ``report.figure_runs[task]`` (default: the best arm on dev), reliability
    diagram, the score against pretraining steps (with ``dose_response``) and against train docs (with
    ``learning_curve``, ``render.curve_figure``; an ``off (enable with ...)`` string when the params turn it
    off, ``tasks.report.claims.switches``). Raises ``NotRun`` when the task's metrics record no kind."""
    dpi, level = cfg.figure_dpi, cfg.confidence_level
    cls = task_module(metrics, task) == "cls"

    def figure_run() -> str:
        return cfg.figure_runs.get(task) or selected_run(task, "best-arm", metrics)

    errors = (
        (f"{task}: confusion matrix", fig.confusion_matrix, f"{task}_confusion.png")
        if cls
        else (f"{task}: span errors", fig.span_errors, f"{task}_span_errors.png")
    )
    return {
        f"{task}: per-seed scores": lambda: fig.seed_points(
            metrics, task, task_headline(metrics, task), level, out / f"seeds_{task}.png", dpi
        ),
        evp_title(task): lambda: evp_figure(metrics, task, out / f"evp_{task}.png", dpi),
        errors[0]: lambda: errors[1](metrics, task, figure_run(), out / errors[2], dpi),
        f"{task}: reliability diagram": lambda: fig.reliability_diagram(
            reliability_curves(task, metrics), out / f"reliability_{task}.png", cfg.calibration_bins, dpi
        ),
        f"{task}: score against pretraining steps": figure_off(task, "dose_response", cfg.setup)
        or (
            lambda: fig.dose_response(metrics, task, task_headline(metrics, task), level, out / f"dose_{task}.png", dpi)
        ),
        f"{task}: score against train docs": figure_off(task, "learning_curve", cfg.setup)
        or (
            lambda: learning_curve(
                metrics, task, task_headline(metrics, task), level, out / f"learning_curve_{task}.png", dpi
            )
        ),
    }


def write_reports(
    paths: Paths,
    question: str,
    rows: list[Row],
    figures: dict[str, Path | str],
    ledger: dict,
    cfg: ReportParams,
    slices: dict,
    tables: dict,
) -> None:
    """Write ``claims.md`` (figures linked relative to it) and ``claims.html`` (figures embedded)."""
    paths.reports.mkdir(parents=True, exist_ok=True)
    relative = {t: Path(os.path.relpath(f, paths.reports)) if isinstance(f, Path) else f for t, f in figures.items()}
    ui = links_ui_url(cfg.mlflow_ui_url)  # a tracking server's own UI, else where `make mlflow-ui` serves
    warned = cfg.setup.warnings  # what the flow prints too: a task source only the leakage audit reads
    md = pages.markdown(question, rows, relative, ledger, cfg.confidence_level, ui, slices, tables, warned)
    (paths.reports / "claims.md").write_text(md, encoding="utf-8")
    page = claims_html.html_page(question, rows, figures, ledger, cfg.confidence_level, ui, slices, tables, warned)
    (paths.reports / "claims.html").write_text(page, encoding="utf-8")
