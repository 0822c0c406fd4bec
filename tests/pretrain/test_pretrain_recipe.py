"""Pretraining recipe pieces: weight-decay groups, the first and last step's LR, the unigram baseline and the
per-source held-out set, code-aware resume, continued pretraining from the packaged MiniLM, GPU peaks."""

import json
import math
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForMaskedLM, AutoTokenizer

from pretrain_fixtures import ROOT, SEQ_LEN, add_reference_blocks, build_corpus, clone, make_cfg
from tasks.common.models.encoders import model_dir, reference_model_dir, tokenization
from tasks.pretrain import run
from tasks.pretrain.blocks import blocks_dir, load_blocks, stratified_rows
from tasks.pretrain.checkpoint import pretrain_code_files
from tasks.pretrain.hardware import Dist, gpu_peak, peak_flops
from tasks.pretrain.init import initial_model, resolve_start
from tasks.pretrain.mlm import MaskingVocab, unigram_log_probs
from tasks.pretrain.trainer import Trainer
from tasks.tracking import NullLog

pytestmark = pytest.mark.usefixtures("torch_one_thread")
CPU = Dist(0, 1, torch.device("cpu"))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    root = build_corpus(tmp_path_factory)
    add_reference_blocks(root)
    return root


def make_trainer(corpus: Path, cfg, tmp_path: Path) -> Trainer:
    from tasks.pretrain.init import build_model

    tok = AutoTokenizer.from_pretrained(corpus / "models" / "tokenizer")
    train = load_blocks(blocks_dir(corpus / "data", "clozeline", "train"))
    heldout = load_blocks(blocks_dir(corpus / "data", "clozeline", "heldout"), cfg.eval_max_blocks)
    model = build_model(cfg, len(tok), SEQ_LEN, tok.pad_token_id)
    return Trainer(cfg, model, MaskingVocab.from_tokenizer(tok), train, heldout, CPU, NullLog(), tmp_path / "ckpt")


@pytest.mark.parametrize("architecture", ["bert", "roberta-prelayernorm", "modernbert"])
def test_no_weight_decay_on_layernorm_and_bias(corpus, tmp_path, architecture):
    trainer = make_trainer(corpus, make_cfg(weight_decay=0.1, architecture=architecture), tmp_path)
    decay_of = {id(p): g["weight_decay"] for g in trainer.optimizer.param_groups for p in g["params"]}
    names = dict(trainer.model.named_parameters())  # tied decoder weight listed once
    assert len(decay_of) == len(names)
    for name, param in names.items():  # the BERT repository's rule: LayerNorm weights and biases, by module
        owner = trainer.model.get_submodule(name.rsplit(".", 1)[0])
        expected = 0.0 if isinstance(owner, torch.nn.LayerNorm) or name.endswith("bias") else 0.1
        assert decay_of[id(param)] == expected, name


def test_first_and_last_step_run_at_a_positive_lr(corpus, tmp_path):
    trainer = make_trainer(corpus, make_cfg(max_steps=100, warmup_fraction=0.1, lr=1e-3), tmp_path)
    assert trainer._lr() == pytest.approx(1e-3 * (0.5 / 100) / 0.1)  # warmup at the first step's midpoint
    trainer.state["step"] = 99
    assert trainer._lr() == pytest.approx(1e-3 * 0.5 / 90)  # linear decay: half a step of 90 left


def test_unigram_baseline_by_hand():
    vocab = MaskingVocab(
        mask_token_id=4,
        special_ids=torch.arange(5),
        random_ids=torch.arange(5, 8),
        continuation=torch.zeros(8, dtype=torch.bool),
    )
    ids = torch.tensor([[2, 5, 5, 6, 3]])
    maskable = torch.tensor([[False, True, True, True, False]])
    logp = unigram_log_probs(ids, maskable, vocab)
    # add-one counts over the non-special ids 5, 6, 7: 3, 2, 1 of 6
    assert torch.allclose(logp[5:], torch.tensor([3 / 6, 2 / 6, 1 / 6], dtype=torch.float64).log())
    assert torch.isinf(logp[:5]).all()


def test_heldout_selection_takes_every_source_in_turn():
    sources = np.array([0, 0, 0, 0, 1, 1, 2, 0])
    assert stratified_rows(sources, 5).tolist() == [0, 1, 4, 5, 6]
    assert stratified_rows(sources, 100).tolist() == list(range(8))


