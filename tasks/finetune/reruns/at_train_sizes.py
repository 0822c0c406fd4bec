"""The learning curve of the finetune stage: the claim arms and the comparator baselines at fewer train docs.

Whether pretraining helps is sharpest when labels are few, so a recipe's ``train_sizes`` (document counts, each
below the train docs the full-size runs keep) reruns its ``curve_configs`` (arms of ``configs``) and its
comparator baselines at each size, with the same seeds, the same dev docs (early stopping, the learning-rate
sweep and the baselines' setting) and the same test docs. The curve's largest point is the full-size runs
themselves (``max_train_docs``), not a rerun.

The train docs of seed ``s`` at size ``n`` are seed ``s``'s draw (``draw.Draw``): the ``n`` docs of smallest
``sha256(f"{data_seed}:{s}:{doc_id}")`` of the whole split, so for one seed the sizes are nested (every doc of a
smaller size is in every larger one, the full size included) and the same for every arm, tokenization and
comparator baseline; each seed draws its own subset. Each curve arm
sweeps ``lr_grid`` on dev at its own size (``sweep.sweep_and_train``): the step count falls with the docs, and
the rate that suits 160 docs need not suit 32. Run keys: an arm ``<variant>@n<docs>/<mode>/<head>``, a
comparator ``baseline/<name>/<input>@n<docs>`` (the ``baseline/`` prefix the report reads baselines by); the
reference rows (``baseline/<name>/all-data``) are not repeated. Curve runs are never ``selection.best_arm``
(the exported model) nor ``selection.best_baseline``; ``summary`` chooses a best arm and baseline per size.
"""

from __future__ import annotations

from dataclasses import dataclass

from tasks.config.model.finetune import FinetuneParams, RunSpec, TaskParams
from tasks.finetune.baselines.fitting import Row


@dataclass(frozen=True)
class Point:
    """One arm at one training size: ``size`` (train docs), the arm's ``spec`` and its run ``key``."""

    size: int
    spec: RunSpec
    key: str


def sizes(tcfg: TaskParams, kept: int, item: str) -> list[int]:
    """The curve's train sizes in docs, ascending: ``train_sizes`` then ``kept`` (the full-size runs).

    Raises ``ValueError`` naming the key when a size is not below ``kept``, the train docs the arms keep.
    """
    above = [n for n in tcfg.train_sizes if n >= kept]
    if above:
        raise ValueError(
            f"finetune: train_sizes {above} of task {item} must be below the {kept} train docs the "
            "full-size runs keep (max_train_docs, or the split's docs when it is null)"
        )
    return sorted(tcfg.train_sizes) + [kept]


def size_key(size: int) -> str:
    """``n<docs>``: a size's key in ``learning_curve`` and in the report's ``best-arm@n<docs>``."""
    return f"n{size}"


def arm_key(spec: RunSpec, size: int) -> str:
    """``<variant>@n<docs>/<mode>/<head>``: the run key of arm ``spec`` on ``size`` train docs."""
    return f"{spec.variant}@{size_key(size)}/{spec.mode}/{spec.head}"


def points(tcfg: TaskParams, kept: int, item: str) -> list[Point]:
    """The curve runs to train: every ``curve_configs`` arm at every size of ``train_sizes`` (ascending).
    Raises ``ValueError`` as ``sizes`` does, before anything trains."""
    return [Point(n, spec, arm_key(spec, n)) for n in sizes(tcfg, kept, item)[:-1] for spec in tcfg.curve_configs]


def baseline_rows(planned: list[Row], tcfg: TaskParams) -> list[tuple[int, Row]]:
    """``(size, row)`` of every comparator of ``planned`` (``fitting.plan``) at every size of
    ``train_sizes``, keyed ``<comparator key>@n<docs>``; reference rows are not repeated."""
    return [
        (n, Row(row.name, f"{row.key}@{size_key(n)}", False, row.tok))
        for n in sorted(tcfg.train_sizes)
        for row in planned
        if not row.reference
    ]


def untimed(cfg: FinetuneParams) -> FinetuneParams:
    """``cfg`` with ``operational.enabled`` false: a curve baseline is scored, not timed (the full-size one is)."""
    return cfg.model_copy(update={"operational": cfg.operational.model_copy(update={"enabled": False})})


def summary(
    tcfg: TaskParams,
    kept: int,
    runs: dict,
    arm_toks: dict[str, str],
    comparators: dict[str, str | None],
    select,
    item: str,
) -> dict:
    """The ``learning_curve`` section of ``metrics/finetune/<task>.json``.

    ``kept``: the full-size train docs; ``runs``: the stage's run entries (curve runs included); ``arm_toks``:
    variant -> tokenization; ``comparators``: full-size comparator key -> the tokenization whose cut it reads
    (None: none); ``select``: ``select_best``. Per size (``n<docs>``): ``runs`` (arm -> run key),
    ``baselines`` (comparator -> run key) and ``selection`` (``select_best`` among that size's arms and
    comparators: the best arm on dev, the best comparator reading its input, every dev score).
    """
    out = {
        "sizes": sizes(tcfg, kept, item),
        "configs": [spec.key for spec in tcfg.curve_configs],
        "lr": "each arm sweeps lr_grid on dev at its own size",
        "runs": {},
        "baselines": {},
        "selection": {},
    }
    for n in out["sizes"]:
        at = size_key(n)
        full = n == kept  # the full-size runs are the curve's largest point
        arms = {spec.key: spec.key if full else arm_key(spec, n) for spec in tcfg.curve_configs}
        bases = {key: key if full else f"{key}@{at}" for key in comparators}
        out["runs"][at], out["baselines"][at] = arms, bases
        chosen = select(
            runs,
            {arms[s.key]: arm_toks[s.variant] for s in tcfg.curve_configs},
            {bases[k]: tok for k, tok in comparators.items()},
        )
        out["selection"][at] = {k: chosen[k] for k in ("best_arm", "best_baseline", "dev", "metric") if k in chosen}
    return out
