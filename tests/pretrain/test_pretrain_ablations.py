"""The masking-strategy ablation of pretraining (``pretrain.ablations``, issue 57): the arms' params, and the
pretrain stage training an arm after the main recipe, from the first seed, into
``models/pretrained/ablations/<name>/``."""

from pathlib import Path

import pytest
import torch
from pydantic import ValidationError
from safetensors.torch import load_file

from pretrain_fixtures import ROOT, build_corpus, clone, make_cfg
from tasks.common.models.encoders import ablation_dirs, pretrained_dir, pretraining_record
from tasks.config import ParamsError, load_params
from tasks.pretrain import run
from tasks.tracking import NullLog

pytestmark = pytest.mark.usefixtures("torch_one_thread")
ALL_MASK = {"name": "all-mask", "mask_token_fraction": 1.0, "random_token_fraction": 0.0}


def one_line_error(**overrides) -> str:
    with pytest.raises(ValidationError) as err:
        make_cfg(**overrides)
    [error] = err.value.errors()
    return f"{'.'.join(map(str, error['loc']))}: {error['msg']}"


def test_an_arm_changes_masking_keys_only_and_names_what_is_wrong():
    cfg = make_cfg(ablations=[ALL_MASK, {"name": "mlm-30", "mlm_probability": 0.3}])
    assert [a.name for a in cfg.ablations] == ["all-mask", "mlm-30"]
    arm = cfg.ablation("all-mask")  # the main recipe with the arm's keys, no arms, no snapshots
    assert (arm.mask_token_fraction, arm.random_token_fraction, arm.mlm_probability) == (1.0, 0.0, cfg.mlm_probability)
    assert arm.ablations == [] and arm.lr == cfg.lr and arm.max_steps == cfg.max_steps
    assert cfg.ablation("mlm-30").mask_token_fraction == cfg.mask_token_fraction == 0.8
    assert "'lr' cannot be changed by an ablation arm" in one_line_error(ablations=[{"name": "x", "lr": 1e-3}])
    assert "changes nothing" in one_line_error(ablations=[{"name": "x", "mlm_probability": 0.15}])
    assert "changes nothing" in one_line_error(ablations=[{"name": "x"}])
    assert "exceed 1" in one_line_error(ablations=[{"name": "x", "mask_token_fraction": 1.0}])  # + the main 0.1
    assert "ablations names must be unique" in one_line_error(ablations=[ALL_MASK, ALL_MASK])
    assert one_line_error(ablations=[{**ALL_MASK, "name": "All mask"}]).startswith("ablations.0.name:")
    assert one_line_error(ablations=[{"name": "x", "mlm_probability": 1.5}]).startswith("ablations.0.mlm_probability:")


def test_the_finetune_side_needs_an_entry_of_our_encoder_and_the_arms():
    with pytest.raises(ParamsError, match="finetune.recipes.cls.ablation_config needs pretrain.ablations"):
        load_params(ROOT / "params.yaml", {"finetune.recipes.cls.ablation_config": "pretrained/full/mean-pool"})
    with pytest.raises(ParamsError, match="ablation_config 'random/full/mean-pool' must be a pretrained"):
        load_params(
            ROOT / "params.yaml",
            {"finetune.recipes.cls.ablation_config": "random/full/mean-pool", "pretrain.ablations": [ALL_MASK]},
        )
    params = load_params(
        ROOT / "params.yaml",
        {"finetune.recipes.cls.ablation_config": "pretrained/full/mean-pool", "pretrain.ablations": [ALL_MASK]},
    )
    assert params.finetune.recipes["cls"].ablation_config == "pretrained/full/mean-pool"
    assert params.pretrain.ablations[0].changes() == {"mask_token_fraction": 1.0, "random_token_fraction": 0.0}


def test_the_cpu_default_has_no_arms_and_the_gpu_profile_the_two_of_issue_57():
    from flows.profiles import overrides

    assert load_params(ROOT / "params.yaml").pretrain.ablations == []
    gpu = load_params(ROOT / "params.yaml", overrides("gpu"))
    assert {a.name: a.changes() for a in gpu.pretrain.ablations} == {
        "all-mask": {"mask_token_fraction": 1.0, "random_token_fraction": 0.0},
        "mlm-15": {"mlm_probability": 0.15},
    }
    assert gpu.pretrain.mlm_probability == 0.3 and gpu.pretrain.seeds == [13, 21, 42]
    assert {t: r.ablation_config for t, r in gpu.finetune.recipes.items()} == {
        "cls": "pretrained/full/mean-pool",
        "ner": "pretrained/full/first",
    }
    assert load_params(ROOT / "params.yaml", overrides("gpu-large")).pretrain.ablations == []  # 1.9 h an arm there


def test_an_arm_trains_after_the_main_recipe_into_its_own_folder(tmp_path_factory):
    corpus = build_corpus(tmp_path_factory)
    with_arm, alone = clone(corpus, tmp_path_factory.mktemp("arm")), clone(corpus, tmp_path_factory.mktemp("alone"))
    stale = pretrained_dir(with_arm.models) / "ablations" / "removed"
    stale.mkdir(parents=True)
    (stale / "config.json").write_text("{}")
    metrics = run(make_cfg(max_steps=6, ablations=[ALL_MASK]), with_arm, NullLog())
    single = run(make_cfg(max_steps=6), alone, NullLog())
    main = load_file(pretrained_dir(with_arm.models) / "model.safetensors")
    # the main recipe's model and numbers are those of a run without arms
    without = load_file(pretrained_dir(alone.models) / "model.safetensors")
    assert all(torch.equal(main[k], v) for k, v in without.items())
    assert metrics["heldout_loss"] == single["heldout_loss"] and "ablations" not in single
    [folder] = ablation_dirs(with_arm.models)  # the stale arm is gone
    assert folder == Path(with_arm.models) / "pretrained" / "ablations" / "all-mask"
    arm = load_file(folder / "model.safetensors")
    assert any(not torch.equal(arm[k], main[k]) for k in arm)  # other corruption, same init, order and positions
    assert pretraining_record(folder)["variant"] == "pretrained" and (folder / "tokenizer.json").is_file()
    assert not (folder / "snapshots").exists()
    entry = metrics["ablations"]["all-mask"]
    assert entry["changes"] == {"mask_token_fraction": 1.0, "random_token_fraction": 0.0} and entry["seed"] == 13
    assert entry["steps"] == 6 and entry["heldout_loss"] != metrics["heldout_loss"]
    assert (with_arm.models / "checkpoints" / "pretrain" / "ablations" / "all-mask").is_dir()
