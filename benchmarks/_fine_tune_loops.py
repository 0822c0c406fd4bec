"""The timed loops of ``benchmarks/fine_tune.py``: ours (``training.train_epoch`` / ``training.predict``) and HF
``Trainer`` (``train`` / ``predict``) on the same job, each measured in its own worker process; see fine_tune.py's
docstring for what is counted and how."""

from __future__ import annotations

import dataclasses
import inspect
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SEED, LR_SCALE = 13, 1.0


def cpu_precision() -> bool:
    """Whether the stage's CPU training steps run in bf16 here (``finetune.cpu_train_precision`` of params.yaml)."""
    from tasks.common.runtime.device import cpu_bf16
    from tasks.config import read_yaml

    return cpu_bf16(read_yaml(ROOT / "params.yaml")["finetune"].get("cpu_train_precision", "fp32"))


def _optional(fn, **kwargs) -> dict:
    """The ``kwargs`` that ``fn`` accepts: ``train_epoch``/``predict`` take a ``device`` since the device commit."""
    return {k: v for k, v in kwargs.items() if k in inspect.signature(fn).parameters}


def _sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize()


def _clock(device) -> tuple[float, float]:
    _sync(device)
    return time.perf_counter(), time.process_time()


def measure_ours(job, device, warmup: int, steps: int, eval_docs: int, profile: str | None) -> dict:
    """Train tokens/s of ``training.train_epoch`` over ``steps`` batches and eval docs/s of ``training.predict``."""
    import torch
    from transformers import get_linear_schedule_with_warmup

    from tasks.finetune.arms import training
    from tasks.finetune.arms.model import build_model, optimizer_for

    tcfg, bs = job.tcfg, job.tcfg.batch_size
    fields = {f.name for f in dataclasses.fields(training.Run)}
    run = training.Run(job, SEED, LR_SCALE, **({"device": str(device)} if "device" in fields else {}))
    model = build_model(
        job.spec.variant, job.folder, job.spec.head, len(job.labels), job.spec.mode, tcfg.head_dropout, SEED
    ).to(device)
    lr_encoder, lr_head = training.learning_rates(run)
    optimizer = optimizer_for(model, lr_encoder, lr_head, tcfg.weight_decay)
    total = warmup + steps
    schedule = get_linear_schedule_with_warmup(optimizer, int(tcfg.warmup_fraction * total), total)
    generator = torch.Generator().manual_seed(SEED)
    train = job.exs["train"]
    warm_job = dataclasses.replace(job, exs={**job.exs, "train": train[: warmup * bs]})
    timed_job = dataclasses.replace(job, exs={**job.exs, "train": train[: steps * bs]})
    extra = _optional(training.train_epoch, device=device, cpu_bf16=cpu_precision())
    training.train_epoch(model, warm_job, optimizer, schedule, generator, desc=None, **extra)
    profiler = _profiler(profile)
    start = _clock(device)
    loss = training.train_epoch(model, timed_job, optimizer, schedule, generator, desc=None, **extra)
    end = _clock(device)
    evals = job.exs["test"][:eval_docs]
    extra = _optional(training.predict, device=device)
    training.predict(model, job, evals[:bs], **extra)
    eval_start = _clock(device)
    training.predict(model, job, evals, **extra)
    eval_end = _clock(device)
    _dump(profiler, profile)
    tokens = sum(len(ex["input_ids"]) for ex in timed_job.exs["train"])
    return _figures(tokens, steps, start, end, len(evals), eval_start, eval_end, loss)


