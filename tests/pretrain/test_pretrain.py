"""The pretrain stage end to end on a tiny model: overfit, save/reload, kill + resume (DDP: test_pretrain_ddp.py)."""

import math

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForMaskedLM, AutoTokenizer

from pretrain_fixtures import TINY, clone, kill_at_first_checkpoint, make_cfg, worker_script
from tasks.pretrain import checkpoint, run
from tasks.pretrain.schedule import lr_factor
from tasks.tracking import NullLog

pytestmark = pytest.mark.usefixtures("torch_one_thread")


def test_lr_schedule_by_hand():
    assert lr_factor(0.05, 0.1, "linear") == pytest.approx(0.5)
    assert lr_factor(0.1, 0.1, "linear") == pytest.approx(1.0)
    assert lr_factor(0.55, 0.1, "linear") == pytest.approx(0.5)
    assert lr_factor(0.55, 0.1, "cosine") == pytest.approx(0.5)
    assert lr_factor(0.325, 0.1, "cosine") == pytest.approx(0.5 * (1 + math.cos(math.pi / 4)))
    assert lr_factor(1.0, 0.1, "cosine") == pytest.approx(0.0)


def test_bad_params_fail_at_load_time():
    with pytest.raises(ValueError, match="size 'huge'"):
        make_cfg(size="huge")
    with pytest.raises(ValueError, match="exactly one"):
        make_cfg(fill_mask=["no mask here"])
    with pytest.raises(ValueError, match="divisible"):
        make_cfg(presets={"micro": {**TINY["presets"]["micro"], "num_attention_heads": 3}})
    with pytest.raises(ValueError, match="neither scratch, reference nor an HF model folder"):
        make_cfg(init_from="/nonexistent/model")
    with pytest.raises(ValueError, match="neither scratch"):
        make_cfg(init_from="Scratch")  # a typo is not taken for a path
    with pytest.raises(ValueError, match=r"same step twice at max_steps 3 \(steps \[0, 0, 2\]\)"):
        make_cfg(max_steps=3, dose_snapshot_fractions=[0.0, 0.1, 0.5])
    with pytest.raises(ValueError, match=r"nnodes 2 needs an rdzv_endpoint host:port every node can reach"):
        make_cfg(nnodes=2)  # params.yaml's localhost:0 is one machine's free port
    with pytest.raises(ValueError, match="rdzv_endpoint"):
        make_cfg(rdzv_endpoint="node0")  # no port
    assert make_cfg(nnodes=2, rdzv_endpoint="node0.cluster:29500").nnodes == 2


@pytest.mark.slow
def test_overfit_save_and_reload(corpus, tmp_path):
    """A fixed batch of 8 blocks (train = held-out) is memorised: loss at least halves in 200 steps. The
    saved model reloads with AutoModelForMaskedLM with exactly the final checkpoint's weights."""
    paths = clone(corpus, tmp_path)
    small = tmp_path / "fixed"
    from datasets import load_from_disk

    fixed = load_from_disk(str(corpus / "data" / "tokenize" / "pretrain" / "clozeline" / "train")).select(range(8))
    for split in ("train", "heldout"):
        fixed.save_to_disk(str(small / split))
    paths = paths.model_copy(update={"data": tmp_path / "fixeddata"})
    (tmp_path / "fixeddata" / "tokenize" / "pretrain").mkdir(parents=True)
    (tmp_path / "fixeddata" / "tokenize" / "pretrain" / "clozeline").symlink_to(small)
    wider = {"micro": {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 2, "intermediate_size": 128}}
    # BERT: its learned absolute positions make a fixed block memorisable (rotary ModernBERT has no absolute
    # position to key on: 4.0 nats after 200 steps, measured), and memorising is what checks the loop here
    cfg = make_cfg(
        presets=wider, max_steps=200, lr=3e-3, warmup_fraction=0.05, checkpoint_every_steps=100, architecture="bert"
    )

    metrics = run(cfg, paths, NullLog())

    assert metrics["steps"] == 200 and metrics["resumed_from_step"] == 0
    assert metrics["heldout_loss"] <= 0.5 * metrics["heldout_loss_initial"]
    assert metrics["heldout_loss_initial"] == pytest.approx(math.log(400), rel=0.1)  # untrained: ~uniform
    assert metrics["heldout_perplexity"] == pytest.approx(math.exp(metrics["heldout_loss"]))
    assert 0.0 <= metrics["heldout_mlm_accuracy"] <= 1.0
    assert len(metrics["fill_mask"]["the ship entered the [MASK]."]["tokens"]) == 5

    reloaded = AutoModelForMaskedLM.from_pretrained(paths.models / "pretrained")
    final_ckpt = load_file(checkpoint.latest(paths.models / "checkpoints" / "pretrain") / "model.safetensors")
    state = reloaded.state_dict()
    assert final_ckpt.keys() <= state.keys()
    for name, tensor in final_ckpt.items():
        assert torch.equal(state[name], tensor), name
    assert len(AutoTokenizer.from_pretrained(paths.models / "pretrained")) == 400

    rows = (paths.metrics / "pretrain_curve.tsv").read_text().splitlines()
    assert rows[0].split("\t") == ["step", "train_loss", "lr", "eval_loss", "unigram_ce"]
    assert {r.split("\t")[4] for r in rows[1:]} == {f"{metrics['heldout_unigram_ce']:.6g}"}
    steps = [int(r.split("\t")[0]) for r in rows[1:]]
    assert steps == list(range(5, 201, 5))
    assert rows[-1].split("\t")[3] != ""  # the final evaluation is on the curve


