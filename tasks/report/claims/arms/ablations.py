"""Claims on the pretraining ablation arms (``pretrain.ablations``, finetune's ``ablation_config``; issue 57):
the runs ``<variant>@ablation_<name>/<mode>/<head>`` of ``metrics/finetune/<task>.json``, listed in its
``ablations`` section. The arms are opt-in (the gpu profile turns them on, the cpu default has none), so a claim
on an arm that did not run is ``not run: off (enable with ...)`` naming the params that turn it on, never a
crash; such a claim is secondary, so the answer line (primary claims) does not count it.
"""

from __future__ import annotations

from tasks.report.claims.grammar import NotRun
from tasks.report.claims.switches import Off, off

#: The marker of a run fine-tuned from a pretraining ablation arm (``tasks/finetune/reruns/from_ablations.py``).
MARK = "@ablation_"


def ablation_notes(task: str, run_key: str, data: dict) -> tuple[str, ...]:
    """The notes of ablation run ``run_key`` in ``data`` (``metrics/finetune/<task>.json``): it rests on one
    pretraining seed. Raises ``Off`` when the arms are off (no ``ablations`` section), ``NotRun`` when this arm
    is not among them."""
    section = data.get("ablations")
    runs = (section.get("runs") or {}) if isinstance(section, dict) else {}
    if run_key not in (data.get("runs") or {}):
        if not runs:
            raise Off(off("pretrain.ablations", "finetune.recipes.<recipe>.ablation_config"))  # as the gpu profile
        raise NotRun(
            f"not computed in this run: {run_key!r} is not among the pretraining ablation runs of {task} "
            f"(have: {sorted(runs.values())})"
        )
    return (
        f"{run_key}: fine-tuned from a pretraining ablation arm trained from one pretraining seed (the first "
        "of pretrain.seeds): the arm's own pretraining-seed variance is not in the CI",
    )