def test_metrics_report_the_unigram_gap_and_every_source(corpus, tmp_path):
    metrics = run(make_cfg(max_steps=4, eval_max_blocks=8), clone(corpus, tmp_path), NullLog())
    by_source = metrics["heldout_by_source"]
    assert set(by_source) == {"bbc_a", "bbc_b"}  # bbc_b is only every 4th block: stratified, it is still in
    assert sum(s["blocks"] for s in by_source.values()) == metrics["heldout_blocks"] == 8
    n = sum(s["masked_tokens"] for s in by_source.values())
    assert n == metrics["heldout_masked_tokens"] > 0
    # one count per held-out block, summing to the totals (the report resamples these blocks)
    blocks = metrics["heldout_per_block"]
    assert len(blocks["masked"]) == len(blocks["correct"]) == len(blocks["unigram_correct"]) == 8
    assert sum(blocks["masked"]) == n and sum(blocks["correct"]) == round(metrics["heldout_mlm_accuracy"] * n)
    assert sum(blocks["unigram_correct"]) == round(metrics["heldout_unigram_accuracy"] * n)
    pooled = sum(s["loss"] * s["masked_tokens"] for s in by_source.values()) / n
    assert pooled == pytest.approx(metrics["heldout_loss"])
    assert metrics["heldout_gap_to_unigram_nats"] == pytest.approx(
        metrics["heldout_unigram_ce"] - metrics["heldout_loss"]
    )
    assert 0 < metrics["heldout_unigram_ce"] < math.log(400)  # better than uniform over the 400-token vocab
    assert metrics["variant"] == "pretrained" and metrics["mfu"] is None  # CPU: MFU unknown, not a guess


def test_code_closure_covers_the_training_code_only():
    files = {p.relative_to(ROOT).as_posix() for p in pretrain_code_files()}
    assert {"tasks/pretrain/mlm.py", "tasks/pretrain/trainer.py", "tasks/common/models/optim.py"} <= files
    assert not any(f.startswith(("tasks/config/", "tasks/finetune/", "tasks/report/")) for f in files)


def _run_in(code: Path, cfg, paths) -> dict:
    """Run the stage in a fresh process that imports ``tasks`` from ``code``; returns its metrics."""
    script = textwrap.dedent(f"""
        import json, logging, sys
        logging.basicConfig(level=logging.INFO)
        sys.path.insert(0, {str(code)!r})
        from tasks.config.paths import Paths
        from tasks.config.model.pretrain import PretrainParams
        from tasks.tracking import NullLog
        import tasks.pretrain as P
        cfg = PretrainParams.model_validate_json({cfg.model_dump_json()!r})
        paths = Paths.model_validate_json({paths.model_dump_json()!r})
        m = P.run(cfg, paths, NullLog())
        print("METRICS", json.dumps({{"steps": m["steps"], "resumed_from_step": m["resumed_from_step"]}}))
    """)
    env = {"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300, cwd=code
    )
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(x for x in done.stdout.splitlines() if x.startswith("METRICS"))
    return {**json.loads(line.split(" ", 1)[1]), "log": done.stderr}


@pytest.mark.slow
def test_a_checkpoint_written_by_other_code_is_not_resumed(corpus, tmp_path):
    code = tmp_path / "code"
    shutil.copytree(ROOT / "tasks", code / "tasks", ignore=shutil.ignore_patterns("__pycache__"))
    cfg, paths = make_cfg(max_steps=4, checkpoint_every_steps=2), clone(corpus, tmp_path / "ws")
    assert _run_in(code, cfg, paths)["resumed_from_step"] == 0
    assert _run_in(code, cfg, paths)["resumed_from_step"] == 4  # same code: the final checkpoint resumes

    mlm = code / "tasks" / "pretrain" / "mlm.py"
    mlm.write_text(mlm.read_text() + "\n# an edit to the masking code\n")
    edited = _run_in(code, cfg, paths)
    assert edited["resumed_from_step"] == 0 and edited["steps"] == 4
    assert "made with other code;" in edited["log"]


