"""Fine-tuning from the pretraining ablation arms: the masking-strategy ablation of issue 57.

``pretrain.ablations`` trains each arm (the main recipe with some masking keys changed: all-``[MASK]`` instead of
80/10/10, another ``mlm_probability``) from the first pretraining seed into ``models/pretrained/ablations/<name>/``.
A task's ``ablation_config`` (an arm of ``configs`` on our encoder) runs again from each of those models, with the
same fine-tuning seeds, the same per-seed training subsets (``draw``), dev and test docs and its own learning-rate
sweep, as the dose-response runs do. Run key ``<variant>@ablation_<name>/<mode>/<head>``; the ``ablations``
section of ``metrics/finetune/<task>.json`` lists them. The report's claims compare each against the main recipe's
run of the same config (``reports/claims.yaml``). Nothing runs with ``ablation_config: null``.
"""

from __future__ import annotations

from pathlib import Path

from tasks.common.models.encoders import ablation_dirs, pretrained_dir
from tasks.config.model.finetune import RunSpec, TaskParams

#: The marker of an ablation arm's run key: ``<variant>@ablation_<name>/<mode>/<head>``.
MARK = "@ablation_"


def ablation_key(spec: RunSpec, name: str) -> str:
    """``<variant>@ablation_<name>/<mode>/<head>``: config ``spec`` fine-tuned from ablation arm ``name``."""
    return f"{spec.variant}{MARK}{name}/{spec.mode}/{spec.head}"


def arms(tcfg: TaskParams, models: Path, item: str) -> list[tuple[RunSpec, Path, str]]:
    """``(spec, model folder, run key)`` of ``ablation_config`` from every arm's model (``ablation_dirs``), in
    name order; empty with ``ablation_config: null``. Raises ``FileNotFoundError`` naming the param when it is
    set and pretrain saved no arm."""
    if tcfg.ablation_config is None:
        return []
    spec = next(s for s in tcfg.configs if s.key == tcfg.ablation_config)
    folders = ablation_dirs(models)
    if not folders:
        raise FileNotFoundError(
            f"finetune.recipes.*.ablation_config of task {item}: no ablation models in "
            f"{pretrained_dir(models)}/ablations (set pretrain.ablations)"
        )
    return [(spec, folder, ablation_key(spec, folder.name)) for folder in folders]


def summary(points: list[tuple[RunSpec, Path, str]]) -> dict:
    """The ``ablations`` section of ``metrics/finetune/<task>.json``: ``config`` (the main recipe's run, the
    claims' baseline) and ``runs`` ``{"<arm name>": run key}``."""
    return {
        "config": points[0][0].key,
        "runs": {folder.name: key for _, folder, key in points},
        "rule": "ablation_config fine-tuned from each pretrain.ablations model (the first pretraining seed), "
        "with the same seeds, draws, dev and test docs and its own learning-rate sweep",
    }


def in_selection(selection: dict, points: list[tuple[RunSpec, Path, str]], runs: dict, metric: str) -> dict:
    """``selection`` with each ablation run's mean dev ``metric`` (``dev_best_<SELECT_METRIC>``) in ``dev`` and its
    config's comparator in ``comparator_of``, so the report's floor gate reads them as it reads the config's;
    never chosen (``best_arm`` stays among ``configs``)."""
    dev = {
        key: sum(s[metric] for s in runs[key]["details"]["per_seed"].values()) / len(runs[key]["details"]["per_seed"])
        for _, _, key in points
    }
    out = {**selection, "dev": {**selection["dev"], **dev}}
    comparators = selection.get("comparator_of")
    if comparators is not None:
        out["comparator_of"] = {
            **comparators,
            **{key: comparators[spec.key] for spec, _, key in points if spec.key in comparators},
        }
    return out
