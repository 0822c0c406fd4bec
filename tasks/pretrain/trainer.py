"""The MLM training loop of ``pretrain``: data order, masking, AdamW steps, held-out evaluation, checkpoints,
throughput and MFU, and metric logging. The process group and hardware peaks are ``tasks.pretrain.hardware``.

Masking and the masked-only loss are ``tasks.pretrain.mlm``; checkpoint files ``tasks.pretrain.checkpoint``.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from contextlib import nullcontext
from functools import lru_cache
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from tqdm import tqdm

from tasks.common.imports import ROOT, code_sha256, import_closure
from tasks.common.optim import decay_groups
from tasks.pretrain import checkpoint
from tasks.pretrain.hardware import Dist, hardware, peak_flops, train_flops_per_token
from tasks.pretrain.mlm import IGNORE_INDEX, MaskedOnlyMLM, mask_tokens, unigram_log_probs

#: Params that do not change the trained weights: a checkpoint made under other values is still resumed.
NOT_IN_FINGERPRINT = {"fill_mask", "fill_mask_top_k", "log_every_steps", "eval_every_steps", "checkpoint_every_steps",
                      "checkpoint_every_minutes", "compile", "num_threads", "nproc_per_node", "nnodes", "rdzv_endpoint",
                      "rdzv_id", "hardware"}  # fmt: skip


def _sha256(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


def pretrain_code_files() -> set[Path]:
    """The code that makes the weights: every project file ``tasks.pretrain`` imports, transitively
    (``tasks.common.imports``), except ``tasks/config`` (params enter the fingerprint by value)."""
    config = ROOT / "tasks" / "config"
    return {f for f in import_closure(["tasks.pretrain"]) if config not in f.parents}


@lru_cache(maxsize=1)
def pretrain_code_sha256() -> str:
    """sha256 of ``pretrain_code_files``: an edit to the masking or the loop never resumes a checkpoint the
    old code wrote."""
    return code_sha256(pretrain_code_files())


def count_params(model: torch.nn.Module) -> int:
    """Number of distinct parameters (tied weights counted once)."""
    return sum(p.numel() for p in model.parameters())


def lr_factor(progress: float, warmup_fraction: float, schedule: str) -> float:
    """Multiplier of the peak lr at ``progress`` in [0, 1]: linear warmup, then linear or cosine decay to 0."""
    if progress < warmup_fraction:
        return progress / warmup_fraction
    rest = min(1.0, (progress - warmup_fraction) / max(1e-12, 1.0 - warmup_fraction))
    return 1.0 - rest if schedule == "linear" else 0.5 * (1.0 + math.cos(math.pi * rest))


#: Columns of the held-out sums that ``Trainer.evaluate`` adds up per source (and over ranks).
EVAL_SUMS = ("loss_sum", "masked_tokens", "correct", "unigram_nll_sum", "unigram_correct", "blocks")


def eval_summary(sums: torch.Tensor) -> dict[str, float]:
    """Means from one row of ``EVAL_SUMS``: loss and unigram cross-entropy (nats per masked token),
    accuracies, and the counts they rest on."""
    loss_sum, n, correct, unigram_nll, unigram_correct, blocks = sums.tolist()
    n_safe = max(n, 1.0)
    return {
        "loss": loss_sum / n_safe,
        "accuracy": correct / n_safe,
        "unigram_ce": unigram_nll / n_safe,
        "unigram_accuracy": unigram_correct / n_safe,
        "masked_tokens": int(n),
        "blocks": int(blocks),
    }


class Trainer:
    """The training loop: data order, masking, AdamW steps, evaluation, checkpoints and metric logging."""

    def __init__(self, cfg, model, vocab, train, heldout, env: Dist, log, ckpt_dir: Path) -> None:
        self.cfg, self.model, self.vocab, self.env, self.log = cfg, model, vocab, env, log
        self.train, self.heldout, self.ckpt_dir = train, heldout, ckpt_dir
        ids = train["input_ids"].numpy()  # hashed once: every checkpoint's fingerprint needs it
        self.data_sha256 = _sha256([list(ids.shape), hashlib.sha256(ids.tobytes()).hexdigest()])
        if env.world > 1:  # before DDP, whose own check of the model shapes says less
            self._same_run_on_every_rank()
        self.inner = MaskedOnlyMLM(model)
        self.net = self._wrap(self.inner)
        # fused: one kernel for all tensors, on CPU too (5x faster than the per-tensor loop in finetune)
        self.optimizer = torch.optim.AdamW(
            decay_groups(model, cfg.weight_decay), lr=cfg.lr, betas=cfg.adam_betas, eps=cfg.adam_eps, fused=True
        )
        self.unigram = unigram_log_probs(train["input_ids"], train["maskable"], vocab).float()
        self.unigram_argmax = int(self.unigram.argmax())
        self.seq_len = train["input_ids"].shape[1]
        self.global_batch = env.world * cfg.batch_size_blocks * cfg.grad_accum_steps
        if self.global_batch > len(train["input_ids"]):
            raise ValueError(f"a step needs {self.global_batch} blocks but train has {len(train['input_ids'])}")
        self.flops_per_token = train_flops_per_token(model, self.seq_len, cfg.mlm_probability)
        self.peak = peak_flops(env.device, cfg.bf16)
        self.state: dict[str, Any] = {"step": 0, "epoch": 0, "position": 0, "elapsed_s": 0.0, "curve": []}
        self.snapshot_steps = sorted({round(f * cfg.max_steps) for f in cfg.dose_snapshot_fractions})

    def _wrap(self, net: torch.nn.Module) -> torch.nn.Module:
        if self.cfg.compile:
            net.mlm.base_model.compile()
        if self.env.world > 1:
            ids = [self.env.device.index] if self.env.device.type == "cuda" else None
            # the buffers (position ids) are constants: broadcasting them each forward only costs time
            return torch.nn.parallel.DistributedDataParallel(net, device_ids=ids, forward_sync_buffers=False)
        return net

    @property
    def curve(self) -> list[list[float]]:
        """Rows ``[step, train_loss, lr, eval_loss]`` (``nan`` where not measured)."""
        return self.state["curve"]

    def fit(self) -> dict[str, Any]:
        """Resume if possible, train to ``max_steps`` (or the budget), evaluate; returns the metrics."""
        resumed_from = self._resume()
        if resumed_from == 0:
            self.state["heldout_loss_initial"] = self.evaluate()["loss"]
            self._snapshot_if_due(0)
        tokens_per_s = self._loop()
        final = self.evaluate()
        self._record(self.state["step"], float("nan"), self._step_lr(), final["loss"])
        self._checkpoint()
        metrics = {
            "heldout_loss_initial": self.state["heldout_loss_initial"],
            "heldout_loss": final["loss"],
            "heldout_perplexity": math.exp(min(final["loss"], 50.0)),
            "heldout_mlm_accuracy": final["accuracy"],
            "heldout_unigram_ce": final["unigram_ce"],
            "heldout_unigram_accuracy": final["unigram_accuracy"],
            "heldout_gap_to_unigram_nats": final["unigram_ce"] - final["loss"],
            "heldout_masked_tokens": final["masked_tokens"],
            "heldout_by_source": final["by_source"],
            "steps": self.state["step"],
            "resumed_from_step": resumed_from,
            "train_tokens_per_s": tokens_per_s,
            "train_minutes": self.state["elapsed_s"] / 60,
            "n_params": count_params(self.model),
            "train_blocks": len(self.train["input_ids"]),
            "heldout_blocks": len(self.heldout["input_ids"]),
            "seq_len_tokens": self.seq_len,
            "hardware": hardware(self.env),
        }
        metrics["peak_flops_per_s"] = self.peak  # null: CPU or a GPU not in hardware.GPU_PEAKS (MFU unknown)
        metrics["mfu"] = tokens_per_s * self.flops_per_token / (self.peak * self.env.world) if self.peak else None
        return metrics

    def _fingerprint(self) -> dict[str, str]:
        """sha256 of each thing the trained weights depend on: params, number of processes, the train blocks
        and the code (``pretrain_code_sha256``). A checkpoint resumes only if all four match."""
        params = self.cfg.model_dump(mode="json", exclude=NOT_IN_FINGERPRINT)
        return {
            "params": _sha256(params),
            "world": _sha256(self.env.world),
            "data": self.data_sha256,
            "code": pretrain_code_sha256(),
        }

    def _same_run_on_every_rank(self) -> None:
        """Raise ``ValueError`` on every rank if a rank has other params, train blocks or code than rank 0: nodes
        started from different checkouts would otherwise train one model on mismatched settings."""
        digest = int(_sha256(self._fingerprint())[:15], 16)  # 60 bits: fits an int64 tensor
        mine = torch.tensor([digest], dtype=torch.int64, device=self.env.device)
        every = [torch.zeros_like(mine) for _ in range(self.env.world)]
        dist.all_gather(every, mine)
        differ = [rank for rank, theirs in enumerate(every) if int(theirs) != int(every[0])]
        if differ:
            raise ValueError(f"pretrain: ranks {differ} have other params.yaml pretrain values, train blocks or code "
                             "than rank 0: start every node from the same checkout and data")  # fmt: skip

    def _resume(self) -> int:
        path = checkpoint.latest(self.ckpt_dir)
        if path is None:
            return 0
        saved = checkpoint.read_state(path).get("fingerprint")
        current = self._fingerprint()
        changed = sorted(k for k in current if not isinstance(saved, dict) or saved.get(k) != current[k])
        if changed:
            self.log.info(f"pretrain: not resuming {path}: made with other {', '.join(changed)}; starting afresh")
            if self.env.main:
                checkpoint.clear(self.ckpt_dir)
            return 0
        state = checkpoint.load(path, self.model, self.optimizer, self.env.device)
        torch.set_rng_state(state.pop("torch_rng"))
        if self.env.device.type == "cuda" and "cuda_rng" in state:
            torch.cuda.set_rng_state(state.pop("cuda_rng"), self.env.device)
        state.pop("fingerprint", None)
        self.state.update(state)
        self.log.info(f"pretrain: resumed from {path} at step {self.state['step']}")
        return self.state["step"]

    def _checkpoint(self) -> None:
        if not self.env.main:
            return
        state = {**self.state, "fingerprint": self._fingerprint(), "torch_rng": torch.get_rng_state()}
        if self.env.device.type == "cuda":
            state["cuda_rng"] = torch.cuda.get_rng_state(self.env.device)
        checkpoint.save(self.ckpt_dir, self.state["step"], self.model, self.optimizer, state)

    def _snapshot_if_due(self, step: int) -> None:
        """Save the model at a dose-response step into ``<ckpt_dir>/snapshots/step_<N>`` (``save_pretrained``;
        kept with the checkpoints, so a killed run still has the snapshots it passed when it resumes)."""
        if step in self.snapshot_steps and self.env.main:
            self.model.save_pretrained(checkpoint.snapshot_dir(self.ckpt_dir, step))

    def _progress(self, steps_done: float | None = None) -> float:
        """Fraction of the run done after ``steps_done`` steps (default: those taken so far); with a budget,
        whichever of steps and the clock is further along."""
        steps = self.state["step"] if steps_done is None else steps_done
        by_steps = min(1.0, steps / self.cfg.max_steps)
        if self.cfg.budget_minutes is None:
            return by_steps
        return max(by_steps, min(1.0, self.state["elapsed_s"] / (60 * self.cfg.budget_minutes)))

    def _lr(self) -> float:
        """Learning rate of the step being taken, read at the step's midpoint: the first step of warmup and
        the last of the decay both move the weights (at the step's start, step 1 would run at LR 0, as HF's
        ``get_linear_schedule_with_warmup`` does; at its end, the last step would)."""
        progress = self._progress(self.state["step"] + 0.5)
        return self.cfg.lr * lr_factor(progress, self.cfg.warmup_fraction, self.cfg.lr_schedule)

    def _step_lr(self) -> float:
        """The learning rate the last step ran at (what the curve and MLflow show)."""
        return float(self.optimizer.param_groups[0]["lr"])

    def _done(self) -> bool:
        finished = self.state["step"] >= self.cfg.max_steps or self._progress() >= 1.0
        done = torch.tensor(float(finished), device=self.env.device)
        if self.env.world > 1:  # the clock of rank 0 decides, so all ranks stop together
            dist.broadcast(done, src=0)
        return bool(done)

    def _loop(self) -> float:
        cfg = self.cfg
        bar = tqdm(total=cfg.max_steps, initial=self.state["step"], desc="pretrain", disable=not self.env.main)
        last_ckpt, tokens, train_s, window = time.monotonic(), 0, 0.0, []
        while not self._done():
            start = time.monotonic()
            for group in self.optimizer.param_groups:
                group["lr"] = self._lr()
            loss, grad_norm = self._step(self._next_batch())
            seconds = time.monotonic() - start
            self.state["step"] += 1
            self.state["elapsed_s"] += seconds
            step_tokens = self.global_batch * self.seq_len
            tokens, train_s = tokens + step_tokens, train_s + seconds
            window.append(loss)
            bar.update(1)
            bar.set_postfix(loss=f"{loss:.3f}", tok_s=f"{step_tokens / seconds:.0f}", refresh=False)
            step = self.state["step"]
            if step % cfg.log_every_steps == 0:
                self._log_step(step, sum(window) / len(window), grad_norm, step_tokens / seconds)
                window = []
            if step % cfg.eval_every_steps == 0 and step < cfg.max_steps:  # fit() evaluates the last step
                self._record(step, float("nan"), self._step_lr(), self.evaluate()["loss"])
            self._snapshot_if_due(step)
            if self._checkpoint_due(step, last_ckpt):
                self._checkpoint()
                last_ckpt = time.monotonic()
        if window:
            self._log_step(self.state["step"], sum(window) / len(window), grad_norm, step_tokens / seconds)
        bar.close()
        return tokens / train_s if train_s else 0.0

    def _checkpoint_due(self, step: int, last: float) -> bool:
        by_steps = self.cfg.checkpoint_every_steps and step % self.cfg.checkpoint_every_steps == 0
        minutes = self.cfg.checkpoint_every_minutes
        by_time = minutes and time.monotonic() - last >= 60 * minutes
        due = torch.tensor(float(bool(by_steps or by_time)), device=self.env.device)
        if self.env.world > 1:
            dist.broadcast(due, src=0)
        return bool(due)

    def _next_batch(self) -> torch.Tensor:
        """Block indices of this process for the next step, ``(grad_accum, batch)``; advances the data position."""
        n = len(self.train["input_ids"])
        if self.state["position"] + self.global_batch > n:  # drop the ragged tail of an epoch
            self.state["epoch"] += 1
            self.state["position"] = 0
        order = torch.randperm(n, generator=torch.Generator().manual_seed(self.cfg.seed + self.state["epoch"]))
        start = self.state["position"]
        self.state["position"] += self.global_batch
        mine = order[start : start + self.global_batch].view(self.env.world, self.cfg.grad_accum_steps, -1)
        return mine[self.env.rank]

    def _step(self, indices: torch.Tensor) -> tuple[float, float]:
        """One optimizer step over ``grad_accum_steps`` micro-batches; returns (mean loss, grad norm)."""
        cfg, losses = self.cfg, []
        for micro, rows in enumerate(indices):
            seed = ((cfg.seed * 1_000_003 + self.state["step"]) * 1009 + micro) * 1031 + self.env.rank
            generator = torch.Generator().manual_seed(seed)
            input_ids, attention, labels = self._masked(rows, generator, self.train, cfg.mlm_probability)
            sync = micro == len(indices) - 1 or self.env.world == 1
            with self._maybe_no_sync(sync), self._autocast():
                loss, _, _ = self.net(input_ids, attention, labels)
            (loss / len(indices)).backward()
            losses.append(loss.detach())
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.max_grad_norm)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return float(torch.stack(losses).mean()), float(grad_norm)

    def _masked(self, rows: torch.Tensor, generator: torch.Generator, blocks: dict[str, Any], probability: float):
        input_ids, maskable = blocks["input_ids"][rows], blocks["maskable"][rows]
        attention = blocks["attention_mask"][rows]
        masked, labels = mask_tokens(
            input_ids, maskable, self.vocab, probability, generator, self.cfg.whole_word_mask
        )
        device = self.env.device
        # packed blocks are rarely padded: without a mask, attention takes SDPA's mask-free (faster) kernel
        attention = None if bool(attention.all()) else attention.to(device)
        return masked.to(device), attention, labels.to(device)

    def _maybe_no_sync(self, sync: bool):
        return nullcontext() if sync else self.net.no_sync()

    def _autocast(self):
        on_cuda = self.env.device.type == "cuda" and self.cfg.bf16
        return torch.autocast(device_type=self.env.device.type, dtype=torch.bfloat16, enabled=on_cuda)

    @torch.no_grad()
    def evaluate(self) -> dict[str, Any]:
        """Held-out masked-token loss (nats) and accuracy, with the unigram baseline on the same masks, overall
        and per source; this rank's share of the blocks, summed over ranks.

        The masks come from a generator seeded by ``(seed, rank)`` alone, so every evaluation (initial,
        periodic, final) scores the same masked positions. Keys: ``loss``, ``accuracy``, ``unigram_ce``,
        ``unigram_accuracy``, ``masked_tokens``, ``blocks`` and ``by_source`` (the same per source name).
        """
        self.inner.eval()
        generator = torch.Generator().manual_seed(self.cfg.seed * 7919 + self.env.rank)
        mine = torch.arange(self.env.rank, len(self.heldout["input_ids"]), self.env.world)
        names = self.heldout["source_names"]
        totals = torch.zeros(len(names), len(EVAL_SUMS), dtype=torch.float64)
        for source in range(len(names)):
            rows = mine[self.heldout["source_id"][mine] == source]
            totals[source, EVAL_SUMS.index("blocks")] = len(rows)
            for batch in rows.split(self.cfg.batch_size_blocks):
                totals[source] += self._eval_sums(batch, generator)
        if self.env.world > 1:
            totals = totals.to(self.env.device)  # nccl reduces CUDA tensors only
            dist.all_reduce(totals)
        self.inner.train()
        totals = totals.cpu()
        by_source = {name: eval_summary(row) for name, row in zip(names, totals) if row[1] > 0}
        return {**eval_summary(totals.sum(dim=0)), "by_source": by_source}

    def _eval_sums(self, rows: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """``EVAL_SUMS`` of one held-out batch (``blocks`` left 0: the caller counts them)."""
        # a fixed evaluation rate: held-out losses of runs with other training mlm_probability stay comparable
        input_ids, attention, labels = self._masked(rows, generator, self.heldout, self.cfg.eval_mlm_probability)
        with self._autocast():
            # the unwrapped module: DDP's forward is a collective, and ranks may hold unequal shares
            loss, n_masked, n_correct = self.inner(input_ids, attention, labels)
        targets = labels[labels != IGNORE_INDEX].cpu()
        unigram_nll = -float(self.unigram[targets].sum())
        unigram_hits = int((targets == self.unigram_argmax).sum())
        n = int(n_masked)
        return torch.tensor([float(loss) * n, n, int(n_correct), unigram_nll, unigram_hits, 0], dtype=torch.float64)

    def _mean_over_ranks(self, value: float) -> float:
        """``value`` averaged over the ranks (a collective, at the same step on every rank): DDP averages the
        ranks' gradients with equal weights, so the ranks' mean loss is the loss the step descended."""
        if self.env.world == 1:
            return value
        total = torch.tensor([value], dtype=torch.float64, device=self.env.device)
        dist.all_reduce(total)  # SUM: gloo has no AVG
        return float(total) / self.env.world

    def _log_step(self, step: int, local_loss: float, grad_norm: float, tokens_per_s: float) -> None:
        loss = self._mean_over_ranks(local_loss)
        values = {"train/loss": loss, "train/lr": self._step_lr(), "train/grad_norm": grad_norm}
        values["train/tokens_per_s"] = tokens_per_s
        if self.peak:
            values["train/mfu"] = tokens_per_s * self.flops_per_token / (self.peak * self.env.world)
        if self.env.main:
            self.log.metrics(values, step=step)
        self._record(step, loss, values["train/lr"], float("nan"))

    def _record(self, step: int, train_loss: float, lr: float, eval_loss: float) -> None:
        """Merge a point into the curve: one row per step, a measured value never overwritten by ``nan``."""
        if self.curve and self.curve[-1][0] == step:
            row = self.curve[-1]
            row[1] = train_loss if not math.isnan(train_loss) else row[1]
            row[3] = eval_loss if not math.isnan(eval_loss) else row[3]
        else:
            self.curve.append([step, train_loss, lr, eval_loss])
        if not math.isnan(eval_loss) and self.env.main:
            self.log.metrics({"heldout/loss": eval_loss}, step=step)
