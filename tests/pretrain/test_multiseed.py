"""Several pretraining seeds (``pretrain.seeds``): the first seed's model stays ``models/pretrained``, each
further one trains the same recipe into ``models/pretrained/seeds/<seed>/`` with its own checkpoints, so a SIGKILL
during a further seed resumes to the uninterrupted weights."""

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForMaskedLM

from pretrain_fixtures import clone, kill_at_first_checkpoint, make_cfg, worker_script
from tasks.common.models.encoders import pretrained_dir, pretraining_record, pretraining_seed_dirs
from tasks.pretrain import checkpoint, run
from tasks.tracking import NullLog

pytestmark = pytest.mark.usefixtures("torch_one_thread")
STEPS = 40


def weights(folder: Path) -> dict[str, torch.Tensor]:
    return load_file(folder / "model.safetensors")


def same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.fixture(scope="module")
def two_seeds(corpus, tmp_path_factory):
    """One uninterrupted run of seeds [13, 21], and one of [13] alone."""
    root = tmp_path_factory.mktemp("multiseed")
    both, alone = clone(corpus, root / "both"), clone(corpus, root / "alone")
    cfg = make_cfg(seeds=[13, 21], max_steps=STEPS, checkpoint_every_steps=5)
    return cfg, both, run(cfg, both, NullLog()), alone, run(make_cfg(seeds=[13], max_steps=STEPS), alone, NullLog())


@pytest.mark.slow
def test_the_first_seed_is_models_pretrained_as_alone_and_a_further_seed_its_own_folder(two_seeds):
    _, both, metrics, alone, single = two_seeds
    # adding a seed leaves the first seed's model, metrics and curve as a one-seed run makes them
    assert same(weights(pretrained_dir(both.models)), weights(pretrained_dir(alone.models)))
    assert metrics["heldout_loss"] == single["heldout_loss"] and metrics["steps"] == STEPS
    assert (both.metrics / "pretrain_curve.tsv").read_bytes() == (alone.metrics / "pretrain_curve.tsv").read_bytes()
    assert pretraining_seed_dirs(alone.models) == [] and list(single["seeds"]) == ["13"]
    [further] = pretraining_seed_dirs(both.models)
    assert further == both.models / "pretrained" / "seeds" / "21"
    assert not same(weights(further), weights(pretrained_dir(both.models)))  # its own init, order and masks
    assert pretraining_record(further)["variant"] == pretraining_record(pretrained_dir(both.models))["variant"]
    assert AutoModelForMaskedLM.from_pretrained(further).config.hidden_size == 32  # a model folder finetune loads
    assert list(metrics["seeds"]) == ["13", "21"]
    assert metrics["seeds"]["13"]["heldout_loss"] == metrics["heldout_loss"]  # the top level is the first seed
    assert (
        metrics["seeds"]["21"]["heldout_loss"] != metrics["heldout_loss"] and metrics["seeds"]["21"]["steps"] == STEPS
    )
    final = load_file(
        checkpoint.latest(both.models / "checkpoints" / "pretrain" / "seeds" / "21") / "model.safetensors"
    )
    saved = weights(further)  # the checkpoint and save_pretrained each keep another name of the tied embeddings
    assert len(final.keys() & saved.keys()) >= len(final) - 1
    assert all(torch.equal(final[k], saved[k]) for k in final.keys() & saved.keys())


@pytest.mark.slow
def test_a_sigkill_during_a_further_seed_resumes_to_the_uninterrupted_weights(corpus, tmp_path, two_seeds):
    cfg, uninterrupted, *_ = two_seeds
    paths = clone(corpus, tmp_path / "killed")
    ckpt = paths.models / "checkpoints" / "pretrain" / "seeds" / "21"
    killed_at = kill_at_first_checkpoint(worker_script(tmp_path, cfg, paths), ckpt, 300)
    assert 5 <= killed_at < STEPS
    resumed = run(cfg, paths, NullLog())
    assert resumed["resumed_from_step"] == STEPS  # the first seed had finished: its last checkpoint is its end
    assert resumed["seeds"]["21"]["resumed_from_step"] == killed_at and resumed["seeds"]["21"]["steps"] == STEPS
    for folder in (Path("pretrained"), Path("pretrained") / "seeds" / "21"):
        assert same(weights(paths.models / folder), weights(uninterrupted.models / folder)), folder


