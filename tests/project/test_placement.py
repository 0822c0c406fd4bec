"""Nothing stays behind on the host: one fine-tuning step per task kind and one pretraining step (train and
held-out evaluation) run with the model on the ``meta`` device, where any input or intermediate tensor left on
the CPU raises: meta's own "Tensor on device meta is not on the expected device cpu", or, for the ops meta lets
a host operand into (embedding, indexing, gather, matmul ...), the harness's ``HostTensorGuard`` ("placement:
aten.<op> at <file:line>", tests/placement_harness.py). The same code paths run on CUDA, so a pass here is what
a CPU box can prove about GPU placement (the probe's own check is in tests/probe/test_probe_placement.py).

transformers' SDPA mask builder reads ``padding_mask.all()`` back to the host to skip an all-ones mask (its own
sync, once per forward of a padded batch; meta tensors cannot be read), so these tests make it keep the mask.
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import safetensors.torch
import torch
from datasets import load_from_disk
from transformers import masking_utils

from clozeline import predict
from finetune_fixtures import save_tiny_bert, tiny_params, two_model_workspace
from leakage_fixtures import news_corpus, run_leakage, semantic_params
from leakage_fixtures import params as leakage_params
from placement_harness import on_meta
from pretrain_fixtures import SEQ_LEN as PRETRAIN_SEQ
from pretrain_fixtures import add_reference_blocks, bench_module, clone, make_cfg
from tasks import finetune, pretrain
from tasks.common.models import encoders
from tasks.common.models.encoders import load_tokenizer
from tasks.common.runtime import device as dev
from tasks.common.runtime.device import autocast, place
from tasks.config import read_yaml
from tasks.config.corpus.leakage import LeakageParams
from tasks.export import convert
from tasks.finetune import cls, ner
from tasks.finetune.arms import operational
from tasks.finetune.arms.model import build_model, save_model
from tasks.finetune.arms.training import train_step
from tasks.leakage.semantic import encoder as semantic_encoder
from tasks.leakage.semantic import store as embedding_store
from tasks.leakage.semantic.cluster import ray_engine
from tasks.pretrain import checkpoint
from tasks.pretrain.feed import masked_batch
from tasks.pretrain.hardware import Dist
from tasks.pretrain.init import build_model as build_mlm
from tasks.pretrain.mlm import MaskingVocab
from tasks.pretrain.trainer import Trainer
from tasks.release.card import usage as card_usage
from tasks.tracking import NullLog

pytestmark = pytest.mark.placement

META = torch.device("meta")
VOCAB, SEQ = 64, 16


@pytest.fixture()
def keep_every_mask(monkeypatch):
    monkeypatch.setattr(masking_utils, "_ignore_bidirectional_mask_sdpa", lambda *args, **kwargs: False)


def cls_batch() -> dict:
    exs = [{"input_ids": [2, 9, 10, 3], "label": 0}, {"input_ids": [2, 11, 3], "label": 1}]
    return cls.collate(exs, pad_id=0)


def ner_batch() -> dict:
    exs = [
        {"input_ids": [2, 9, 10, 3], "labels": [-100, 1, 0, -100]},
        {"input_ids": [2, 11, 3], "labels": [-100, 2, -100]},
    ]
    return ner.collate(exs, pad_id=0)


@pytest.mark.parametrize(
    ("head", "n_labels", "make_batch"),
    [("mean-pool", 2, cls_batch), ("cls-pool", 2, cls_batch), ("first", 3, ner_batch)],
)
def test_a_fine_tuning_step_runs_entirely_on_the_models_device(tmp_path, keep_every_mask, head, n_labels, make_batch):
    model = build_model("pretrained", save_tiny_bert(tmp_path / "m"), head, n_labels, "full", 0.1, 0).to(META)
    loss = train_step(model, place(make_batch(), META), META)
    assert loss.device == META
    assert all(p.grad is not None and p.grad.device == META for p in model.head.parameters())


def test_a_batch_left_on_the_host_is_caught(tmp_path, keep_every_mask):
    model = build_model("pretrained", save_tiny_bert(tmp_path / "m"), "mean-pool", 2, "full", 0.1, 0).to(META)
    with pytest.raises((RuntimeError, NotImplementedError), match="meta"):
        train_step(model, cls_batch(), META)  # not placed: the check can fail


def blocks(n: int, with_padding: bool = False) -> dict:
    generator = torch.Generator().manual_seed(n)
    ids = torch.randint(5, VOCAB, (n, SEQ), generator=generator)
    ids[:, 0], ids[:, -1] = 2, 3
    attention = torch.ones_like(ids)
    if with_padding:
        ids[0, -4:], attention[0, -4:] = 0, 0
    maskable = (attention == 1) & (ids > 4)
    return {
        "input_ids": ids,
        "attention_mask": attention,
        "maskable": maskable,
        "source_id": torch.zeros(n, dtype=torch.long),
        "source_names": ["s"],
    }


@pytest.mark.parametrize("architecture", ["modernbert", "bert"])
@pytest.mark.parametrize("with_padding", [False, True])
def test_a_pretraining_step_and_an_evaluation_batch_run_entirely_on_the_models_device(
    tmp_path, keep_every_mask, architecture, with_padding
):
    cfg = make_cfg(architecture=architecture, max_position_embeddings=SEQ, batch_size_blocks=4)
    vocab = MaskingVocab(
        mask_token_id=4,
        special_ids=torch.arange(5),
        random_ids=torch.arange(5, VOCAB),
        continuation=torch.zeros(VOCAB, dtype=torch.bool),
    )
    model = build_mlm(cfg, VOCAB, SEQ, 0)
    train, heldout = blocks(12, with_padding), blocks(6)
    trainer = Trainer(cfg, model, vocab, train, heldout, Dist(0, 1, torch.device("cpu")), NullLog(), tmp_path)
    model.to(META)
    for batch in trainer._micro_batches(0):
        on_meta = batch.to(META)
        with autocast(META):
            loss, _ = trainer.net(on_meta.input_ids, on_meta.attention_mask, on_meta.positions, on_meta.targets)
        loss.backward()
        assert loss.device == META
    trainer.inner.eval()
    rows = torch.arange(3)  # a ragged last batch, padded to batch_size_blocks
    batch = masked_batch(heldout, rows, vocab, 0.15, torch.Generator().manual_seed(0), False, trainer.with_mask, 4)
    on_meta = batch.to(META)
    loss, n_correct = trainer.inner(on_meta.input_ids, on_meta.attention_mask, on_meta.positions, on_meta.targets)
    assert loss.device == n_correct.device == META and on_meta.input_ids.shape[0] == 4


def test_packed_blocks_reach_sdpa_without_a_mask_and_padded_ones_with_one(monkeypatch):
    """With every ModernBERT layer full_attention, transformers hands SDPA no mask for unpadded blocks, so on
    CUDA the flash kernel is eligible; a padded batch gets a boolean 4-D mask (memory-efficient kernel)."""
    masks = []
    real = torch.nn.functional.scaled_dot_product_attention

    def spy(query, key, value, attn_mask=None, **kwargs):
        masks.append(None if attn_mask is None else (attn_mask.dtype, attn_mask.dim()))
        return real(query, key, value, attn_mask=attn_mask, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    cfg = make_cfg(architecture="modernbert", max_position_embeddings=SEQ)
    model = build_mlm(cfg, VOCAB, SEQ, 0)
    packed = blocks(4)
    model.base_model(input_ids=packed["input_ids"], attention_mask=None)
    assert masks == [None] * cfg.preset.num_hidden_layers
    masks.clear()
    padded = blocks(4, with_padding=True)
    model.base_model(input_ids=padded["input_ids"], attention_mask=padded["attention_mask"])
    assert masks == [(torch.bool, 4)] * cfg.preset.num_hidden_layers


# ---------------------------------------------------------------- the harness's own checks


def test_place_refuses_a_module():
    """place() passed a model through unchanged, so leakage's MiniLM stayed on the CPU under CUDA."""
    with pytest.raises(TypeError, match=r"model\.to\(device\)"):
        place(torch.nn.Linear(2, 2), META)