def for_trainer(model):
    """The module HF ``Trainer`` drives: ``model`` (an ``EncoderWithHead``) with ``forward(input_ids,
    attention_mask, labels, token_type_ids) -> {"loss", "logits"}`` (mean cross-entropy over the batch, as ours)."""
    import torch

    class ForTrainer(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.model = inner

        def forward(self, input_ids, attention_mask, labels=None, token_type_ids=None):
            logits = self.model(input_ids, attention_mask, token_type_ids)
            out = {"logits": logits}
            if labels is not None:
                out["loss"] = torch.nn.functional.cross_entropy(logits, labels)
            return out

    return ForTrainer(model)


def trainer_dataset(exs: list[dict]):
    """A ``datasets.Dataset`` of cls examples as HF ``Trainer`` reads them: ``input_ids``, ``attention_mask``,
    ``labels``."""
    from datasets import Dataset

    return Dataset.from_list(
        [
            {"input_ids": ex["input_ids"], "attention_mask": [1] * len(ex["input_ids"]), "labels": ex["label"]}
            for ex in exs
        ]
    )


def by_length(exs: list[dict]) -> list[dict]:
    """The examples sorted by length: what a user does before ``Trainer.predict`` so that its per-batch padding
    is short (ours predicts length-sorted too, ``training.predict``); scores do not depend on the order."""
    return sorted(exs, key=lambda ex: len(ex["input_ids"]))


def two_rate_trainer(lr_encoder: float, lr_head: float, weight_decay: float):
    """A ``Trainer`` subclass whose optimizer is Trainer's own class and kwargs (``args.optim``) over our parameter
    groups and LRs (``decay_groups`` of the encoder at ``lr_encoder`` and of the head at ``lr_head``; a frozen
    encoder has no trainable parameters, so only the head's groups remain)."""
    from transformers import Trainer

    from tasks.common.models.optim import decay_groups

    class TwoRateTrainer(Trainer):
        def create_optimizer(self, model=None):
            if self.optimizer is None:
                cls, kwargs = self.get_optimizer_cls_and_kwargs(self.args, self.model)
                kwargs = {k: v for k, v in kwargs.items() if k != "lr"}
                inner = self.model.model
                groups = decay_groups(inner.encoder, weight_decay, lr=lr_encoder)
                self.optimizer = cls(groups + decay_groups(inner.head, weight_decay, lr=lr_head), **kwargs)
            return self.optimizer

    return TwoRateTrainer


def measure_hf_trainer(
    job, device, warmup: int, steps: int, eval_docs: int, profile: str | None, bf16: bool = False
) -> dict:
    """Train tokens/s of HF ``Trainer.train`` over its last ``steps`` optimizer steps and eval docs/s of
    ``Trainer.predict``, on the same model, docs, batch size, LRs and clipping; ``bf16``: ``bf16=True`` (autocast)
    on the CPU (on CUDA always)."""
    from transformers import DataCollatorWithPadding, TrainerCallback, TrainingArguments

    from tasks.common.models.encoders import load_tokenizer
    from tasks.finetune.arms import training
    from tasks.finetune.arms.model import build_model

    tcfg, bs = job.tcfg, job.tcfg.batch_size
    model = build_model(
        job.spec.variant, job.folder, job.spec.head, len(job.labels), job.spec.mode, tcfg.head_dropout, SEED
    )
    lr_encoder, lr_head = training.learning_rates(training.Run(job, SEED, LR_SCALE))

    padding, counts, stamps = DataCollatorWithPadding(load_tokenizer(job.folder)), [], []

    def collate(features):  # the stock collator; counts each batch's non-pad tokens (in batch order)
        batch = padding(features)
        counts.append(int(batch["attention_mask"].sum()))
        return batch

    class Clock(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            stamps.append(_clock(device))

    total = warmup + steps
    with tempfile.TemporaryDirectory(prefix="bench-ft-hf-") as tmp:
        args = TrainingArguments(
            output_dir=tmp,
            per_device_train_batch_size=bs,
            per_device_eval_batch_size=bs,
            max_steps=total,
            learning_rate=lr_encoder,
            weight_decay=tcfg.weight_decay,
            lr_scheduler_type="linear",
            warmup_steps=int(tcfg.warmup_fraction * total),
            max_grad_norm=tcfg.max_grad_norm,
            seed=SEED,
            save_strategy="no",
            eval_strategy="no",
            report_to=[],
            disable_tqdm=True,
            dataloader_num_workers=0,
            # batches of similar lengths, as ours (length_grouped_batches): a user who pads per batch turns it on
            train_sampling_strategy="group_by_length",
            use_cpu=device.type == "cpu",
            bf16=bf16 or device.type == "cuda",  # ours runs bf16 autocast on CUDA
        )
        trainer = two_rate_trainer(lr_encoder, lr_head, tcfg.weight_decay)(
            model=for_trainer(model),
            args=args,
            data_collator=collate,
            callbacks=[Clock()],
            train_dataset=trainer_dataset(job.exs["train"][: steps * bs]),
        )
        profiler = _profiler(profile)
        loss = trainer.train().training_loss
        evals = trainer_dataset(by_length(job.exs["test"][:eval_docs]))
        trainer.predict(evals.select(range(bs)))
        eval_start = _clock(device)
        trainer.predict(evals)
        eval_end = _clock(device)
        _dump(profiler, profile)
    tokens = sum(counts[warmup:total])
    figures = _figures(tokens, steps, stamps[warmup - 1], stamps[total - 1], len(evals), eval_start, eval_end, loss)
    return figures | {"optim": str(args.optim)}


def hf_trainer_run(job, device, seed: int, lr_scale: float, bf16: bool) -> dict:
    """One configuration run as a user's HF ``Trainer`` script does it: a fresh ``Trainer`` over a fresh model
    (``build_model``, as the stage builds it for this arm and seed) on seed ``seed``'s train docs
    (``job.for_seed``), the stage's LRs times ``lr_scale`` (``training.learning_rates``), batch size, at most
    ``max_epochs`` epochs, linear warmup/decay over the same steps, clipping and weight decay; dev scored after
    every epoch (``eval_strategy="epoch"``, macro-F1 in ``compute_metrics``: cls's ``SELECT_METRIC``, the
    stage's dev metric) and stopped as ours stops (``training.train``): Trainer's ``EarlyStoppingCallback`` with
    the stage's ``patience_epochs`` (a run ends after that many epochs without a better dev macro-F1), and the
    best epoch's weights restored (``load_best_model_at_end``, which needs a checkpoint an epoch:
    ``save_strategy="epoch"``, ``save_total_limit=1``, ``save_only_model``, as no run is resumed), then one
    ``predict`` on test. ``bf16``: Trainer's ``bf16=True`` (autocast for training and evaluation). A frozen arm
    trains its head with AdamW (the encoder has no gradients), the Trainer way to fit a head on a frozen encoder:
    no cached features. Returns the wall seconds from model construction to the test predictions (checkpoint
    saves and the best model's reload included), the epochs run and the dev/test macro-F1."""
    import math

    import numpy as np
    from sklearn.metrics import f1_score
    from transformers import DataCollatorWithPadding, EarlyStoppingCallback, PrinterCallback, TrainingArguments

    from tasks.common.models.encoders import load_tokenizer
    from tasks.finetune.arms import training
    from tasks.finetune.arms.model import build_model

    started = _clock(device)[0]
    job = job.for_seed(seed)
    tcfg, bs, spec = job.tcfg, job.tcfg.batch_size, job.spec
    model = build_model(spec.variant, job.folder, spec.head, len(job.labels), spec.mode, tcfg.head_dropout, seed)
    lr_encoder, lr_head = training.learning_rates(training.Run(job, seed, lr_scale))
    total = math.ceil(len(job.exs["train"]) / bs) * tcfg.max_epochs

    def macro_f1(pred) -> dict:
        return {"macro_f1": f1_score(pred.label_ids, np.argmax(pred.predictions, -1), average="macro")}

    with tempfile.TemporaryDirectory(prefix="bench-ft-hf-run-") as tmp:
        args = TrainingArguments(
            output_dir=tmp,
            per_device_train_batch_size=bs,
            per_device_eval_batch_size=bs,
            num_train_epochs=tcfg.max_epochs,
            learning_rate=lr_encoder,
            weight_decay=tcfg.weight_decay,
            lr_scheduler_type="linear",
            warmup_steps=int(tcfg.warmup_fraction * total),
            max_grad_norm=tcfg.max_grad_norm,
            seed=seed,
            eval_strategy="epoch",
            save_strategy="epoch",
            save_total_limit=1,
            save_only_model=True,
            load_best_model_at_end=True,
            metric_for_best_model="macro_f1",
            greater_is_better=True,
            report_to=[],
            disable_tqdm=True,
            dataloader_num_workers=0,
            train_sampling_strategy="group_by_length",
            use_cpu=device.type == "cpu",
            bf16=bf16,
        )
        trainer = two_rate_trainer(lr_encoder, lr_head, tcfg.weight_decay)(
            model=for_trainer(model),
            args=args,
            data_collator=DataCollatorWithPadding(load_tokenizer(job.folder)),
            train_dataset=trainer_dataset(job.exs["train"]),
            eval_dataset=trainer_dataset(by_length(job.exs["dev"])),
            compute_metrics=macro_f1,
            callbacks=[EarlyStoppingCallback(early_stopping_patience=tcfg.patience_epochs)],
        )
        trainer.remove_callback(PrinterCallback)  # its per-epoch dicts on stdout; log_history keeps them
        trainer.train()
        test = trainer.predict(trainer_dataset(by_length(job.exs["test"])))
    ended = _clock(device)[0]
    dev = [row["eval_macro_f1"] for row in trainer.state.log_history if "eval_macro_f1" in row]
    return {
        "arm": job.key,
        "seed": seed,
        "lr_scale": lr_scale,
        "seconds": ended - started,
        "epochs_run": len(dev),
        "dev_best_macro_f1": max(dev, default=None),
        "test_macro_f1": test.metrics.get("test_macro_f1"),
    }


def _figures(tokens, steps, start, end, docs, eval_start, eval_end, loss) -> dict:
    """Throughputs from ``(wall s, process CPU s)`` clock pairs: train tokens/s and eval docs/s."""
    return {
        "train_steps": steps,
        "train_tokens": tokens,
        "train_loss": float(loss),
        "train_tokens_per_s": tokens / (end[0] - start[0]),
        "train_tokens_per_cpu_s": tokens / (end[1] - start[1]),
        "eval_docs": docs,
        "eval_docs_per_s": docs / (eval_end[0] - eval_start[0]),
        "eval_docs_per_cpu_s": docs / (eval_end[1] - eval_start[1]),
    }


def _profiler(path: str | None):
    """A started ``cProfile.Profile`` when ``path`` is set (``--profile``), else None."""
    if not path:
        return None
    import cProfile

    profiler = cProfile.Profile()
    profiler.enable()
    return profiler


def _dump(profiler, path: str | None) -> None:
    if profiler is not None:
        profiler.disable()
        profiler.dump_stats(path)
