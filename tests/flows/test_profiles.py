"""Profiles (profiles/*.yaml, flows/profiles.py) and the token budget of pretraining
(tasks/pretrain/__init__.py planned_steps): each profile validates against params.yaml, the cpu profile is
params.yaml as committed, and a budget never becomes thousands of epochs."""

from __future__ import annotations

import pytest

from flows.profiles import PROFILES, flatten, main, names, overrides, set_params_args
from pretrain_fixtures import make_cfg
from tasks.config import ParamsError, load_params, read_yaml
from tasks.pretrain import planned_steps
from tasks.tracking import NullLog

ROOT = PROFILES.parent


def test_there_is_one_profile_per_machine_shape_and_one_for_scheduled_runs():
    assert names() == ["cpu", "gpu", "gpu-large", "gpu-node", "scheduled"]


def test_the_scheduled_profile_validates_and_keeps_splits_with_the_ledger():
    params = load_params(ROOT / "params.yaml", overrides("scheduled"))
    assert (params.split.assignment, params.split.ledger, params.split.task_sizing) == ("hash", True, "fractions")
    assert params.tokenizer.vocab_from == "train_once"  # tokenize's cache and init_from stay valid night to night


@pytest.mark.parametrize("name", ["cpu", "gpu", "gpu-large", "gpu-node"])
def test_every_profile_validates_against_params_yaml(name):
    params = load_params(ROOT / "params.yaml", overrides(name))
    assert params.hardware.device == ("cpu" if name == "cpu" else "cuda")


def test_the_cpu_profile_is_params_yaml_and_undoes_every_gpu_key():
    committed = flatten(read_yaml(ROOT / "params.yaml"))
    cpu = overrides("cpu")
    gpu_keys = set(overrides("gpu")) | set(overrides("gpu-large")) | set(overrides("gpu-node"))
    assert gpu_keys <= set(cpu), f"keys a GPU profile sets that cpu does not put back: {gpu_keys - set(cpu)}"
    differ = {k: (v, committed.get(k)) for k, v in cpu.items() if committed.get(k) != v}
    assert differ == {"hardware.device": ("cpu", "auto")}


def test_gpu_node_extends_gpu_large_with_a_process_per_gpu_and_the_lr_of_its_global_batch():
    # gpu-large's lr at its reference batch, rescaled at run time (lr_scaling: sqrt) to the global batch of the GPUs
    # found; an eval interval for 1 to 8 GPUs (tests/flows/test_profiles_sizing.py checks the rule)
    assert overrides("gpu-node") == overrides("gpu-large") | {
        "pretrain.nproc_per_node": "gpu",
        "pretrain.grad_accum_steps": 1,
        "pretrain.eval_every_steps": 500,
    }
    large = overrides("gpu-large")
    assert (large["pretrain.lr_scaling"], large["pretrain.lr_reference_tokens_per_step"]) == ("sqrt", 131_072)


def test_set_params_args_are_dvc_exp_run_arguments():
    args = set_params_args("gpu")
    assert args[0] == "-S" and 'pretrain.size="tiny3"' in args and "pretrain.max_steps=null" in args


def test_an_unknown_profile_or_a_bad_value_is_one_line(tmp_path, capsys):
    assert main(["nope"]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    (tmp_path / "params.yaml").write_text(
        (ROOT / "params.yaml").read_text().replace("tokenizer:\n", "tokenizer:\n  bogus: 1\n")
    )
    with pytest.raises(ParamsError, match="tokenizer.bogus"):
        set_params_args("gpu", tmp_path / "params.yaml")


def test_a_gpu_profile_without_a_gpu_stops_with_one_line(capsys, tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    assert main(["--run", "--dvc", str(tmp_path / "never-started"), "gpu"]) == 2  # print mode checks no GPU
    err = capsys.readouterr().err
    assert err.startswith("clozeline: profile gpu asks for hardware.device: cuda, but ") and err.count("\n") == 1


def test_a_token_budget_becomes_steps_and_is_capped_by_epochs():
    # 3,000 blocks of 512 tokens, 64 blocks a step on 1 GPU: 46 steps an epoch (the ragged 56 blocks dropped)
    cfg = make_cfg(max_steps=None, train_tokens=2_000_000_000, max_epochs=10.0, batch_size_blocks=64)
    assert planned_steps(cfg, (3000, 512), 1, NullLog()) == 460  # 10 epochs, not 2e9 / 32,768 = 61,036 steps
    # on 8 GPUs a step takes 512 blocks: 5 steps an epoch, 50 steps for 10 epochs
    assert planned_steps(cfg, (3000, 512), 8, NullLog()) == 50
    uncapped = make_cfg(max_steps=None, train_tokens=1_000_000, max_epochs=None, batch_size_blocks=64)
    assert planned_steps(uncapped, (3000, 512), 1, NullLog()) == 31  # ceil(1e6 / 32,768)
    assert planned_steps(make_cfg(max_steps=7), (3000, 512), 1, NullLog()) == 7


def test_exactly_one_of_max_steps_and_train_tokens():
    with pytest.raises(ValueError, match="exactly one of max_steps"):
        make_cfg(max_steps=None, train_tokens=None)
    with pytest.raises(ValueError, match="exactly one of max_steps"):
        make_cfg(max_steps=10, train_tokens=100)