def test_init_from_reference_starts_from_the_packaged_minilm_weights(corpus, tmp_path):
    cfg = make_cfg(init_from="reference")
    start = resolve_start(cfg, clone(corpus, tmp_path))
    assert start.tokenization == "reference" and start.variant == "adapted"
    model = initial_model(cfg, start, SEQ_LEN)
    packaged = load_file(reference_model_dir() / "model.safetensors")
    encoder = model.bert.state_dict()
    compared = 0
    for name, tensor in packaged.items():
        key = name.removeprefix("bert.")
        if key.startswith("pooler.") or key.endswith("position_ids"):  # no pooler in the MLM; a constant buffer
            continue
        assert torch.equal(encoder[key], tensor), name
        compared += 1
    assert compared == len(encoder) and compared > 90  # every weight of the 6-layer encoder
    # the fresh MLM head's decoder is the input embedding matrix itself
    assert model.cls.predictions.decoder.weight is model.bert.embeddings.word_embeddings.weight


@pytest.mark.slow
def test_adapted_variant_saves_and_reloads(corpus, tmp_path):
    paths = clone(corpus, tmp_path)
    metrics = run(
        make_cfg(init_from="reference", max_steps=2, batch_size_blocks=4, eval_max_blocks=4), paths, NullLog()
    )
    assert metrics["variant"] == "adapted" and metrics["steps"] == 2
    assert metrics["heldout_loss"] < metrics["heldout_loss_initial"]  # a fresh head learns fast
    folder = paths.models / "pretrained"
    reloaded = AutoModelForMaskedLM.from_pretrained(folder)
    saved = load_file(folder / "model.safetensors")
    state = reloaded.state_dict()
    assert all(torch.equal(state[k], v) for k, v in saved.items())
    assert len(AutoTokenizer.from_pretrained(folder)) == 30522
    assert model_dir("adapted", paths.models) == folder and tokenization("adapted", paths.models) == "reference"
    with pytest.raises(ValueError, match="init_from: scratch"):
        model_dir("pretrained", paths.models)


@pytest.mark.parametrize(
    ("device_name", "entry", "bf16", "tf32"),
    [  # dense tensor-core peaks from the NVIDIA datasheets, FLOP/s
        ("NVIDIA H100 80GB HBM3", "H100 SXM", 989e12, 494.7e12),
        ("NVIDIA H100 PCIe", "H100 PCIe", 756e12, 378e12),
        ("NVIDIA H200", "H200", 989e12, 494.7e12),
        ("NVIDIA L4", "L4", 121e12, 60e12),
        ("NVIDIA L40", "L40", 181e12, 90.5e12),
        ("NVIDIA L40S", "L40S", 362e12, 183e12),
        ("NVIDIA A100-SXM4-80GB", "A100", 312e12, 156e12),
        ("NVIDIA A10", "A10", 125e12, 62.5e12),
    ],
)
def test_gpu_peak_table(monkeypatch, device_name, entry, bf16, tf32):
    assert gpu_peak(device_name).name == entry
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: device_name)
    assert peak_flops(torch.device("cuda", 0), bf16=True) == bf16
    assert peak_flops(torch.device("cuda", 0), bf16=False) == tf32


def test_an_unknown_gpu_or_cpu_has_no_peak(monkeypatch):
    assert gpu_peak("NVIDIA GeForce RTX 4090") is None and gpu_peak("Tesla T4") is None
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H20")
    assert peak_flops(torch.device("cuda", 0), bf16=True) is None
    assert peak_flops(torch.device("cpu"), bf16=True) is None


def test_dose_snapshots_are_model_folders_and_step_0_is_the_initial_model(corpus, tmp_path):
    from tasks.pretrain.init import build_model

    cfg = make_cfg(max_steps=4, dose_snapshot_fractions=[0.0, 0.5])
    paths = clone(corpus, tmp_path)
    run(cfg, paths, NullLog())
    snaps = sorted((paths.models / "pretrained" / "snapshots").iterdir())
    assert [p.name for p in snaps] == ["step_00000000", "step_00000002"]
    torch.manual_seed(cfg.seed)  # the stage seeds torch right before building the model
    initial = build_model(cfg, 400, SEQ_LEN, 0).state_dict()
    at_0 = AutoModelForMaskedLM.from_pretrained(snaps[0]).state_dict()
    assert all(torch.equal(initial[k], at_0[k]) for k in at_0)
    at_2 = AutoModelForMaskedLM.from_pretrained(snaps[1]).state_dict()
    assert any(not torch.equal(at_0[k], at_2[k]) for k in at_0)  # it trained in between
    assert json.loads((snaps[1] / "pretraining.json").read_text())["variant"] == "pretrained"
    assert len(AutoTokenizer.from_pretrained(snaps[1])) == 400
