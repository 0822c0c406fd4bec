"""Two figures reviewers ask for: expected validation performance against tuning budget per task (Dodge et al.
2019, ``tasks.report.stats.evp``), and the variance breakdown of each claim's difference.

Expected validation performance (``evp_figure``): for every run of a task at the study's train size (a run key
without ``@``: arms and baselines, the reference rows of every train doc included), the expected best dev score
of ``n`` configurations drawn at random from the grid its tuning tried, for ``n = 1`` to the largest grid of
the task, so every arm and baseline is read at equal budgets. The grids, from ``metrics/finetune/<task>.json``
(``tuning_scores``): an arm's learning-rate sweep on ``sweep_seed`` (``runs.<key>.lr_sweep.dev``,
``tasks/finetune/arms/sweep.py``; a frozen probe: one configuration); a baseline's configurations tried on dev
for each seed's draw (the mapping of configuration to dev score under a ``dev_`` key of ``runs.<key>.setting.<seed>``:
TF-IDF's analyzer x C ``dev_macro_f1_grid``, memorisation's lookups and the CRF's c1 x c2 ``dev_entity_f1``; a
baseline without a grid, majority, one configuration: its ``dev_best_<metric>``), whose curves are averaged
over the seeds.

Variance breakdown (``variance_figure``): one stacked bar per difference claim outside the integrity checks
(family without ``integrity``), the shares of its estimate's variance from the pretraining seed, the fine-tuning
seed and the test items, read from exactly the claim's ``variance_shares`` in ``metrics/report.json``
(``tasks.report.stats.components``); a claim without them is labelled ``not available``.
"""

from __future__ import annotations

from collections.abc import Mapping
from numbers import Real
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)
import numpy as np  # noqa: E402

from tasks.report.claims.grammar import Metrics, NotRun, dig  # noqa: E402
from tasks.report.claims.row import Row  # noqa: E402
from tasks.report.render.figures import save_png  # noqa: E402
from tasks.report.stats.evp import expected_max_curve  # noqa: E402

#: Title of ``variance_figure``.
VARIANCE_TITLE = "Variance breakdown of each claim's difference"
#: The levels of ``variance_shares``, bottom to top of a bar, with their colours.
LEVELS = {"pretraining_seed": "tab:purple", "seed": "tab:orange", "item": "tab:blue"}


def evp_title(task: str) -> str:
    """The title of a task's expected validation performance figure."""
    return f"{task}: expected validation performance against tuning budget"


def tuning_scores(metrics: Metrics, task: str) -> dict[str, list[np.ndarray]]:
    """``{run key: [dev scores (N,) of one sweep]}`` of the task's runs at the study's train size (module
    docstring): one sweep for an arm, one per seed for a baseline. Raises ``NotRun`` when the task records no
    runs; a run with no dev score is left out."""
    runs = dig(metrics.get(f"finetune/{task}"), ["runs"], f"metrics/finetune/{task}.json")
    out = {}
    for key, entry in sorted(runs.items()):
        sweeps = arm_sweep(entry) if "lr_sweep" in entry else baseline_sweeps(entry)
        if "@" not in key and sweeps:
            out[key] = sweeps
    return out


def arm_sweep(entry: Mapping) -> list[np.ndarray]:
    """An arm's learning-rate sweep: ``[dev score per multiplier tried]``."""
    return [np.array([float(v) for v in entry["lr_sweep"]["dev"].values()])]


def baseline_sweeps(entry: Mapping) -> list[np.ndarray]:
    """A baseline's configurations per seed: ``[dev score per configuration]`` per seed, from the ``dev_`` mapping
    of its setting, else its one ``dev_best_<metric>`` (empty when neither is recorded)."""
    per_seed = (entry.get("details") or {}).get("per_seed") or {}
    out = []
    for seed, setting in sorted((entry.get("setting") or {}).items()):
        grids = [v for k, v in setting.items() if k.startswith("dev_") and isinstance(v, Mapping) and v]
        if grids and all(isinstance(s, Real) for s in grids[0].values()):
            out.append(np.array([float(s) for s in grids[0].values()]))
            continue
        best = [v for k, v in (per_seed.get(seed) or {}).items() if k.startswith("dev_best_")]
        out += [np.array([float(best[0])])] if best else []
    return out


