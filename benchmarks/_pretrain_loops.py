"""The timed loops of ``benchmarks/pretrain.py``: ours (the stage's ``Trainer`` pieces, ``measure_stage``) and HF
``Trainer`` (``measure_hf_trainer``) on the same packed blocks, each run in its own worker process, and the
``pretrain`` params they share (``stage_config``); see pretrain.py's docstring for what is counted and how."""

from __future__ import annotations

import time
from pathlib import Path

from benchmarks._device_time import profile_steps, sync

ROOT = Path(__file__).resolve().parents[1]
#: HF Trainer's loader processes on CUDA (``dataloader_num_workers``), persistent across its epochs.
DATALOADER_WORKERS = 4


def stage_config(preset: str, batch: int, mlm_probability: float, device: str):
    """The real ``pretrain`` params section with size/batch/masking/device overridden (no eval, no checkpoints);
    on CUDA bf16 autocast and ``torch.compile``, as the gpu profile sets them."""
    from tasks.config import read_yaml
    from tasks.config.model.pretrain import PretrainParams

    raw = read_yaml(ROOT / "params.yaml")["pretrain"]
    cuda = device.startswith("cuda")
    raw.update(
        size=preset,
        batch_size_blocks=batch,
        grad_accum_steps=1,
        max_steps=10**6,
        budget_minutes=None,
        train_tokens=None,
        mlm_probability=mlm_probability,
        bf16=cuda,
        compile=cuda or raw["compile"],
        checkpoint_every_steps=None,
        checkpoint_every_minutes=None,
        nproc_per_node=1,
        hardware={"device": device, "deterministic": False},
    )
    return PretrainParams.model_validate(raw)


def measure_stage(data: Path, cfg, warmup: int, steps: int, profile: Path | None = None) -> dict:
    """The stage's loop pieces as ``Trainer._loop`` runs them: the next step's masked micro-batches built on the
    ``Prefetcher`` thread (pinned, ``non_blocking`` copies on CUDA), the step's lr, ``Trainer._step``. Timed by
    ``Throughput``: a window of ``warmup`` steps (compilation, autotuning), then one of ``steps``; with
    ``profile``, ``PROFILE_STEPS`` more steps under ``torch.profiler`` (``profile_steps``), untimed."""
    import torch
    from transformers import AutoTokenizer

    from tasks.pretrain.attention import with_document_mask
    from tasks.pretrain.blocks import load_blocks
    from tasks.pretrain.feed import Prefetcher
    from tasks.pretrain.hardware import Throughput, setup_distributed, train_flops_per_token
    from tasks.pretrain.init import build_model
    from tasks.pretrain.mlm import MaskingVocab
    from tasks.pretrain.trainer import Trainer
    from tasks.tracking import NullLog

    env = setup_distributed(cfg.hardware)
    torch.manual_seed(cfg.seed)
    tok = AutoTokenizer.from_pretrained(data / "models" / "tokenizer")
    train = load_blocks(data / "data" / "tokenize" / "pretrain" / "clozeline" / "train")
    seq_len = train["input_ids"].shape[1]
    model = build_model(cfg, len(tok), seq_len, tok.pad_token_id).to(env.device)
    if cfg.document_mask:  # --document-mask: attention within each document (tasks/pretrain/attention.py)
        with_document_mask(model, tok.sep_token_id)
    trainer = Trainer(cfg, model, MaskingVocab.from_tokenizer(tok), train, train, env, NullLog(), data / "ckpt")
    feed, clock = Prefetcher(trainer._micro_batches, env.device), Throughput(cfg.batch_size_blocks * seq_len)
    sync(env.device)
    clock.start()
    started, first_step_s, cpu_start = time.perf_counter(), None, 0.0

    def one_step() -> None:
        for group in trainer.optimizer.param_groups:
            group["lr"] = trainer._lr()
        trainer._step(feed.get(trainer.state["step"]))
        trainer.state["step"] += 1

    try:
        for i in range(warmup + steps):
            one_step()
            if i == 0:
                sync(env.device)
                first_step_s = time.perf_counter() - started
            if i + 1 == warmup:
                sync(env.device)
                clock.lap(warmup)
                cpu_start = time.process_time()
        sync(env.device)
        clock.lap(steps)
        cpu_s = time.process_time() - cpu_start
        if profile:
            profile_steps(one_step, env.device, profile)
    finally:
        feed.close()
    timed = clock.summary()
    return {
        "tokens_per_s": timed["train_tokens_per_s"],
        "tokens_per_cpu_s": steps * clock.tokens_per_step / cpu_s,
        "first_step_seconds": first_step_s,
        "compile_seconds": timed["compile_seconds"],
        "compile": cfg.compile,
        "flops_per_token": train_flops_per_token(model, seq_len, cfg.mlm_probability),
    }


