"""One fine-tuning run: a seeded model, AdamW with warmup and linear decay, early stopping on dev, one test pass.

``train_and_test`` is a pure function of its ``Run`` (job, seed, learning-rate multiplier): it logs nothing and returns
everything (per-epoch history, test records and scores), so runs can go to worker processes and the parent logs them to
MLflow in a fixed order. Torch threads are set per process, so a run's numbers do not depend on where it ran. A run
trains on ``Run.device`` (the scheduler in ``sweep`` picks it): models and batches move with
``tasks.common.runtime.device.place`` and training steps run under its bf16 ``autocast`` on CUDA, and on the CPU when
``Run.cpu_bf16`` is set (``finetune.cpu_train_precision``). Every evaluated prediction (dev after each epoch, test once)
is computed in fp32 on every device (``PREDICTION_PRECISION``: no autocast, and TF32 off on CUDA for the pass,
``tasks.common.runtime.device.fp32_predictions``), the precision the export stage re-scores the shipped model in (fp32
on the CPU), so an exported model's labels are the evaluated ones and the scores reported are those of the fp32 weights
a user loads. The training loop reads no scalar from the device inside an epoch (the losses are summed on the device and
read once per epoch), so the host queues the next step's kernels while the GPU runs this one.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from tqdm import tqdm
from transformers import get_linear_schedule_with_warmup

from tasks.common.runtime.device import autocast, fp32_predictions, place
from tasks.finetune import temperature
from tasks.finetune.arms import frozen
from tasks.finetune.arms.model import build_model, optimizer_for, save_model

#: Variants whose encoder is fully trained (MiniLM, or MiniLM continued): the BERT fine-tuning LR applies.
TRAINED_ENCODERS = ("reference", "adapted")


@dataclass(frozen=True)
class Run:
    """One training run: a job (``tasks.finetune.jobs.Job``), its seed and the multiplier of its learning rates;
    ``save_to``: a folder to save the trained model in (``model.save_model``), for the operational measurement;
    ``device``: where it trains (``cpu``, ``cuda:N``; ``meta`` in the placement tests); ``cpu_bf16``: training
    steps on the CPU under bf16 autocast (``tasks.common.runtime.device.cpu_bf16``); ``score_test``: false for a
    learning-rate sweep run, whose dev score alone is read (``sweep.best_scale``), so it skips the test pass."""

    job: object
    seed: int
    lr_scale: float
    save_to: Path | None = None
    device: str = "cpu"
    cpu_bf16: bool = False
    score_test: bool = True


def is_probe(job) -> bool:
    """A frozen classification arm: a converged logistic-regression probe (``frozen``), not AdamW epochs, so it
    has no learning rate to sweep."""
    return job.spec.mode == "frozen" and job.module == "cls"


def train_and_test(run: Run, show_progress: bool = True) -> dict:
    """Train ``run`` with early stopping on dev and score test once; save the model (best epoch) to
    ``run.save_to`` when set. A frozen classification arm fits a logistic-regression probe instead
    (``frozen.probe_and_test``: same keys, no learning rates, ``probe`` added).

    Returns ``seed``, ``lr_scale``, ``lr_encoder``, ``lr_head``, ``test`` (headline metrics), ``details``,
    ``history`` (per epoch: ``epoch, train_loss, dev_<metric>``), ``test_records`` (with ``probs_scaled``),
    ``temperature`` (``temperature.scale_records`` of the best epoch's dev records), ``train_docs`` (its seed's
    draw: docs, or sentences for ner) and the facts of ``train``. A sweep run (``score_test`` false) returns
    ``seed``, the facts of ``train``, ``train_seconds`` and ``train_docs`` only. The run trains on its seed's draw of
    the train docs (``Job.for_seed``: each seed draws its own subset).
    """
    run = replace(run, job=run.job.for_seed(run.seed))
    job, spec = run.job, run.job.spec
    model = build_model(
        spec.variant, job.folder, spec.head, len(job.labels), spec.mode, job.tcfg.head_dropout, run.seed
    ).to(run.device)
    if is_probe(job):
        return frozen.probe_and_test(model, run)
    started = time.perf_counter()
    fit = train(model, run, show_progress)
    if not run.score_test:  # a sweep run: its training facts and dev scores, no test pass (nor temperature)
        fit.pop("dev_records")
        seconds = round(time.perf_counter() - started, 1)
        return {"seed": run.seed, **fit, "train_seconds": seconds, "train_docs": train_docs(job)}
    test_recs, scores = evaluate(model, job, "test", torch.device(run.device))
    scaling = temperature.scale_records(fit.pop("dev_records"), test_recs, job.labels)
    result = {
        "seed": run.seed,
        "test": job.task.headline(scores),
        "details": job.task.details(scores),
        **fit,
        "train_seconds": round(time.perf_counter() - started, 1),
        "train_docs": train_docs(job),
        "temperature": scaling,
        "test_records": test_recs,
    }
    if run.save_to is not None:
        save_model(model, run.save_to)
    return result


def train_docs(job) -> int:
    """The train docs (cls) or sentences (ner: distinct ``doc_id`` of the windows) a run of ``job`` trains on."""
    return len({ex["doc_id"] for ex in job.exs["train"]})


def learning_rates(run: Run) -> tuple[float, float]:
    """``(encoder LR, head LR)`` of a run: the task's peak LRs times ``run.lr_scale``. MiniLM is a fully
    trained encoder, so it starts from the usual BERT fine-tuning LR rather than our small models' one."""
    tcfg = run.job.tcfg
    base = tcfg.lr_encoder_reference if run.job.spec.variant in TRAINED_ENCODERS else tcfg.lr_encoder
    return base * run.lr_scale, tcfg.lr_head * run.lr_scale