def test_finetune_runs_our_arms_once_per_further_pretraining_seed(tmp_path):
    from finetune_fixtures import N_DOCS, NestedRecordingLog, save_tiny_bert, tiny_params, write_task_data
    from tasks.config import Paths
    from tasks.config.model.finetune import FinetuneParams
    from tasks.finetune import run as finetune

    pretrained = save_tiny_bert(tmp_path / "models" / "pretrained", hidden=32, seed=0)
    further = save_tiny_bert(pretrained / "seeds" / "21", hidden=32, seed=1)  # another pretraining seed's weights
    write_task_data(tmp_path / "data", pretrained, "clozeline", N_DOCS)
    paths = Paths(data=tmp_path / "data", models=tmp_path / "models", metrics=tmp_path / "m", reports=tmp_path / "r")
    raw = tiny_params(["pretrained/full/mean-pool", "random/full/mean-pool"], ["pretrained/full/first"], [3, 4])
    raw = raw.model_dump(mode="json")
    raw["recipes"]["cls"] |= {
        "train_sizes": [4],
        "curve_configs": ["pretrained/full/mean-pool", "random/full/mean-pool"],
    }
    log = NestedRecordingLog()
    metrics = finetune(FinetuneParams.model_validate(raw), paths, log, "cls")
    key, curve = "pretrained@pretrain_seed21/full/mean-pool", "pretrained@pretrain_seed21@n4/full/mean-pool"
    # our pretrained arm runs again from seed 21's model, at full size and at the curve's 4 docs (the few-labels
    # claims read that run); random init does not depend on pretraining
    assert sorted(metrics["runs"]) == sorted(
        [
            "pretrained/full/mean-pool",
            "random/full/mean-pool",
            "pretrained@n4/full/mean-pool",
            "random@n4/full/mean-pool",
            key,
            curve,
        ]
    )
    assert metrics["pretraining_seeds"]["runs"] == {
        "pretrained/full/mean-pool": {"21": key},
        "pretrained@n4/full/mean-pool": {"21": curve},
    }
    folders = {c.name: Path(c.logged["model_dir"]) for c in log.children}
    assert folders[f"cls/{key}"] == folders[f"cls/{curve}"] == further
    assert folders["cls/pretrained/full/mean-pool"] == pretrained
    train = {s.name: s.logged["train_examples"] for c in log.children for s in c.children}
    assert train[f"cls/{curve}/seed3"] == train["cls/pretrained@n4/full/mean-pool/seed3"] == 4  # the curve's draw
    assert train[f"cls/{key}/seed3"] == train["cls/pretrained/full/mean-pool/seed3"] == N_DOCS["train"]
    for rerun in (key, curve):
        assert metrics["runs"][rerun]["test_macro_f1"]["seeds"] == [3, 4]  # the same fine-tuning seeds
        for seed in (3, 4):
            assert (paths.data / "finetune" / "cls" / rerun / f"seed{seed}.test.jsonl").is_file()
        assert rerun not in metrics["selection"]["dev"]  # the first pretraining seed's arms are the candidates
    assert curve not in str(metrics["learning_curve"])  # the curve's selection reads the first seed's runs
    groups = metrics["cost"]["groups"]  # sweep (lr_grid [1.0]: one run) + 2 seeds per arm
    assert groups["pretraining_seeds"]["arms"] == 2 and groups["pretraining_seeds"]["runs"] == 6
    assert groups["learning_curve"]["runs"] == 6 and groups["pretrained"]["runs"] == groups["random"]["runs"] == 3