def measure_hf_trainer(data: Path, cfg, warmup: int, steps: int) -> dict:
    """HF ``Trainer`` + ``DataCollatorForLanguageModeling``, same model, batch and precision (ModernBERT: logits
    at the masked positions only, ``sparse_prediction``; other architectures have no such switch: full-vocabulary
    logits): ``warmup + steps`` optimizer steps, the last ``steps`` timed (a synchronize, then the clock, at each
    step end). On CUDA as HF's performance guides set it up: ``torch_compile=True`` when ours compiles
    (``cfg.compile``; it compiles in the first steps, before the clock starts at ``warmup``), and the collator
    (padding and masking) in ``DATALOADER_WORKERS`` persistent loader processes, in parallel with the GPU as our
    ``Prefetcher`` thread is; ``tokens_per_cpu_s`` then counts this process only, not those workers. On CPU
    neither: no compile (ours does not) and the collator in this process (workers would take cores from the
    step)."""
    import torch
    from datasets import load_from_disk
    from transformers import AutoTokenizer, DataCollatorForLanguageModeling, Trainer, TrainerCallback, TrainingArguments

    from tasks.pretrain.hardware import train_flops_per_token
    from tasks.pretrain.init import build_model

    device = torch.device(cfg.hardware.device)
    torch.manual_seed(cfg.seed)
    tok = AutoTokenizer.from_pretrained(data / "models" / "tokenizer")
    train = load_from_disk(str(data / "data" / "tokenize" / "pretrain" / "clozeline" / "train"))
    seq_len = len(train[0]["input_ids"])
    model = build_model(cfg, len(tok), seq_len, tok.pad_token_id)
    sparse = hasattr(model, "sparse_prediction")  # ModernBertForMaskedLM reads it in forward
    if sparse:
        model.sparse_prediction = model.config.sparse_prediction = True
    stamps: list[tuple[float, float]] = []  # after 0, 1, 2, ... steps

    class Clock(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            sync(device)
            stamps.append((time.perf_counter(), time.process_time()))

        on_step_end = on_train_begin

    cuda = device.type == "cuda"
    args = TrainingArguments(
        output_dir=str(data / "hf_trainer"),
        per_device_train_batch_size=cfg.batch_size_blocks,
        max_steps=warmup + steps,
        learning_rate=cfg.lr,
        save_strategy="no",
        report_to=[],
        seed=cfg.seed,
        bf16=cuda and cfg.bf16,
        tf32=True if cuda else None,  # as the stage
        use_cpu=device.type == "cpu",
        disable_tqdm=True,
        torch_compile=cuda and cfg.compile,
        dataloader_num_workers=DATALOADER_WORKERS if cuda else 0,
        dataloader_persistent_workers=cuda,
    )
    collator = DataCollatorForLanguageModeling(tok, mlm_probability=cfg.mlm_probability)
    Trainer(model=model, args=args, train_dataset=train, data_collator=collator, callbacks=[Clock()]).train()
    tokens = steps * cfg.batch_size_blocks * seq_len
    (wall0, cpu0), (wall1, cpu1) = stamps[warmup], stamps[warmup + steps]
    return {
        "tokens_per_s": tokens / (wall1 - wall0),
        "tokens_per_cpu_s": tokens / (cpu1 - cpu0),
        "first_step_seconds": stamps[1][0] - stamps[0][0],
        "compile_seconds": None,
        "compile": args.torch_compile,
        "dataloader_num_workers": args.dataloader_num_workers,
        "flops_per_token": train_flops_per_token(model, seq_len, cfg.mlm_probability),
        "sparse_prediction": sparse,
    }