def train(model, run: Run, show_progress: bool) -> dict:
    """AdamW with linear warmup/decay for at most ``max_epochs``; after each epoch the dev score decides
    (early stopping with ``patience_epochs``). Restores the best epoch's weights into ``model``.

    A non-finite training loss stops the run. Returns ``best_epoch``, ``epochs_run``, the best dev score,
    ``dev_chance``, ``diverged`` (non-finite loss, or best dev score <= chance + divergence_margin), the LRs,
    the per-epoch ``history`` and ``dev_records`` (the best epoch's dev predictions, for temperature scaling).
    """
    job = run.job
    tcfg, task, select = job.tcfg, job.task, job.task.SELECT_METRIC
    total_steps = math.ceil(len(job.exs["train"]) / tcfg.batch_size) * tcfg.max_epochs
    lr_encoder, lr_head = learning_rates(run)
    optimizer = optimizer_for(model, lr_encoder, lr_head, tcfg.weight_decay)
    schedule = get_linear_schedule_with_warmup(optimizer, int(tcfg.warmup_fraction * total_steps), total_steps)
    generator = torch.Generator().manual_seed(run.seed)
    best = {"score": -math.inf, "epoch": 0, "state": None, "divergence_score": -math.inf, "records": []}
    finite, epoch, history = True, 0, []
    device = torch.device(run.device)
    for epoch in range(1, tcfg.max_epochs + 1):
        desc = f"{job.key} seed {run.seed} lr x{run.lr_scale:g} epoch {epoch}"
        loss = train_epoch(
            model, job, optimizer, schedule, generator, device, desc if show_progress else None, run.cpu_bf16
        )
        dev_recs, dev = evaluate(model, job, "dev", device)
        history.append({"epoch": epoch, "train_loss": loss, f"dev_{select}": dev[select]})
        finite = math.isfinite(loss)
        if dev[select] > best["score"]:
            best = {
                "score": dev[select],
                "epoch": epoch,
                "divergence_score": task.divergence_score(dev),
                "records": dev_recs,
                "state": {k: v.detach().clone() for k, v in model.state_dict().items()},
            }
        if not finite or epoch - best["epoch"] >= tcfg.patience_epochs:
            break
    model.load_state_dict(best["state"])
    chance = task.chance(job.exs["dev"])
    diverged = not finite or best["divergence_score"] <= chance + tcfg.divergence_margin
    return {
        "lr_scale": run.lr_scale,
        "lr_encoder": lr_encoder,
        "lr_head": lr_head,
        "best_epoch": best["epoch"],
        "epochs_run": epoch,
        f"dev_best_{select}": best["score"],
        "dev_chance": chance,
        "dev_divergence_score": best["divergence_score"],
        "diverged": diverged,
        "history": history,
        "dev_records": best["records"],
    }


