"""Which arms and tables a run produces, read from the params (``ReportSetup``), so that a claim, figure or
table of a feature that is off says ``off (enable with `<key>`)``, naming the params key that turns it on,
instead of the missing key of a metrics file.

A finetune reference (``finetune/<task>/<run key>``, grammar in ``tasks.report.claims.grammar``) is off when its task
is not in ``tasks``, when its run key is not among its recipe's ``configs`` or ``baselines``, when its variant
is ``adapted`` and ``pretrain.init_from`` is ``scratch``, when it names a learning-curve size or config the
recipe does not run (``train_sizes``, ``curve_configs``), or a pretraining ablation arm that is not trained
(``pretrain.ablations``, ``ablation_config``). The semantic detector's references and ``items:
semantically_clean`` are off with ``leakage.semantic.enabled: false``; a probe reference
(``probe/<variant>/layer|shuffled|pairs/...``) when its variant is not in ``probe.variants`` (the sense probe) or
``probe.pair_variants`` (the minimal pairs).
"""

from __future__ import annotations

import re

from tasks.config.model.report import ReportSetup
from tasks.report.claims.grammar import SELECTED, Claim, NotRun

#: ``<variant>[@n<size>|@ablation_<name>]`` of a run key; ``<train_sizes>`` is the size of a generated claim for a
#: recipe without a learning curve (``tasks.report.claims.standard.task_values``).
VARIANT = re.compile(r"^(?P<variant>[a-z]+)(?:@n(?P<size>\d+|<train_sizes>)|@ablation_(?P<ablation>[A-Za-z0-9_-]+))?$")


class Off(NotRun):
    """A claim's input, a figure or a table of a feature the params turn off; the message (``off``) is shown as
    is, never as ``not run``/``not drawn``/``not computed`` of a missing key."""


def off(*keys: str) -> str:
    """``off (enable with `a` and `b`)``: the reason of a claim, figure or table whose feature is off."""
    return f"off (enable with {' and '.join(f'`{key}`' for key in keys)})"


def claim_off(claim: Claim, setup: ReportSetup) -> str | None:
    """``off (enable with ...)`` when the run's params produce no arm for a reference of ``claim``; else None.
    ``None`` too without tasks in ``setup`` (a report section validated alone: nothing is known)."""
    if not setup.tasks:
        return None
    if claim.items == "semantically_clean" and not setup.semantic:
        return off("leakage.semantic.enabled")
    for ref in (claim.treatment, claim.baseline):
        why = reference_off(ref, setup)
        if why:
            return why
    return None


def reference_off(ref: str, setup: ReportSetup) -> str | None:
    """Why the arm ``ref`` is not produced (``off (...)``), or None. A gap ``<run> - <run>`` checks both runs."""
    stage, *rest = ref.split("/")
    if stage == "leakage" and rest[:1] == ["semantic"] and not setup.semantic:
        return off("leakage.semantic.enabled")
    if stage == "probe" and len(rest) == 3:
        pairs = rest[1] == "pairs"
        if rest[0] not in (setup.pair_variants if pairs else setup.probe_variants):
            return off("probe.pair_variants" if pairs else "probe.variants")
        return None
    if stage != "finetune" or len(rest) < 2:
        return None
    task, key = rest[0], "/".join(rest[1:])
    if task not in setup.tasks:
        return off(f"tasks.{task}")
    first, _, second = key.partition(" - ")
    return run_off(task, first, setup) or (run_off(task, second, setup) if second else None)


def run_off(task: str, key: str, setup: ReportSetup) -> str | None:
    """Why the run ``key`` of ``task`` (``best-arm[@n<k>]``, ``<variant>/<mode>/<head>`` or
    ``baseline/<name>/<input>``, either with ``@n<k>``) is not produced by the params, or None."""
    name = setup.tasks[task].recipe
    recipe, at = setup.recipes[name], f"finetune.recipes.{name}"
    head, *tail = key.split("/")
    selected, _, size = head.partition("@n")
    if selected in SELECTED:
        return size_off(size, recipe, at) if size else None
    if head == "baseline":
        if len(tail) != 2:
            return None  # malformed: the reference grammar says so when the claim is evaluated
        if tail[0] not in recipe.baselines:
            return off(f"{at}.baselines")
        size = tail[1].partition("@n")[2]
        return size_off(size, recipe, at) if size else None
    match = VARIANT.match(head)
    if not match or len(tail) != 2:
        return None  # malformed: the reference grammar says so when the claim is evaluated
    plain = "/".join([match["variant"], *tail])
    if match["variant"] == "adapted" and setup.init_from == "scratch":
        return off("pretrain.init_from", f"{at}.configs")
    if plain not in {spec.key for spec in recipe.configs}:
        return off(f"{at}.configs")
    if match["size"]:
        return size_off(match["size"], recipe, at) or (
            None if plain in {spec.key for spec in recipe.curve_configs} else off(f"{at}.curve_configs")
        )
    if match["ablation"] and (match["ablation"] not in setup.ablations or recipe.ablation_config != plain):
        return off("pretrain.ablations", f"{at}.ablation_config")
    return None


def size_off(size: str, recipe, at: str) -> str | None:
    """Why the learning-curve size ``size`` (digits, or ``<train_sizes>``: none) does not run (``train_sizes``;
    ``max_train_docs`` is the curve's last point when the curve runs), or None."""
    runs = [*recipe.train_sizes, recipe.max_train_docs] if recipe.train_sizes else []
    if size.isdigit() and int(size) in runs:
        return None
    return off(f"{at}.train_sizes")


def figure_off(task: str, figure: str, setup: ReportSetup) -> str | None:
    """Why a task figure (``dose_response``, ``learning_curve``) is off for ``task``, or None."""
    if task not in setup.tasks:
        return None
    name = setup.tasks[task].recipe
    recipe, at = setup.recipes[name], f"finetune.recipes.{name}"
    if figure == "dose_response" and not (recipe.dose_response and setup.dose_snapshots):
        return off(f"{at}.dose_response", "pretrain.dose_snapshot_fractions")
    if figure == "learning_curve" and not recipe.train_sizes:
        return off(f"{at}.train_sizes")
    return None
