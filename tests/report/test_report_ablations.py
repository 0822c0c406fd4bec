"""The masking-ablation claims of reports/claims.yaml (issue 57 item 7): each pretraining ablation arm's run
(``<variant>@ablation_<name>/...``) against the main recipe's; ``not computed`` when the arms are off (the cpu
default), and never among the primary claims the answer line counts."""

from __future__ import annotations

import json

from report_fixtures import DEFAULT_CLAIMS
from tasks import report
from tasks.report.claims.switches import claim_off
from tasks.report.render.answer import answer
from tasks.tracking import NullLog
from test_report import TREAT, _rows_by_id, _run, write_metrics

CLAIMS = {
    "all-mask-no-worse-than-80-10-10-cls": ("all-mask", "cls"),
    "all-mask-no-worse-than-80-10-10-ner": ("all-mask", "ner"),
    "mask-rate-15-no-worse-than-main-rate-cls": ("mlm-15", "cls"),
    "mask-rate-15-no-worse-than-main-rate-ner": ("mlm-15", "ner"),
}


def add_arms(folder, gaps=(1.5, 1.4)) -> None:
    """The cls runs of two arms (all-mask 0.01 above the main recipe's, mlm-15 0.11 below) and their pretraining."""
    path = folder / "finetune" / "cls.json"
    cls = json.loads(path.read_text())
    keys = {name: f"pretrained@ablation_{name}/full/mean-pool" for name in ("all-mask", "mlm-15")}
    cls["runs"][keys["all-mask"]] = _run({"test_macro_f1": [v + 0.01 for v in TREAT]}, "run-am")
    cls["runs"][keys["mlm-15"]] = _run({"test_macro_f1": [v - 0.11 for v in TREAT]}, "run-15")
    cls["ablations"] = {"config": "pretrained/full/mean-pool", "runs": keys}
    path.write_text(json.dumps(cls))
    pretrain = json.loads((folder / "pretrain.json").read_text())
    pretrain["ablations"] = {name: {"heldout_gap_to_unigram_nats": gap} for name, gap in zip(keys, gaps)}
    (folder / "pretrain.json").write_text(json.dumps(pretrain))


def test_the_claims_compare_each_arm_with_the_main_recipe_and_are_findings():
    claims = {c.id: c for c in DEFAULT_CLAIMS.claims}
    for cid, (arm, task) in CLAIMS.items():
        claim = claims[cid]
        assert claim.family == "findings" and claim.kind == "difference" and claim.min_effect == -0.02
        head = "full/mean-pool" if task == "cls" else "full/first"
        assert claim.treatment == f"finetune/{task}/pretrained@ablation_{arm}/{head}"
        assert claim.baseline == f"finetune/{task}/pretrained/{head}"  # the main recipe, all pretraining seeds
        assert f"pretrain/ablations.{arm}.heldout_gap_to_unigram_nats" in [p.value for p in claim.preconditions]


def test_without_arms_they_read_off_and_the_answer_ignores_them(workspace):
    cfg, paths = workspace
    write_metrics(paths.metrics)
    rows = _rows_by_id(cfg, paths)  # from the metrics alone (no ablations section), and from the params
    off = {claim.id: claim_off(claim, cfg.setup) for claim in DEFAULT_CLAIMS.claims}
    for cid, (_, task) in CLAIMS.items():
        assert rows[cid].verdict == "not run"
        assert rows[cid].reason == (
            "not run: off (enable with `pretrain.ablations` and `finetune.recipes.<recipe>.ablation_config`)"
        )
        assert off[cid] == f"off (enable with `pretrain.ablations` and `finetune.recipes.{task}.ablation_config`)"
    line = answer(list(rows.values()))
    assert not any(cid in line for cid in CLAIMS) and "of the 7 primary claims (Holm within the family, m = 7)" in line


def test_with_arms_they_have_verdicts_and_render(workspace):
    cfg, paths = workspace
    write_metrics(paths.metrics)
    add_arms(paths.metrics, gaps=(1.5, 0.4))
    rows = _rows_by_id(cfg, paths)
    all_mask, rate = rows["all-mask-no-worse-than-80-10-10-cls"], rows["mask-rate-15-no-worse-than-main-rate-cls"]
    assert all_mask.verdict == "supported" and round(all_mask.difference.mean, 4) == 0.01
    assert any("one pretraining seed" in note for note in all_mask.notes)
    assert rate.verdict == "not resolvable" and "the ablation arm's encoder beats the unigram" in rate.reason
    assert rows["all-mask-no-worse-than-80-10-10-ner"].reason.startswith("not run: off (enable with")
    add_arms(paths.metrics)  # the mlm-15 arm's MLM trained: its 0.11 loss is beyond the margin
    assert _rows_by_id(cfg, paths)["mask-rate-15-no-worse-than-main-rate-cls"].verdict == "contradicted"
    cls = cfg.setup.recipes["cls"].model_copy(update={"ablation_config": "pretrained/full/mean-pool"})
    recipes = {**cfg.setup.recipes, "cls": cls}
    setup = cfg.setup.model_copy(update={"ablations": ["all-mask", "mlm-15"], "recipes": recipes})
    report.run(cfg.model_copy(update={"setup": setup}), paths, NullLog())  # the params the arms ran with
    md = (paths.reports / "claims.md").read_text(encoding="utf-8")
    for cid in CLAIMS:
        assert f"| [{cid}](#{cid}) | " in md
    row = next(line for line in md.splitlines() if line.startswith("| [all-mask-no-worse-than-80-10-10-cls]"))
    assert "| supported (Holm p" in row and "in the findings family" in row
    ner = md.split('<a id="all-mask-no-worse-than-80-10-10-ner"></a>')[1].split("### ")[0]
    assert "not run: off (enable with `pretrain.ablations` and `finetune.recipes.ner.ablation_config`)" in ner


def test_on_items_the_main_recipe_resamples_its_pretraining_seeds_and_the_arm_notes_its_one(tmp_path, monkeypatch):
    import report_fixtures as items
    from tasks.common.provenance import Lock
    from tasks.report.claims.evaluation import evaluate
    from test_multiseed_report import OURS, add_further_seed

    key = "pretrained@ablation_all-mask/full/mean-pool"
    monkeypatch.setitem(items.ARMS, key, {1: items.preds(1, 2), 2: items.preds(2, 9), 3: items.preds(1, 15)})
    metrics = items.write_workspace(tmp_path)
    add_further_seed(tmp_path)  # the main recipe's run from pretraining seed 21 too
    path = tmp_path / "metrics" / "finetune" / "cls.json"
    section = {"ablations": {"config": OURS, "runs": {"all-mask": key}}}
    path.write_text(json.dumps(json.loads(path.read_text()) | section))
    row = evaluate(items.claim(key, OURS, min_effect=-0.02), metrics, Lock({}), items.STATS)
    assert row.verdict != "not run" and row.items == "20 test items (all) x 3 vs 2 pretraining x 3 fine-tuning seeds"
    assert any(n.startswith("pretraining seeds resampled at the top of the bootstrap (2") for n in row.notes)
    assert any("one pretraining seed" in n for n in row.notes)