def test_a_module_left_on_the_host_is_caught(monkeypatch):
    """Negative control: a stage that resolves the device but forgets to move its model."""
    model = torch.nn.Sequential(torch.nn.Embedding(10, 4), torch.nn.Linear(4, 2))
    with on_meta(monkeypatch) as placement, pytest.raises(RuntimeError, match=r"placement: aten\.embedding"):
        device = dev.resolve("cuda")
        model(place(torch.tensor([[1, 2, 3]]), device))  # meta itself lets a host weight through here
    assert device == META and placement.leaks[0] == "Embedding: weights on the host ['weight'], host inputs []"
    assert len(placement.leaks) == 2
    assert placement.leaks[1].startswith("aten.embedding.default at project/test_placement")


def test_a_host_read_of_a_device_tensor_is_answered_and_a_host_operand_still_raises(monkeypatch):
    with on_meta(monkeypatch) as placement:
        x = torch.ones(3, 2, device=META)
        answers = (x.sum().item(), x.tolist(), x.cpu().numpy().shape, float(x.max()))
        assert answers == (0.0, [[0.0] * 2] * 3, (3, 2), 0.0)
        with pytest.raises(RuntimeError, match=r"placement: aten\.mul\.Tensor at project/test_placement\.py:\d+"):
            x * torch.ones(3, 2)  # meta's own check would raise too ("is not on the expected device cpu")
    assert placement.reads.reads == 4