@pytest.mark.slow
def test_sigkill_then_rerun_resumes_to_the_uninterrupted_weights(corpus, tmp_path):
    cfg = make_cfg(max_steps=150, checkpoint_every_steps=5, eval_every_steps=50)
    paths = clone(corpus, tmp_path / "killed")
    ckpt_dir = paths.models / "checkpoints" / "pretrain"
    killed_at = kill_at_first_checkpoint(worker_script(tmp_path, cfg, paths), ckpt_dir, 120)
    assert 5 <= killed_at < 150

    resumed = run(cfg, paths, NullLog())
    assert resumed["resumed_from_step"] == killed_at and resumed["steps"] == 150

    fresh_paths = clone(corpus, tmp_path / "uninterrupted")
    fresh = run(cfg, fresh_paths, NullLog())
    assert fresh["resumed_from_step"] == 0 and fresh["steps"] == 150
    assert resumed["heldout_loss_initial"] == fresh["heldout_loss_initial"]
    a = load_file(paths.models / "pretrained" / "model.safetensors")
    b = load_file(fresh_paths.models / "pretrained" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    # the curve spans the whole run, not only the part after the resume
    rows = (paths.metrics / "pretrain_curve.tsv").read_text().splitlines()
    assert int(rows[1].split("\t")[0]) == 5 and int(rows[-1].split("\t")[0]) == 150


def test_masking_vocab_from_a_real_wordpiece_tokenizer(corpus):
    from tasks.pretrain.mlm import MaskingVocab

    tok = AutoTokenizer.from_pretrained(corpus / "models" / "tokenizer")
    vocab = MaskingVocab.from_tokenizer(tok)
    specials = {tok.convert_tokens_to_ids(t) for t in ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]}
    assert set(vocab.special_ids.tolist()) == specials and vocab.mask_token_id == tok.mask_token_id
    assert set(vocab.random_ids.tolist()) == set(range(len(tok))) - specials
    pieces = {i for t, i in tok.get_vocab().items() if t.startswith("##")}
    assert pieces and set(vocab.continuation.nonzero().flatten().tolist()) == pieces


def test_time_budget_stops_training_at_the_budget(corpus, tmp_path):
    cfg = make_cfg(max_steps=10**6, budget_minutes=0.02, eval_every_steps=10**6, checkpoint_every_steps=None)
    metrics = run(cfg, clone(corpus, tmp_path), NullLog())
    assert 0 < metrics["steps"] < 10**6
    # the step that crosses the budget finishes, so training time is the budget plus at most a little
    assert 0.02 <= metrics["train_minutes"] < 0.02 + 0.5
