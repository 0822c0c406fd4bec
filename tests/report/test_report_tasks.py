"""The report is of this run's tasks (issue 59 items 3 and 5): a removed task's metrics files are deleted, its
dvc.lock entries leave the ledger, an arm, figure or table the params turn off reads ``off (enable with
`<key>`)`` naming the key (tasks/report/claims/switches.py), for every kind of reference of the claim grammar, and a
task source only the leakage audit reads is a warning at the top of the claim table (item 2)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tasks import report
from tasks.common.provenance import Lock
from tasks.config import load_params
from tasks.config.paths import Paths
from tasks.report.claims.grammar import Claim, Metrics
from tasks.report.claims.switches import claim_off, figure_off
from tasks.report.claims.tasks_run import finetune_tasks, remove_stale
from tasks.report.tables.ledger import data_snapshot, params_as_run
from tasks.tracking import NullLog

ROOT = Path(__file__).resolve().parents[2]
SETUP = load_params(ROOT / "params.yaml").report.setup  # cls (recipe cls) and ner (recipe ner), the defaults


def test_a_removed_tasks_metrics_files_are_deleted_and_the_rest_kept(tmp_path):
    for stage in ("finetune", "export", "release"):
        (tmp_path / stage).mkdir()
        for name in ("cls", "ner", "mine"):
            (tmp_path / stage / f"{name}.json").write_text("{}")
    (tmp_path / "leakage.json").write_text("{}")
    assert remove_stale(tmp_path, ()) == []  # no tasks known: nothing deleted
    removed = remove_stale(tmp_path, ("mine",))
    assert sorted(p.relative_to(tmp_path).as_posix() for p in removed) == [
        f"{stage}/{name}.json" for stage in ("export", "finetune", "release") for name in ("cls", "ner")
    ]
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*.json")) == [
        "export/mine.json",
        "finetune/mine.json",
        "leakage.json",
        "release/mine.json",
    ]
    assert finetune_tasks(Metrics(tmp_path, tasks=("mine", "later"))) == ["mine", "later"]  # params, not files


def test_the_ledger_leaves_out_the_lock_entries_of_removed_tasks(tmp_path):
    lock = {
        "schema": "2.0",
        "stages": {
            "finetune@cls": {
                "cmd": "x",
                "params": {"params.yaml": {"tasks.cls": {"source": "bbc_news"}}},
                "outs": [{"path": "metrics/finetune/cls.json", "md5": "c1"}],
            },
            "finetune@mine": {
                "cmd": "x",
                "params": {"params.yaml": {"tasks.mine": {"source": "shop"}}},
                "outs": [{"path": "metrics/finetune/mine.json", "md5": "m1"}],
            },
            "split": {
                "cmd": "x",
                "params": {"params.yaml": {"split.seed": 1}},
                "outs": [{"path": "data/split", "md5": "s1"}],
            },
        },
    }
    (tmp_path / "dvc.lock").write_text(yaml.safe_dump(lock))
    read = Lock.read(tmp_path / "dvc.lock")
    assert params_as_run(read, ("mine",)) == {"split.seed": "1", "tasks.mine.source": "shop"}
    assert set(data_snapshot(read, ("mine",))) == {"finetune@mine: metrics/finetune/mine.json", "split: data/split"}
    assert "tasks.cls.source" in params_as_run(read)  # without tasks (a bare report section) nothing is left out


def claim(treatment: str, baseline: str = "finetune/cls/best-baseline", items: str = "all") -> Claim:
    return Claim(
        id="c",
        statement="s",
        evidence="extrinsic",
        kind="difference",
        task="cls",
        data_slice="d",
        metric="test_macro_f1",
        treatment=treatment,
        baseline=baseline,
        ablation="a",
        min_effect=0.0,
        known_confounders=[],
        items=items,
    )


@pytest.mark.parametrize(
    ("treatment", "keys"),
    [
        ("finetune/cls/pretrained/full/mean-pool", None),  # in finetune.recipes.cls.configs
        ("finetune/cls/best-arm@n32", None),  # a learning-curve size (train_sizes [32])
        ("finetune/cls/best-arm@n160", None),  # the curve's last point: max_train_docs
        ("finetune/cls/baseline/tfidf-lr/clozeline-cut@n32", None),
        ("finetune/cls/pretrained@n32/full/mean-pool - random@n32/full/mean-pool", None),
        ("finetune/cls/adapted/full/mean-pool", ["pretrain.init_from", "finetune.recipes.cls.configs"]),
        ("finetune/cls/random/frozen/cls-pool", ["finetune.recipes.cls.configs"]),
        ("finetune/cls/baseline/memorise/words", ["finetune.recipes.cls.baselines"]),
        ("finetune/cls/best-arm@n64", ["finetune.recipes.cls.train_sizes"]),
        ("finetune/cls/reference@n32/full/mean-pool", ["finetune.recipes.cls.curve_configs"]),
        ("finetune/cls/pretrained@n32/full/mean-pool - random@n8/full/mean-pool", ["finetune.recipes.cls.train_sizes"]),
        # a recipe without a curve: the generated few-labels claim's size is <train_sizes> (it read "has no key
        # 'runs.pretrained@n<train_sizes>/full/first'" when the recipe runs pretrained and random)
        (
            "finetune/cls/pretrained@n<train_sizes>/full/mean-pool - random@n<train_sizes>/full/mean-pool",
            ["finetune.recipes.cls.train_sizes"],
        ),
        ("finetune/cls/best-arm@n<train_sizes>", ["finetune.recipes.cls.train_sizes"]),
        ("finetune/cls/baseline/tfidf-lr/clozeline-cut@n<train_sizes>", ["finetune.recipes.cls.train_sizes"]),
        (
            "finetune/ner/pretrained@ablation_all-mask/full/first",
            ["pretrain.ablations", "finetune.recipes.ner.ablation_config"],
        ),
        ("finetune/gone/best-arm", ["tasks.gone"]),
        ("leakage/semantic/review/false_discovery_rate", None),  # leakage.semantic.enabled: true by default
        ("probe/pretrained/layer/last", None),
        ("probe/unigram/pairs/all", None),
        ("probe/adapted/shuffled/last", ["probe.variants"]),
        ("probe/reference/pairs/agreement_attractor", ["probe.pair_variants"]),  # the MiniLM has no MLM head
    ],
)
def test_a_reference_the_params_do_not_produce_names_the_key_that_does(treatment, keys):
    expected = None if keys is None else "off (enable with " + " and ".join(f"`{k}`" for k in keys) + ")"
    assert claim_off(claim(treatment), SETUP) == expected


def test_switches_of_the_semantic_detector_figures_and_a_bare_section():
    no_semantic = SETUP.model_copy(update={"semantic": False})
    off = "off (enable with `leakage.semantic.enabled`)"
    assert claim_off(claim("finetune/cls/best-arm", items="semantically_clean"), no_semantic) == off
    assert claim_off(claim("leakage/semantic/review/false_discovery_rate"), no_semantic) == off
    assert claim_off(claim("finetune/cls/best-arm", items="semantically_clean"), SETUP) is None
    assert figure_off("cls", "dose_response", SETUP) == (
        "off (enable with `finetune.recipes.cls.dose_response` and `pretrain.dose_snapshot_fractions`)"
    )
    assert figure_off("cls", "learning_curve", SETUP) is None
    no_curve = SETUP.model_copy(
        update={"recipes": SETUP.recipes | {"ner": SETUP.recipes["ner"].model_copy(update={"train_sizes": []})}}
    )
    assert figure_off("ner", "learning_curve", no_curve) == "off (enable with `finetune.recipes.ner.train_sizes`)"
    bare = SETUP.model_copy(update={"tasks": {}})  # a report section validated alone knows no params
    assert claim_off(claim("finetune/cls/adapted/full/mean-pool"), bare) is None


def test_a_source_only_the_audit_reads_is_a_warning_at_the_top_of_the_claim_table(tmp_path):
    sources = load_params(ROOT / "params.yaml").model_dump(mode="json")["ingest"]["sources"]
    extra = {"name": "extra_news", "kind": "builtin", "corpus": "bbc_news", "role": "task", "max_docs": None}
    setup = load_params(ROOT / "params.yaml", overrides={"ingest.sources": [*sources, extra]}).report.setup
    assert len(setup.warnings) == 1 and "'extra_news' (role: task) is named by no task" in setup.warnings[0]
    assert SETUP.warnings == []  # the default sources are all read
    paths = Paths(
        data=tmp_path / "data", models=tmp_path / "models", metrics=tmp_path / "metrics", reports=tmp_path / "reports"
    )
    paths.reports.mkdir(parents=True)
    (paths.reports / "claims.yaml").write_text("claims: []\n")
    (tmp_path / "dvc.lock").write_text("schema: '2.0'\nstages: {}\n")
    cfg = load_params(ROOT / "params.yaml").report.model_copy(
        update={"setup": setup, "dvc_lock_file": tmp_path / "dvc.lock", "figure_dpi": 50, "history_runs": 1}
    )
    report.run(cfg, paths, NullLog())
    md = (paths.reports / "claims.md").read_text(encoding="utf-8").splitlines()
    assert md[:3] == ["# clozeline claim table", "", f"> **Warning.** {setup.warnings[0]}"]
    assert f"<b>Warning.</b> {setup.warnings[0]}".replace("'", "&#x27;") in (paths.reports / "claims.html").read_text()