class LogProbOfTarget(torch.nn.Module):
    """pairs.masked_log_probs in small: the log-probability of each row's target, gathered on the device."""

    def __init__(self) -> None:
        super().__init__()
        self.head = torch.nn.Linear(4, 6)

    def forward(self, hidden: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(self.head(hidden), dim=-1).gather(1, targets[:, None])[:, 0]


def test_a_gather_with_a_host_index_is_caught(monkeypatch):
    """Negative control: the batch placed but its ``targets`` kept on the host (``{**place(batch, device),
    "targets": batch["targets"]}`` in tasks/probe/pairs.py passed the probe's entry-point test): meta gathers with
    a host index, CUDA raises. The module is called with the host tensor, so the forward hook sees it too."""
    batch = {"hidden": torch.zeros(3, 4), "targets": torch.tensor([1, 5, 0])}
    with on_meta(monkeypatch) as placement:
        model = LogProbOfTarget().to(dev.resolve("cuda"))
        assert model(**place(batch, META)).device == META  # placed: no leak
        assert placement.leaks == []
        with pytest.raises(RuntimeError, match=r"placement: aten\.gather\.default at project/test_placement\.py:\d+"):
            model(**{**place(batch, META), "targets": batch["targets"]})
    assert len(placement.leaks) == 1 and "host tensor(s) [(3, 1)]" in placement.leaks[0]


HOST_OPERAND = {  # each op with a meta operand and a host one: meta computes them all, CUDA refuses (or syncs)
    "embedding": lambda m, h: torch.nn.functional.embedding(m.long(), h),  # host weight, device index
    "index_select": lambda m, h: m.index_select(0, h.long()),
    "index": lambda m, h: m[h.long()],
    "index_put": lambda m, h: m.index_put_((h.long(),), torch.ones((), device=META)),
    "gather": lambda m, h: m.gather(0, h.long()),
    "scatter": lambda m, h: m.scatter(0, h.long(), m),
    "matmul": lambda m, h: m @ h,
    "linear": lambda m, h: torch.nn.functional.linear(m, h),
    "where": lambda m, h: torch.where(h.bool(), m, 0.0),
    "cat": lambda m, h: torch.cat([m, h]),
}


@pytest.mark.parametrize("op", sorted(HOST_OPERAND))
def test_an_op_mixing_a_device_tensor_with_a_host_one_is_caught(monkeypatch, op):
    with on_meta(monkeypatch) as placement, pytest.raises(RuntimeError, match="placement: aten"):
        HOST_OPERAND[op](torch.zeros(2, 2, device=META), torch.zeros(2, 2))
    assert len(placement.leaks) == 1 and "host tensor(s) [(2, 2)]" in placement.leaks[0]


def test_transfers_and_host_scalars_are_not_leaks(monkeypatch):
    """Positive control: moving a host tensor onto the device (``place``, ``.to``, ``dst.copy_(src)``: legal on
    CUDA) and a 0-dim host tensor as an operand (CUDA takes it as a scalar) are allowed; host-only bookkeeping
    is not the harness's business."""
    host = torch.arange(6.0).reshape(3, 2)
    with on_meta(monkeypatch) as placement:
        x = place(host, META) + host.to(META) + torch.empty(3, 2, device=META).copy_(host)
        x = x * torch.tensor(2.0) + torch.ones(3, 2, device=META)[torch.tensor(1)]
        host.sum().item()
    assert x.device == META and placement.leaks == []


class Masked(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(2, 2)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        return self.proj(x)  # the mask is only passed along (a real module would use it: that op raises as well)


def test_a_host_tensor_passed_by_keyword_is_caught(monkeypatch):
    """Negative control: a module called with a host tensor as a keyword argument (``model(input_ids=...,
    attention_mask=host_mask)``); the global forward pre-hook sees positional arguments only."""
    with on_meta(monkeypatch) as placement:
        model = Masked().to(dev.resolve("cuda"))
        model(torch.zeros(3, 2, device=META), mask=torch.ones(3, 2, device=META))
        assert placement.leaks == []
        model(torch.zeros(3, 2, device=META), mask=torch.ones(3, 2))
        model(x=torch.zeros(3, 2, device=META), mask=(torch.ones(3, 2),))
    assert placement.leaks == ["Masked: host keyword inputs {'mask': (3, 2)}"] * 2


# ---------------------------------------------------------------- leakage: the semantic encoder


def test_leakage_semantic_encoder_embeds_on_the_resolved_device(monkeypatch, tiny_encoder):
    """The stage's Encoder resolves hardware.device itself (auto -> CUDA on a GPU box), loads the encoder and
    embeds windows; 1e1da4d left the model on the CPU (place() passed it through) and crashed on CUDA."""
    raw = read_yaml("params.yaml")["leakage"]
    raw["semantic"] = {
        **raw["semantic"],
        "enabled": True,
        "encoder": str(tiny_encoder),
        "window_tokens": 16,
        "stride_tokens": 14,
        "batch_size": 4,
    }
    cfg = LeakageParams(**{**raw, "hardware": {"device": "cuda"}})
    texts = ["the ship entered the harbour at dawn and the crew went ashore for supplies", "a short one", ""]
    with on_meta(monkeypatch) as placement:
        encoder = semantic_encoder.Encoder(cfg.semantic, cfg.hardware)
        windows = encoder.windows(texts)
    assert placement.resolved == ["cuda"] and encoder.precision == "bf16"
    assert {p.device for p in encoder.model.parameters()} | {b.device for b in encoder.model.buffers()} == {META}
    assert placement.leaks == [] and placement.forwards > 0
    assert windows.vectors.shape[1] == 32 and len(windows.vectors) == encoder.stats["windows_embedded"] > 0


def test_leakage_run_audits_semantically_on_the_resolved_device(monkeypatch, tiny_encoder, tmp_path):
    """``leakage.run`` as DVC calls it, the semantic detector on: the audit builds its Encoder from
    ``hardware.device`` and embeds the eval docs, planted copies and corpus there."""
    task, pre = news_corpus()
    cfg = leakage_params(semantic=semantic_params(tiny_encoder), hardware={"device": "cuda"})
    with on_meta(monkeypatch) as placement:
        metrics, _ = run_leakage(tmp_path, [task, pre], cfg)
    assert placement.resolved == ["cuda"] and placement.forwards > 0
    assert placement.leaks == []
    assert metrics["semantic"]["device"] == "meta"


def test_leakage_semantic_ray_actors_embed_on_the_gpu_they_are_given(monkeypatch, tiny_encoder, tmp_path):
    """``engine: ray`` on a cluster with GPUs: one embedding actor per GPU, its encoder on ``cuda`` (the GPU Ray
    gives it), and the facts task (the store's fingerprint, the metrics' device) built the same way."""

    class Cluster:  # what placement reads of Ray: 2 live nodes of 4 CPUs, 1 GPU each, and a dead one
        @staticmethod
        def cluster_resources():
            return {"CPU": 8.0, "GPU": 2.0}

        @staticmethod
        def nodes():
            return [
                {"Alive": a, "Resources": {"CPU": c, "GPU": 1.0}} for a, c in ((True, 4.0), (True, 4.0), (False, 16.0))
            ]

    cfg = leakage_params(semantic=semantic_params(tiny_encoder, batch_size=4))
    where = ray_engine.placement(Cluster, cfg.hardware, 4)
    assert (where.actors, where.cpus, where.gpus, where.threads, where.hardware.device) == (2, 1, 1, 1, "cuda")
    on_cpus = ray_engine.placement(Cluster, cfg.hardware.model_copy(update={"device": "cpu"}), 6)
    assert (on_cpus.actors, on_cpus.cpus, on_cpus.gpus, on_cpus.threads) == (2, 4, 0, 4)  # a node's 4 CPUs, not 6
    pieces = [np.arange(1000, 1000 + n) for n in (3, 9, 14)]
    keys = [embedding_store.key_of(p) for p in pieces]
    windows = pa.table({"key": pa.array(keys, pa.binary(16)), "tokens": pa.array(pieces, pa.list_(pa.int64()))})
    threads = torch.get_num_threads()
    try:
        with on_meta(monkeypatch) as placement:
            pq.write_table(windows, tmp_path / "todo.parquet")
            files = pa.table({"file": [str(tmp_path / "todo.parquet")]})
            out = ray_engine.Embedder(cfg.semantic, where.hardware, where.threads, tmp_path, 1)(files)
            key, described = ray_engine._encoder_facts._func(cfg.semantic, where.hardware, where.threads)
    finally:
        torch.set_num_threads(threads)
    assert placement.resolved == ["cuda", "cuda"] and placement.forwards > 0 and placement.leaks == []
    # the actor writes its vectors to the spill folder (one bucket here: one file) and returns only the count
    (written,) = (tmp_path / "embedded").glob("*.parquet")  # the actor read its file of windows itself
    vectors = pq.read_table(written)
    assert out.column("rows").to_pylist() == [3] and vectors.column("key").to_pylist() == keys
    assert vectors.column("vector").type.list_size == 32
    assert described["device"] == "meta" and "meta" in key["device"]


# ---------------------------------------------------------------- finetune: the stage's run


@pytest.fixture(scope="module")
def finetune_workspace(tmp_path_factory):
    """models/pretrained (tiny, hidden 32), a 'reference' of another width, and both tokenizations' task data."""
    return two_model_workspace(tmp_path_factory.mktemp("ft_meta"), {"train": 8, "dev": 4, "test": 4})


def on_cuda(cfg):
    return cfg.model_copy(update={"hardware": cfg.hardware.model_copy(update={"device": "cuda"})})


@pytest.mark.parametrize(
    ("item", "configs"),
    [
        ("cls", ["pretrained/full/cls-pool", "pretrained/frozen/mean-pool", "reference/full/mean-pool"]),
        ("ner", ["pretrained/full/first", "pretrained/frozen/first"]),
    ],
)
def test_finetune_run_trains_predicts_and_pools_features_on_the_resolved_device(
    monkeypatch, finetune_workspace, item, configs
):
    """``finetune.run`` as DVC calls it, every arm kind on a device that is not the CPU: full fine-tuning (train
    steps, dev and test predictions, the selected model's retrain), a frozen encoder (cls: pooled features for
    the probe; ner: the head trained on it) and the reference encoder."""
    paths, reference = finetune_workspace
    monkeypatch.setattr(encoders, "reference_model_dir", lambda: reference)
    other = {"cls": ["pretrained/full/cls-pool"], "ner": ["pretrained/full/first"]}
    cfg = on_cuda(tiny_params(*[configs if name == item else other[name] for name in ("cls", "ner")], [3], epochs=1))
    with on_meta(monkeypatch) as placement:
        metrics = finetune.run(cfg, paths, NullLog(), item)
    assert placement.resolved == ["cuda"] and placement.forwards > 0
    assert placement.leaks == []
    assert sorted(metrics["runs"]) == sorted(configs)


@pytest.mark.parametrize("item", ["cls", "ner"])
def test_finetune_inference_cost_is_timed_on_the_resolved_device(monkeypatch, finetune_workspace, tmp_path, item):
    """The operational measurement (``measure_saved``: what ``finetune.run`` starts in a fresh process per timed
    arm, with the resolved device's name) loads a saved model and times its batches there."""
    paths, _ = finetune_workspace
    module = {"cls": cls, "ner": ner}[item]
    head = "mean-pool" if item == "cls" else "first"
    folder = save_model(build_model("pretrained", paths.models / "pretrained", head, 3, "full", 0.1, 0), tmp_path / "m")
    params = tiny_params(["pretrained/full/cls-pool"], ["pretrained/full/first"], [3], operational=True)
    rows = load_from_disk(str(paths.data / "tokenize" / item / "clozeline" / "test")).to_list()
    exs, ocfg = module.examples(rows, params.task(item), "first"), params.operational
    with on_meta(monkeypatch) as placement:
        entry = operational.measure_saved(folder, module.collate, exs, 0, ocfg, str(dev.resolve("cuda")))
    assert placement.leaks == [] and placement.forwards >= 6
    assert entry["device"] == "meta" and set(entry["batch"]) == {"1", "4"}


# ---------------------------------------------------------------- pretrain: the stage's run


@pytest.fixture(scope="module")
def pretrain_corpus(tmp_path_factory):
    """A WordPiece tokenizer and 32-token blocks of 40 real BBC articles, and the MiniLM blocks of 20."""
    root = tmp_path_factory.mktemp("pt_meta")
    bench_module().build_data(root, vocab_size=400, seq_len=PRETRAIN_SEQ, heldout_every=10, max_docs=40)
    add_reference_blocks(root, 20)
    return root


def pretrain_cfg(**changes):
    return make_cfg(
        **{
            "max_steps": 4,
            "eval_every_steps": 2,
            "checkpoint_every_steps": 2,
            "log_every_steps": 1,
            "batch_size_blocks": 4,
            "eval_max_blocks": 4,
            **changes,
        }
    )


@pytest.mark.parametrize(
    ("init_from", "architecture"),
    [("scratch", "modernbert"), ("scratch", "roberta-prelayernorm"), ("reference", "modernbert")],
)
def test_pretrain_run_trains_evaluates_and_fills_masks_on_the_resolved_device(
    monkeypatch, pretrain_corpus, tmp_path, init_from, architecture
):
    """``pretrain.run`` as DVC calls it (``setup_distributed`` resolves ``hardware.device``): train steps, the
    held-out evaluations, checkpoints and the fill-mask check, from a fresh model and from the packaged MiniLM
    (``init_from: reference``, loaded with ``from_pretrained``)."""
    cfg = pretrain_cfg(init_from=init_from, architecture=architecture, hardware={"device": "cuda"})
    with on_meta(monkeypatch) as placement:
        metrics = pretrain.run(cfg, clone(pretrain_corpus, tmp_path), NullLog())
    assert placement.resolved == ["cuda"] and placement.forwards > 0
    assert placement.leaks == []
    assert metrics["steps"] == 4 and metrics["variant"] == ("pretrained" if init_from == "scratch" else "adapted")
    assert list(metrics["fill_mask"]) == cfg.fill_mask


def test_pretrain_resumes_a_host_checkpoint_onto_the_resolved_device(monkeypatch, pretrain_corpus, tmp_path):
    """The last checkpoint of a CPU run (the device is not in the checkpoint's fingerprint) is resumed by
    ``pretrain.run`` on the resolved device: weights and optimizer state are loaded there (``checkpoint.load``'s
    ``device``), then the final evaluation and the fill-mask check run on it."""
    paths = clone(pretrain_corpus, tmp_path)
    pretrain.run(pretrain_cfg(hardware={"device": "cpu"}), paths, NullLog())
    with on_meta(monkeypatch) as placement:
        metrics = pretrain.run(pretrain_cfg(hardware={"device": "cuda"}), paths, NullLog())
    assert placement.resolved == ["cuda"] and placement.leaks == [] and placement.forwards > 0
    assert metrics["resumed_from_step"] == 4 and metrics["steps"] == 4 and placement.meta_loads == 1


def test_a_stage_that_leaves_its_model_on_the_host_is_caught(monkeypatch, finetune_workspace, tmp_path):
    """Negative control on a real entry point: the inference-cost measurement with a model whose ``.to`` does
    nothing (the leakage encoder's old bug) fails under the harness."""
    paths, _ = finetune_workspace
    model = build_model("pretrained", paths.models / "pretrained", "mean-pool", 2, "full", 0.1, 0)
    folder = save_model(model, tmp_path)
    real_load = operational.load_model

    def stuck(saved):
        model = real_load(saved)
        model.to = lambda *args, **kwargs: model  # stays on the CPU, as place() left the MiniLM
        return model

    monkeypatch.setattr(operational, "load_model", stuck)
    params = tiny_params(["pretrained/full/cls-pool"], ["pretrained/full/first"], [3], operational=True)
    rows = load_from_disk(str(paths.data / "tokenize" / "cls" / "clozeline" / "test")).to_list()
    with on_meta(monkeypatch) as placement, pytest.raises(RuntimeError, match="meta"):
        operational.measure_saved(
            folder,
            cls.collate,
            cls.examples(rows, params.task("cls"), "first"),
            0,
            params.operational,
            str(dev.resolve("cuda")),
        )
    assert placement.leaks and "weights on the host" in placement.leaks[0]


# ---------------------------------------------------------------- export's re-score and the release card


@pytest.fixture(scope="module")
def exports(finetune_workspace, tmp_path_factory):
    """Per task kind, an export folder (``convert.build``, as the export stage writes it) of a tiny selected
    model, and its task's labels."""
    paths, _ = finetune_workspace
    root, out = tmp_path_factory.mktemp("exports"), {}
    for item, kind, head in (("cls", "classification", "mean-pool"), ("ner", "token_classification", "first")):
        labels = json.loads((paths.data / "tokenize" / item / "clozeline" / "labels.json").read_text())
        selected = save_model(
            build_model("pretrained", paths.models / "pretrained", head, len(labels), "full", 0.1, 0),
            root / item / "selected",
        )
        load_tokenizer(paths.models / "pretrained").save_pretrained(selected)
        record = {
            "run": f"pretrained/full/{head}",
            "seed": 0,
            "labels": labels,
            "input": {"max_seq_len_tokens": 10, "truncation": "head", "head_tokens": 0},
        }
        (selected / "selected.json").write_text(json.dumps(record))
        convert.build(selected, root / item / "model", kind, (16, 4))
        out[kind] = (root / item / "model", labels)
    return out


RAW = {
    "classification": [{"doc_id": "a", "text": "the match ended in a draw"}, {"doc_id": "b", "text": "chips"}],
    "token_classification": [
        {"doc_id": "a", "words": "john visited paris in the spring of that year".split()},
        {"doc_id": "b", "words": ["ok"]},
    ],
}


@pytest.mark.parametrize("kind", ["classification", "token_classification"])
def test_export_rescore_pipeline_keeps_its_batches_on_the_models_device(monkeypatch, exports, kind):
    """What the re-score's fresh process runs (``clozeline.predict``: ``load``, ``predict_records``,
    ``batch_seconds``), with the loaded export on a device that is not the CPU: every window, mask and
    logit stays with the model (the stage itself re-scores on the CPU, as a user's default pipeline does)."""
    folder, labels = exports[kind]
    with on_meta(monkeypatch) as placement:
        pipe = predict.load(folder, labels)
        pipe.model.to(META)
        pipe.device = META
        records = predict.predict_records(pipe, RAW[kind])
        predict.batch_seconds(pipe, RAW[kind], 2)
    assert placement.leaks == [] and placement.forwards > 0
    assert [r["doc_id"] for r in records] == ["a", "b"]
    assert kind == "classification" or [len(r["pred"]) for r in records] == [9, 1]


@pytest.mark.parametrize("kind", ["classification", "token_classification"])
def test_release_card_usage_runs_on_a_device(monkeypatch, exports, kind):
    """The release card's usage snippet, run as written with ``device=`` added to its ``pipeline`` call: the
    registered clozeline pipeline loads the export onto that device and keeps its batches there."""
    folder, _ = exports[kind]
    task = predict.PIPELINE_OF[kind]
    snippet = "\n".join(card_usage(task, kind)).replace('model="<this folder>"', "model=FOLDER, device=DEVICE")
    assert "device=DEVICE" in snippet
    with on_meta(monkeypatch) as placement:
        scope = {"FOLDER": str(folder), "DEVICE": dev.resolve("cuda")}
        exec(compile(snippet, "release card usage", "exec"), scope)  # noqa: S102 (the card's own code)
    model = scope["tag" if kind == "token_classification" else "model"].model
    assert {p.device for p in model.parameters()} == {META}
    assert placement.leaks == [] and placement.forwards > 0


def test_a_checkpoint_that_does_not_fit_the_model_is_named(tmp_path):
    """Seen while resuming on meta: ``checkpoint.load`` sliced safetensors' set of missing names, so a
    checkpoint that does not fit raised ``TypeError: 'set' object is not subscriptable`` instead of naming it."""
    safetensors.torch.save_model(torch.nn.Linear(2, 2, bias=False), str(tmp_path / "model.safetensors"))
    model = torch.nn.Linear(2, 2)
    with pytest.raises(RuntimeError, match=r"model\.safetensors: missing \['bias'\]"):
        checkpoint.load(tmp_path, model, torch.optim.SGD(model.parameters()), torch.device("cpu"))
