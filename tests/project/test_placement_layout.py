"""Every place in ``tasks/`` (and ``clozeline/predict.py``) that builds or loads a torch module has a placement
test: ``placement_layout.sites()`` finds them with ``ast``; ``COVERED`` names the tests (in
tests/project/test_placement.py and tests/probe/test_probe_placement.py) that run each one with the device resolved to
``meta``. A new call site fails here, naming its file and line, until a placement test covers it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from placement_layout import sites

pytestmark = pytest.mark.placement

TESTS = Path(__file__).resolve().parents[1]
PLACEMENT_FILES = ("project/test_placement.py", "probe/test_probe_placement.py")

LEAKAGE = [
    "test_leakage_semantic_encoder_embeds_on_the_resolved_device",
    "test_leakage_run_audits_semantically_on_the_resolved_device",
]
RAY_ACTORS = ["test_leakage_semantic_ray_actors_embed_on_the_gpu_they_are_given"]
FINETUNE = ["test_finetune_run_trains_predicts_and_pools_features_on_the_resolved_device"]
OPERATIONAL = ["test_finetune_inference_cost_is_timed_on_the_resolved_device"]
PRETRAIN = ["test_pretrain_run_trains_evaluates_and_fills_masks_on_the_resolved_device"]
RESUME = ["test_pretrain_resumes_a_host_checkpoint_onto_the_resolved_device"]
PROBE = ["test_probe_run_keeps_every_model_and_batch_on_the_resolved_device"]
EXPORT = ["test_export_rescore_pipeline_keeps_its_batches_on_the_models_device"]
CARD = ["test_release_card_usage_runs_on_a_device"]

#: ``<file>::<function>`` of each site -> the placement tests that run it on a device that is not the CPU.
COVERED = {
    "tasks/leakage/semantic/encoder.py::Encoder.__init__": LEAKAGE,
    "tasks/leakage/semantic/audit.py::audit": LEAKAGE,
    "tasks/leakage/semantic/cluster/ray_engine.py::Embedder.__init__": RAY_ACTORS,
    "tasks/leakage/semantic/cluster/ray_engine.py::_encoder": RAY_ACTORS,
    "tasks/leakage/semantic/cluster/ray_engine.py::_encoder_facts": RAY_ACTORS,
    "tasks/common/models/encoders.py::encoder_from_folder": FINETUNE + PROBE,
    "tasks/common/models/encoders.py::_seeded_init": PROBE,  # the random variant (encoder and masked LM)
    "tasks/common/models/encoders.py::load_encoder": FINETUNE + PROBE,
    "tasks/common/models/encoders.py::load_masked_lm": PROBE,
    "tasks/finetune/arms/model.py::build_model": FINETUNE
    + ["test_a_fine_tuning_step_runs_entirely_on_the_models_device"],
    "tasks/finetune/arms/model.py::load_model": OPERATIONAL,
    "tasks/finetune/arms/training.py::train_and_test": FINETUNE,
    "tasks/finetune/arms/training.py::train": FINETUNE,  # the best epoch's state loaded back into the model
    "tasks/finetune/arms/operational.py::measure_saved": OPERATIONAL,
    "tasks/pretrain/init.py::build_model": PRETRAIN
    + ["test_a_pretraining_step_and_an_evaluation_batch_run_entirely_on_the_models_device"],
    "tasks/pretrain/init.py::initial_model": PRETRAIN,
    "tasks/pretrain/__init__.py::_train_seed": PRETRAIN,
    "tasks/pretrain/checkpoint.py::load": RESUME,
    "tasks/pretrain/checkpoint.py::read_state": RESUME,
    "tasks/probe/__init__.py::run": PROBE,
    "tasks/probe/vectors.py::load_variant": PROBE + ["test_sense_probe_batch_stays_on_the_device"],
    "tasks/probe/pairs.py::Scorer.for_variant": PROBE,
    # the export is built on the CPU and re-scored there (clozeline.predict in a fresh process, as a user runs
    # it); its tests put the loaded export on a device, as a user with a GPU does (and as the card says)
    "tasks/export/convert.py::build": EXPORT + CARD,
    "clozeline/predict.py::load": EXPORT,
}


def placement_tests() -> set[str]:
    names = set()
    for name in PLACEMENT_FILES:
        tree = ast.parse((TESTS / name).read_text(encoding="utf-8"))
        names |= {node.name for node in tree.body if isinstance(node, ast.FunctionDef) and node.name.startswith("test")}
    return names


def test_every_module_built_or_loaded_in_tasks_has_a_placement_test():
    found = sites()
    missing = {key: lines for key, lines in found.items() if key not in COVERED}
    assert not missing, (
        "call sites that build or load a torch module without a placement test (run them with "
        "tests/placement_harness.on_meta and list them in COVERED): "
        + "; ".join(f"{key} at {', '.join(lines)}" for key, lines in sorted(missing.items()))
    )
    stale = sorted(set(COVERED) - set(found))
    assert not stale, f"COVERED names sites that no longer build or load a module: {stale}"


def test_each_covering_test_exists():
    named = {test for tests in COVERED.values() for test in tests}
    assert named - placement_tests() == set()


def test_the_scan_finds_a_new_call_site(tmp_path, monkeypatch):
    """Negative control: a stage that loads a model in a new function is reported with its file and line."""
    import placement_layout

    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "newstage.py").write_text(
        "from transformers import AutoModel\n\n\ndef embed(folder):\n    return AutoModel.from_pretrained(folder)\n"
    )
    monkeypatch.setattr(placement_layout, "ROOT", tmp_path)
    monkeypatch.setattr(placement_layout, "SCANNED", ("tasks",))
    assert placement_layout.sites() == {"tasks/newstage.py::embed": ["tasks/newstage.py:5"]}


def test_a_safetensors_header_read_into_numpy_is_not_a_site_but_one_into_torch_is(tmp_path, monkeypatch):
    import placement_layout

    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "check.py").write_text(
        "from safetensors import safe_open\n\n\ndef header(path):\n    return safe_open(path, 'np')\n\n\n"
        "def named(path):\n    return safe_open(path, framework='np')\n\n\n"
        "def weights(path):\n    return safe_open(path, framework='pt')\n"
    )
    monkeypatch.setattr(placement_layout, "ROOT", tmp_path)
    monkeypatch.setattr(placement_layout, "SCANNED", ("tasks",))
    assert placement_layout.sites() == {"tasks/check.py::weights": ["tasks/check.py:13"]}
