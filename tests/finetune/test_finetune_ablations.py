"""finetune's ``ablation_config``: the config fine-tuned again from each pretraining ablation arm's model
(``models/pretrained/ablations/<name>/``), recorded under ``ablations`` in metrics/finetune/<task>.json."""

from __future__ import annotations

from pathlib import Path

import pytest

from finetune_fixtures import N_DOCS, NestedRecordingLog, save_tiny_bert, tiny_params, write_task_data
from tasks.config import Paths
from tasks.finetune import run
from tasks.finetune.reruns.from_ablations import ablation_key
from tasks.tracking import NullLog


def with_ablation_config(params, config: str | None):
    recipes = {**params.recipes, "cls": params.recipes["cls"].model_copy(update={"ablation_config": config})}
    return params.model_copy(update={"recipes": recipes})


def workspace(root: Path, arms: tuple[str, ...]) -> Paths:
    pretrained = save_tiny_bert(root / "models" / "pretrained", hidden=32, seed=0)
    for i, name in enumerate(arms):  # other weights than the main recipe's model
        save_tiny_bert(pretrained / "ablations" / name, hidden=32, seed=5 + i)
    write_task_data(root / "data", pretrained, "clozeline", N_DOCS)
    return Paths(data=root / "data", models=root / "models", metrics=root / "m", reports=root / "r")


def test_the_config_runs_from_every_arm_with_the_same_seeds(tmp_path):
    paths = workspace(tmp_path, ("all-mask", "mlm-15"))
    params = with_ablation_config(
        tiny_params(["pretrained/full/mean-pool", "random/full/mean-pool"], ["pretrained/full/first"], [3, 4]),
        "pretrained/full/mean-pool",
    )
    log = NestedRecordingLog()
    metrics = run(params, paths, log, "cls")
    main, spec = "pretrained/full/mean-pool", params.recipes["cls"].configs[0]
    keys = {name: ablation_key(spec, name) for name in ("all-mask", "mlm-15")}
    assert keys == {
        "all-mask": "pretrained@ablation_all-mask/full/mean-pool",
        "mlm-15": "pretrained@ablation_mlm-15/full/mean-pool",
    }
    assert metrics["ablations"]["config"] == main and metrics["ablations"]["runs"] == keys
    assert sorted(metrics["runs"]) == sorted([main, "random/full/mean-pool", *keys.values()])
    folders = {c.name: Path(c.logged["model_dir"]) for c in log.children}  # each run loaded its arm's weights
    pretrained = paths.models / "pretrained"
    assert folders[f"cls/{keys['all-mask']}"] == pretrained / "ablations" / "all-mask"
    assert folders[f"cls/{keys['mlm-15']}"] == pretrained / "ablations" / "mlm-15"
    for key in keys.values():
        entry = metrics["runs"][key]
        assert entry["test_macro_f1"]["seeds"] == [3, 4] and "lr_sweep" in entry  # its own sweep, the arm's seeds
        assert (paths.data / "finetune" / "cls" / key / "seed4.test.jsonl").is_file()
    assert metrics["selection"]["best_arm"] in (main, "random/full/mean-pool")  # never an ablation run
    per_seed = metrics["runs"][keys["mlm-15"]]["details"]["per_seed"].values()  # dev scores for the floor gate
    mean = sum(s["dev_best_macro_f1"] for s in per_seed) / 2
    assert metrics["selection"]["dev"][keys["mlm-15"]] == mean


def test_off_runs_nothing_and_on_without_models_names_the_param(tmp_path):
    paths = workspace(tmp_path, ())
    params = tiny_params(["pretrained/full/mean-pool"], ["pretrained/full/first"], [3])
    assert "ablations" not in run(params, paths, NullLog(), "cls")
    with pytest.raises(FileNotFoundError, match="set pretrain.ablations"):
        run(with_ablation_config(params, "pretrained/full/mean-pool"), paths, NullLog(), "cls")


def test_an_ablation_run_enters_selection_for_the_floor_gate_with_its_configs_comparator():
    from tasks.config.model.finetune import RunSpec
    from tasks.finetune.reruns.from_ablations import in_selection

    spec, key = RunSpec.model_validate("pretrained/full/mean-pool"), "pretrained@ablation_all-mask/full/mean-pool"
    selection = {
        "dev": {spec.key: 0.7, "baseline/tfidf-lr/clozeline-cut": 0.6},
        "best_arm": spec.key,
        "comparator_of": {spec.key: "baseline/tfidf-lr/clozeline-cut"},
    }
    runs = {key: {"details": {"per_seed": {"3": {"dev_best_macro_f1": 0.5}, "4": {"dev_best_macro_f1": 0.7}}}}}
    out = in_selection(selection, [(spec, Path("all-mask"), key)], runs, "dev_best_macro_f1")
    assert out["dev"][key] == 0.6 and out["best_arm"] == spec.key
    assert out["comparator_of"][key] == "baseline/tfidf-lr/clozeline-cut" and key not in selection["dev"]