def validation_curves(scores: Mapping[str, list[np.ndarray]]) -> dict[str, np.ndarray]:
    """``{run key: (budget,)}``: each run's expected best dev score for ``n = 1..budget`` configurations
    (``budget``: the task's largest grid), the mean over its sweeps."""
    budget = max(sweep.size for sweeps in scores.values() for sweep in sweeps)
    return {
        key: np.mean([expected_max_curve(sweep, budget) for sweep in sweeps], axis=0) for key, sweeps in scores.items()
    }


def evp_figure(metrics: Metrics, task: str, out: Path, dpi: int) -> Path:
    """Draw the task's ``validation_curves`` to ``out`` (PNG): arms solid, baselines dashed. Raises ``NotRun``
    when no run records its tuning."""
    scores = tuning_scores(metrics, task)
    if not scores:
        raise NotRun(f"metrics/finetune/{task}.json records no tuning grid (lr_sweep, a baseline's dev_ scores)")
    curves = validation_curves(scores)
    fig, ax = plt.subplots(figsize=(9.5, 4.5))
    for key, curve in curves.items():
        n = np.arange(1, curve.size + 1)
        grid = max(sweep.size for sweep in scores[key])
        style = "--" if key.startswith("baseline/") else "-"
        ax.plot(n, curve, style, marker="o", markersize=3, label=f"{key} ({grid} configs)")
    ax.set(xlabel="configurations drawn from the grid (tuning budget n)", ylabel="expected best dev score")
    ax.set_title(f"{task}: expected best dev score of n configurations\n(Dodge et al. 2019, eq. 1)", fontsize=10)
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside the axes, off the curves
    ax.grid(alpha=0.3)
    return save_png(fig, out, dpi)


def variance_rows(rows: list[Row], entries: Mapping[str, Mapping]) -> list[tuple[str, dict[str, float] | None]]:
    """``[(claim id, shares or None)]`` of the difference claims outside the integrity checks, in table order;
    ``shares`` is ``entries[id]["variance_shares"]`` when it has every level of ``LEVELS``."""
    out: list[tuple[str, dict[str, float] | None]] = []
    for row in rows:
        if row.claim.kind != "difference" or "integrity" in row.claim.family:
            continue
        shares = (entries.get(row.claim.id) or {}).get("variance_shares")
        if isinstance(shares, Mapping) and all(isinstance(shares.get(level), Real) for level in LEVELS):
            out.append((row.claim.id, {level: float(shares[level]) for level in LEVELS}))
        else:
            out.append((row.claim.id, None))
    return out


def variance_figure(rows: list[Row], entries: Mapping[str, Mapping], out: Path, dpi: int) -> Path:
    """Draw ``variance_rows`` to ``out`` (PNG): a horizontal stacked bar of shares per claim, ``not available``
    where a claim has none. ``entries``: claim id -> its ``metrics/report.json`` entry. Raises ``NotRun`` when
    no such claim has shares (nothing to draw)."""
    bars = variance_rows(rows, entries)
    if not any(shares for _, shares in bars):
        raise NotRun("no difference claim outside the integrity checks has variance_shares")
    fig, ax = plt.subplots(figsize=(8, 0.35 * len(bars) + 2.0))
    y = np.arange(len(bars))
    left = np.zeros(len(bars))
    for level, colour in LEVELS.items():
        widths = np.array([shares[level] if shares else 0.0 for _, shares in bars])
        ax.barh(y, widths, left=left, color=colour, label=level.replace("_", " "))
        left += widths
    for index, (_, shares) in enumerate(bars):
        if shares is None:
            ax.text(0.01, index, "not available", va="center", fontsize=7, color="grey")
    ax.set_yticks(y, [claim for claim, _ in bars], fontsize=7)
    ax.invert_yaxis()
    ax.set(xlim=(0, 1), xlabel="share of the variance of the claim's difference")
    ax.set_title("Variance of each difference: pretraining seed, fine-tuning seed, test items", fontsize=10)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncols=3, frameon=False)  # off the bars
    return save_png(fig, out, dpi)
