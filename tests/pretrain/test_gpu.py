"""The model stages on a real GPU: pretraining in bf16 with ``torch.compile`` (inductor) that compiles once per
mode, fine-tuning of each task kind against the same run on the CPU, the inference-cost timing on CUDA, a
2-rank NCCL pretraining run (two GPUs or more) and device resolution with its one-line errors.

Deselected by default (``-m 'not gpu'`` in pyproject); every test skips without CUDA. Run them with
``pytest -m gpu tests/pretrain/test_gpu.py`` (``benchmarks/gpu_check.sh`` does). Tiny models throughout: the file is
meant to take under two minutes on one H200, most of it inductor compiling the pretraining encoder. The probe's
GPU test is ``tests/probe/test_probe_gpu.py``.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from transformers import BertTokenizerFast

from finetune_fixtures import cls_rows, save_tiny_bert, tiny_params, write_task_data
from pretrain_fixtures import clone, make_cfg, subprocess_env, worker_script
from tasks.common.runtime.device import resolve
from tasks.config import Paths
from tasks.config.hardware import HardwareParams
from tasks.pretrain.hardware import setup_distributed
from tasks.tracking import NullLog
from test_pretrain_compile import Compiles  # same folder: pytest puts it on sys.path

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

TORCHRUN = Path(sys.executable).parent / "torchrun"
FT_DOCS = {"train": 12, "dev": 6, "test": 8}
# bf16 autocast on CUDA against float32 on the CPU after one epoch of a tiny model (CPU bf16 autocast, a
# stand-in: at most 0.001 on a cls probability and 0.003 on a ner tag probability); a doc whose two top
# classes are closer than that may flip, so scores get a looser bound than probabilities
PROB_ATOL = 0.05
SCORE_ATOL = 0.2
MIN_AGREEMENT = 0.8  # of ner tags
ACTIVITIES = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]


@pytest.fixture()
def no_torchrun_env(monkeypatch):
    for var in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(var, raising=False)


# ----------------------------------------------------------------------------------------------- pretraining


def test_pretraining_bf16_compiled_on_cuda_compiles_once_per_mode_and_learns(
    corpus, tmp_path, monkeypatch, no_torchrun_env
):
    from torch._inductor.compile_fx import compile_fx

    import tasks.pretrain as stage
    from tasks.pretrain import mlm

    torch._dynamo.reset()
    compiles = Compiles(delegate=compile_fx)  # inductor, as torch.compile's default backend, graphs counted
    monkeypatch.setattr(mlm.torch, "compile", compiles.compile(torch.compile))
    ends = {}
    fill_mask = stage.fill_mask

    def counted_fill_mask(*args, **kwargs):
        ends["before_fill_mask"] = compiles.graphs
        return fill_mask(*args, **kwargs)

    monkeypatch.setattr(stage, "fill_mask", counted_fill_mask)
    cfg = make_cfg(
        compile=True,
        bf16=True,
        max_steps=20,
        batch_size_blocks=8,
        eval_every_steps=10,
        eval_max_blocks=11,
        log_every_steps=5,
        checkpoint_every_steps=None,
        lr=3e-3,
        hardware={"device": "cuda"},
    )
    log = LossLog()
    try:
        metrics = stage.run(cfg, clone(corpus, tmp_path / "run"), log)
    finally:
        torch._dynamo.reset()

    assert compiles.compiling_calls() == compiles.first_call_of_each_mode(), compiles.calls[:12]
    assert ends["before_fill_mask"] == compiles.graphs  # fill-mask ran the uncompiled model
    assert {call[2] for call in compiles.calls} == {(8, 32)}
    train_losses = [loss for _, loss in log.losses]
    assert len(train_losses) == 4 and all(math.isfinite(v) for v in train_losses)
    assert train_losses[-1] < train_losses[0]
    assert math.isfinite(metrics["heldout_loss"]) and metrics["heldout_loss"] < metrics["heldout_loss_initial"]
    assert metrics["hardware"]["device"] == "cuda" and metrics["peak_memory_mib"] > 0
    assert metrics["peak_flops_per_s"] and 0 < metrics["mfu"] < 1, metrics["hardware"]["device_name"]
    assert metrics["train_tokens_per_s"] > 0 and metrics["compile_seconds"] is not None


def test_packed_blocks_run_the_flash_kernel_under_bf16_and_compile():
    """Packed, unpadded blocks (no attention mask) take SDPA's flash kernel in a compiled bf16 training step.
    ``sdpa_kernel([FLASH_ATTENTION])`` allows no other kernel, so SDPA raises, with its reasons as warnings,
    where flash cannot run. The first H200 profile (benchmarks/results/gpu_check/pretrain_profile.txt) showed
    attention as ``bmm`` + a fused softmax, SDPA's math path, about a quarter of the device time: this test
    names the reason."""
    import warnings

    from torch.nn.attention import SDPBackend, sdpa_kernel

    from tasks.pretrain.init import build_model
    from tasks.pretrain.mlm import MaskedOnlyMLM

    preset = {"num_hidden_layers": 2, "hidden_size": 128, "num_attention_heads": 2, "intermediate_size": 256}
    cfg = make_cfg(
        presets={"micro": preset}, max_position_embeddings=128, compile=True, bf16=True, hardware={"device": "cuda"}
    )
    torch._dynamo.reset()
    net = MaskedOnlyMLM(build_model(cfg, 1000, 128, 0).cuda(), compile=True).train()
    ids = torch.randint(5, 1000, (8, 128), device="cuda")
    positions = torch.arange(0, ids.numel(), 7, device="cuda")
    try:
        with warnings.catch_warnings(record=True) as caught, sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
            warnings.simplefilter("always")
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss, _ = net(ids, None, positions, ids.flatten()[positions])
            loss.backward()
    except RuntimeError as err:
        reasons = sorted({str(w.message) for w in caught})
        pytest.fail(f"flash attention refused: {str(err)[:300]}; SDPA's reasons: {reasons}")
    finally:
        torch._dynamo.reset()
    assert torch.isfinite(loss)


def test_the_compiled_training_step_runs_flash_not_the_math_path(tmp_path, no_torchrun_env):
    """One compiled bf16 ``Trainer._step`` as the gpu profile trains (its ``hardware`` section, through
    ``setup_distributed``): every SDPA call it makes meets flash's conditions (``tasks.pretrain.attention``, the CPU
    test's checker), SDPA's own ``can_use_flash_attention(debug=True)`` agrees (its reasons printed and in the
    failure), and a profiled second step shows a fused attention kernel and not the math path (bmm + softmax)."""
    import warnings

    from torch.backends.cuda import SDPAParams, can_use_flash_attention

    from benchmarks._device_time import attention_paths
    from tasks.config import read_yaml
    from tasks.pretrain import attention
    from tasks.pretrain.hardware import setup_distributed
    from tasks.pretrain.init import build_model
    from tasks.pretrain.mlm import MaskingVocab
    from tasks.pretrain.trainer import Trainer

    profile = read_yaml(Path(__file__).resolve().parents[2] / "profiles" / "gpu.yaml")
    preset = {"num_hidden_layers": 2, "hidden_size": 128, "num_attention_heads": 2, "intermediate_size": 256}
    cfg = make_cfg(
        presets={"micro": preset},
        max_position_embeddings=128,
        compile=True,
        bf16=True,
        batch_size_blocks=8,
        hardware={**profile.get("hardware", {}), "device": "cuda"},
    )
    env = setup_distributed(cfg.hardware)
    vocab = MaskingVocab(
        mask_token_id=4,
        special_ids=torch.arange(5),
        random_ids=torch.arange(5, 1000),
        continuation=torch.zeros(1000, dtype=torch.bool),
    )
    ids = torch.randint(5, 1000, (16, 128))
    train = {
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "maskable": ids > 4,
        "source_id": torch.zeros(16, dtype=torch.long),
        "source_names": ["s"],
    }
    torch._dynamo.reset()
    trainer = Trainer(cfg, build_model(cfg, 1000, 128, 0).to(env.device), vocab, train, train, env, NullLog(), tmp_path)
    try:
        with attention.capture() as captured:
            trainer._step([b.to(env.device) for b in trainer._micro_batches(0)])
        refused = []
        for call in set(captured.calls):
            q, k, v = (
                torch.empty_strided(o.shape, o.stride, dtype=o.dtype, device=env.device, requires_grad=True)
                for o in (call.query, call.key, call.value)
            )
            shape = (q.shape[0], 1, q.shape[2], k.shape[2])
            mask = torch.ones(shape, dtype=torch.bool, device=env.device) if call.has_mask else None
            params = SDPAParams(q, k, v, mask, call.dropout_p, call.is_causal, call.enable_gqa)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                if not can_use_flash_attention(params, True):
                    refused.append(f"{call}: {sorted({str(w.message) for w in caught})}")
        with torch.profiler.profile(activities=ACTIVITIES) as prof:
            trainer._step([b.to(env.device) for b in trainer._micro_batches(1)])
            torch.cuda.synchronize()
        paths = attention_paths({event.name for event in prof.events()})
    finally:
        torch.use_deterministic_algorithms(False)
        torch._dynamo.reset()
    ours = attention.report(captured)
    print(
        f"SDPA paths {paths}; compiled graphs {captured.graph_paths}; our checker {ours}; SDPA refused {refused}; "
        f"math-path softmax inputs {captured.math_inputs}; notes {attention.setting_notes()}"
    )
    assert not refused and not ours, f"flash refused: SDPA {refused}; ours {ours}"
    assert paths and "math" not in paths, f"attention ran on {paths or 'no SDPA kernel'}; graphs {captured.graph_paths}"


def test_document_masked_training_runs_flex_attention_on_cuda(tmp_path, no_torchrun_env):
    """``pretrain.document_mask`` on CUDA: a compiled bf16 training step runs FlexAttention (not SDPA's math path),
    and a token's output does not change when another document of its block does (bf16: within its own run)."""
    from benchmarks._device_time import attention_paths
    from tasks.pretrain.attention import with_document_mask
    from tasks.pretrain.init import build_model
    from tasks.pretrain.mlm import MaskingVocab
    from tasks.pretrain.trainer import Trainer

    sep, seq = 3, 256
    preset = {"num_hidden_layers": 2, "hidden_size": 128, "num_attention_heads": 2, "intermediate_size": 256}
    cfg = make_cfg(
        presets={"micro": preset},
        max_position_embeddings=seq,
        compile=True,
        bf16=True,
        batch_size_blocks=8,
        document_mask=True,
        hardware={"device": "cuda"},
    )
    env = setup_distributed(cfg.hardware)
    ids = torch.randint(5, 1000, (16, seq))
    ids[:, 0], ids[:, 100], ids[:, 180] = 2, sep, sep
    train = {
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "maskable": ids > 4,
        "source_id": torch.zeros(16, dtype=torch.long),
        "source_names": ["s"],
    }
    vocab = MaskingVocab(
        mask_token_id=4,
        special_ids=torch.arange(5),
        random_ids=torch.arange(5, 1000),
        continuation=torch.zeros(1000, dtype=torch.bool),
    )
    torch._dynamo.reset()
    model = with_document_mask(build_model(cfg, 1000, seq, 0).to(env.device), sep)
    trainer = Trainer(cfg, model, vocab, train, train, env, NullLog(), tmp_path)
    try:
        loss, _ = trainer._step([b.to(env.device) for b in trainer._micro_batches(0)])
        with torch.profiler.profile(activities=ACTIVITIES) as prof:
            loss, _ = trainer._step([b.to(env.device) for b in trainer._micro_batches(1)])
            torch.cuda.synchronize()
        names = {event.name for event in prof.events()}
        model.eval()
        with torch.no_grad():
            block = ids[:2].to(env.device)
            other = block.clone()
            other[:, 101:180] = torch.randint(5, 1000, (2, 79), device=env.device)
            before, after = (model.base_model(input_ids=b).last_hidden_state for b in (block, other))
    finally:
        torch._dynamo.reset()
    print(
        f"document-masked step: loss {float(loss):.3f}; SDPA paths {attention_paths(names)}; "
        f"flex kernels {sorted(n for n in names if 'flex' in n.lower())[:3]}"
    )
    assert torch.isfinite(loss) and "math" not in attention_paths(names)
    assert "aten::bmm" not in names  # the math path's products (the encoder has no other batched matmul)
    assert torch.equal(before[:, :101], after[:, :101]) and torch.equal(before[:, 181:], after[:, 181:])


class LossLog(NullLog):
    """A run log that keeps the logged train losses ``(step, loss)``."""

    def __init__(self) -> None:
        self.losses: list[tuple[int | None, float]] = []

    def metrics(self, values, step=None) -> None:
        if "train/loss" in values:
            self.losses.append((step, values["train/loss"]))


def test_two_rank_nccl_pretraining_keeps_identical_weights(corpus, tmp_path):
    if torch.cuda.device_count() < 2:
        pytest.skip(f"needs 2 GPUs, torch sees {torch.cuda.device_count()}")
    cfg = make_cfg(
        max_steps=6,
        batch_size_blocks=8,
        nproc_per_node=2,
        log_every_steps=3,
        eval_every_steps=3,
        checkpoint_every_steps=None,
        hardware={"device": "cuda"},
    )
    paths = clone(corpus, tmp_path / "ddp")
    out = tmp_path / "ranks"
    out.mkdir()
    record = textwrap.dedent(f"""
        import json
        from safetensors.torch import save_model
        fit = P.Trainer.fit
        def fit_and_dump(self):
            metrics = fit(self)
            save_model(self.model, {str(out)!r} + f"/rank{{self.env.rank}}.safetensors")
            keep = {{k: metrics[k] for k in ("steps", "hardware", "heldout_loss", "peak_memory_mib")}}
            keep["device"] = str(next(self.model.parameters()).device)
            keep["backend"] = torch.distributed.get_backend()
            open({str(out)!r} + f"/rank{{self.env.rank}}.json", "w").write(json.dumps(keep))
            return metrics
        P.Trainer.fit = fit_and_dump
    """).replace("\n", "\n        ")
    command = [str(TORCHRUN), "--standalone", "--nproc_per_node", "2", str(worker_script(tmp_path, cfg, paths, record))]
    done = subprocess.run(command, env=subprocess_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["device"] for r in ranks] == ["cuda:0", "cuda:1"] and {r["backend"] for r in ranks} == {"nccl"}
    assert all(r["steps"] == 6 and r["hardware"]["world_size"] == 2 and r["peak_memory_mib"] > 0 for r in ranks)
    assert ranks[0]["heldout_loss"] == ranks[1]["heldout_loss"]  # all-reduced sums
    from safetensors.torch import load_file

    r0, r1 = load_file(out / "rank0.safetensors"), load_file(out / "rank1.safetensors")
    assert all(torch.equal(r0[k], r1[k]) for k in r0)


# ----------------------------------------------------------------------------------------------- fine-tuning


@pytest.fixture(scope="module")
def ft_workspace(tmp_path_factory):
    root = tmp_path_factory.mktemp("ft_gpu")
    pretrained = save_tiny_bert(root / "models" / "pretrained", hidden=32, seed=0)
    write_task_data(root / "data", pretrained, "clozeline", FT_DOCS)
    return root


def finetune_on(root: Path, item: str, device: str) -> tuple[dict, dict[str, dict]]:
    """``tasks.finetune.run`` of ``item`` (one arm, one seed, one epoch) on ``device`` in a fresh out folder:
    its metrics and its test predictions by doc id."""
    from tasks.finetune import run

    paths = Paths(data=root / "data", models=root / "models", metrics=root / f"m-{device}", reports=root / "r")
    cfg = tiny_params(["pretrained/full/mean-pool"], ["pretrained/full/first"], [3], epochs=1)
    cfg = cfg.model_copy(update={"hardware": HardwareParams(device=device)})
    metrics = run(cfg, paths, NullLog(), item)
    key = next(iter(metrics["runs"]))
    lines = (paths.data / "finetune" / item / key / "seed3.test.jsonl").read_text().splitlines()
    return metrics, {rec["doc_id"]: rec for rec in map(json.loads, lines)}


def compare_predictions(cpu: dict[str, dict], gpu: dict[str, dict]) -> None:
    """The same docs and the same number of predictions per doc. A cls record holds the whole distribution:
    every doc's probabilities within ``PROB_ATOL`` of the CPU's, so a label may differ only where the CPU's two
    likeliest classes are within ``2 * PROB_ATOL`` (a near-tie; the first H200 run flipped 2 of 8 such docs of
    this one-epoch tiny model). A ner record holds the predicted tag's probability per word: mostly the same
    tags, and where they agree, probabilities within ``PROB_ATOL``."""
    assert sorted(gpu) == sorted(cpu) and len(gpu) > 0
    agree = total = 0
    for doc_id, want in cpu.items():
        got = gpu[doc_id]
        if not isinstance(want["pred"], list):  # cls
            assert got["probs"] == pytest.approx(want["probs"], abs=PROB_ATOL), doc_id
            top2 = sorted(want["probs"], reverse=True)[:2]
            assert got["pred"] == want["pred"] or top2[0] - top2[1] < 2 * PROB_ATOL, (doc_id, want, got)
            continue
        assert len(got["pred"]) == len(want["pred"]) and len(got["probs"]) == len(want["probs"]), doc_id
        agree += sum(a == b for a, b in zip(got["pred"], want["pred"], strict=True))
        total += len(want["pred"])
        if got["pred"] == want["pred"]:
            assert got["probs"] == pytest.approx(want["probs"], abs=PROB_ATOL), doc_id
    assert agree >= MIN_AGREEMENT * total, f"{agree} of {total} ner tags agree"


@pytest.mark.parametrize(("item", "metric"), [("cls", "test_macro_f1"), ("ner", "test_entity_f1")])
def test_finetune_on_cuda_matches_the_cpu_run(ft_workspace, item, metric):
    cpu_metrics, cpu_preds = finetune_on(ft_workspace, item, "cpu")
    gpu_metrics, gpu_preds = finetune_on(ft_workspace, item, "cuda")
    compare_predictions(cpu_preds, gpu_preds)
    (cpu_run,), (gpu_run,) = cpu_metrics["runs"].values(), gpu_metrics["runs"].values()
    assert gpu_run[metric]["mean"] == pytest.approx(cpu_run[metric]["mean"], abs=SCORE_ATOL)


def test_inference_cost_is_timed_on_cuda(tmp_path):
    from tasks.finetune import cls as cls_task
    from tasks.finetune.arms import operational
    from tasks.finetune.arms.model import build_model, save_model

    folder = save_tiny_bert(tmp_path / "bert", hidden=32, seed=0)
    saved = save_model(build_model("random", folder, "mean-pool", 2, "full", 0.1, seed=0), tmp_path / "saved")
    cfg = tiny_params(["random/full/mean-pool"], ["random/full/first"], [3], operational=True)
    tok = BertTokenizerFast.from_pretrained(folder)
    exs = cls_task.examples(cls_rows(tok, 6, "test-"), cfg.recipes["cls"], "mean-pool")
    entry = operational.measure_saved(saved, cls_task.collate, exs, tok.pad_token_id, cfg.operational, "cuda:0")
    assert entry["device"] == "cuda:0" and entry["device_name"] == torch.cuda.get_device_name(0)
    assert entry["peak_allocated_mib"] > 0 and "cpu" not in entry  # cpu_on_gpu_host is off by default
    for size, count in cfg.operational.timed_batches.items():
        timed = entry["batch"][str(size)]
        assert timed["timed_batches"] == count and 0 < timed["p50_ms_per_doc"] <= timed["p95_ms_per_doc"]


# ------------------------------------------------------------------------------------------------- devices


def test_resolve_names_real_gpus_and_refuses_what_is_not_there(no_torchrun_env, monkeypatch):
    n = torch.cuda.device_count()
    assert resolve("cuda") == resolve("auto") == torch.device("cuda", 0)
    assert resolve(f"cuda:{n - 1}") == torch.device("cuda", n - 1)
    assert resolve("cuda", local_rank=n - 1) == torch.device("cuda", n - 1)  # a torchrun rank's own GPU
    with pytest.raises(ValueError, match=rf"^hardware.device: cuda:{n}: GPU {n} asked for, but torch sees {n} "):
        resolve(f"cuda:{n}")
    with pytest.raises(ValueError) as too_many:
        setup_distributed(HardwareParams(device="cuda"), nproc_per_node=n + 1)
    message = str(too_many.value)
    assert "\n" not in message
    assert message.startswith(f"pretrain.nproc_per_node: {n + 1} processes per node, but torch sees {n} GPU(s)")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ValueError, match="names one GPU but torchrun started several ranks"):
        resolve("cuda:0", local_rank=0)