def evaluate(model, job, split: str, device: torch.device) -> tuple[list[dict], dict]:
    """Prediction records and scores of ``split`` (``dev`` after each epoch, ``test`` once at the end)."""
    recs = job.task.records(job.exs[split], predict(model, job, job.exs[split], device), job.labels)
    return recs, job.task.score(recs, job.labels)


def train_epoch(
    model, job, optimizer, schedule, generator, device: torch.device, desc: str | None, cpu_bf16: bool = False
) -> float:
    """One shuffled pass (order from ``generator``); returns the mean training loss (nan if it blew up).

    The losses stay on ``device`` until the epoch ends (one host sync per epoch, not per step). A non-finite
    loss turns the epoch's mean into nan, which stops the run after this epoch (``train``). ``desc`` labels the
    progress bar; None hides it (runs in worker processes would interleave their bars). ``cpu_bf16``: see
    ``train_step``.
    """
    model.train()
    exs, tcfg = job.exs["train"], job.tcfg
    batches = length_grouped_batches(
        [len(ex["input_ids"]) for ex in exs], tcfg.batch_size, tcfg.length_group_batches, generator
    )
    total = torch.zeros((), dtype=torch.float64, device=device)
    for batch_idx in tqdm(batches, desc=desc, leave=False, mininterval=5, disable=desc is None):
        batch = place(job.task.collate([exs[i] for i in batch_idx], job.pad_id), device)
        loss = train_step(model, batch, device, cpu_bf16)
        torch.nn.utils.clip_grad_norm_(model.parameters(), tcfg.max_grad_norm)
        optimizer.step()
        schedule.step()
        total += loss.detach()
    return float(total) / len(batches)


def train_step(model, batch: dict[str, torch.Tensor], device: torch.device, cpu_bf16: bool = False) -> torch.Tensor:
    """Forward and backward of one collated ``batch`` already on ``device`` (``input_ids``, ``attention_mask``,
    ``labels``; (batch, seq_len) tensors, labels (batch,) for cls, (batch, seq_len) with -100 for ner); returns
    the mean cross-entropy (nats, a 0-dim tensor on ``device``) and leaves the gradients in the model. The
    forward runs under bf16 autocast on CUDA, and on the CPU with ``cpu_bf16``; the loss is taken in fp32."""
    model.zero_grad(set_to_none=True)
    with autocast(device, cpu=cpu_bf16):
        logits = model(batch["input_ids"], batch["attention_mask"], batch.get("token_type_ids"))
    loss = torch.nn.functional.cross_entropy(
        logits.float().flatten(0, -2), batch["labels"].flatten(), ignore_index=-100
    )
    loss.backward()
    return loss


def length_grouped_batches(lengths: list[int], batch_size: int, group_batches: int, generator) -> list[list[int]]:
    """Shuffled batches of example indices whose members have similar lengths, so little padding is computed.

    A random permutation is cut into groups of ``group_batches * batch_size`` examples, each group is sorted
    by length and cut into batches, and the batches are shuffled (the ``group_by_length`` megabatches of HF
    ``Trainer``). ``group_batches = 1`` is a plain shuffle. Every index appears exactly once.
    """
    order = torch.randperm(len(lengths), generator=generator).tolist()
    span = group_batches * batch_size
    batches = []
    for start in range(0, len(order), span):
        group = sorted(order[start : start + span], key=lambda i: lengths[i])
        batches += [group[i : i + batch_size] for i in range(0, len(group), batch_size)]
    return [batches[i] for i in torch.randperm(len(batches), generator=generator).tolist()]


@torch.inference_mode()
def predict(model, job, exs: list[dict], device: torch.device) -> list:
    """Predictions per example in input order (eval mode, no autograd, fp32: ``fp32_predictions``); batches are
    length-sorted so little padding is computed, which changes no label because padding is masked (only the
    last float bits of a probability)."""
    model.eval()
    order = sorted(range(len(exs)), key=lambda i: len(exs[i]["input_ids"]))
    out: list = [None] * len(exs)
    with fp32_predictions(device):
        for start in range(0, len(order), job.tcfg.batch_size):
            idx = order[start : start + job.tcfg.batch_size]
            batch_exs = [exs[i] for i in idx]
            batch = place(job.task.collate(batch_exs, job.pad_id), device)
            logits = model(batch["input_ids"], batch["attention_mask"], batch.get("token_type_ids"))
            for i, pred in zip(idx, job.task.decode(logits.float().cpu(), batch_exs), strict=True):
                out[i] = pred
    return out
