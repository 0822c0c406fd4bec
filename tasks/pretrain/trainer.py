"""The MLM training loop of ``pretrain``: data order, masking, AdamW steps, held-out evaluation, checkpoints,
throughput and MFU, and metric logging; plus the process group it runs in (one process or ``torchrun``).

Masking and the masked-only loss are ``tasks.pretrain.mlm``; checkpoint files ``tasks.pretrain.checkpoint``.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from tqdm import tqdm
from transformers import BertForMaskedLM

from tasks.pretrain import checkpoint
from tasks.pretrain.mlm import MaskedOnlyMLM, mask_tokens

#: Params that do not change the trained weights: a checkpoint made under other values is still resumed.
NOT_IN_FINGERPRINT = {"fill_mask", "fill_mask_top_k", "log_every_steps", "eval_every_steps", "checkpoint_every_steps",
                      "checkpoint_every_minutes", "compile", "num_threads", "nproc_per_node"}  # fmt: skip

#: Dense (not 2:4 sparse) bf16 tensor-core peaks, FLOP/s, from the vendors' datasheets.
BF16_DENSE_PEAK = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "L40S": 362e12, "L4": 121e12, "A10": 125e12}


@dataclass(frozen=True)
class Dist:
    """This process's place in the job: ``rank`` of ``world`` processes, on ``device``."""

    rank: int
    world: int
    device: torch.device

    @property
    def main(self) -> bool:
        return self.rank == 0


def setup_distributed() -> Dist:
    """Join the ``torchrun`` process group if ``WORLD_SIZE > 1`` (nccl on CUDA, gloo on CPU)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    if torch.cuda.is_available():
        local = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
    else:
        device = torch.device("cpu")
    if world > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return Dist(rank, world, device)


def count_params(model: torch.nn.Module) -> int:
    """Number of distinct parameters (tied weights counted once)."""
    return sum(p.numel() for p in model.parameters())


def lr_factor(progress: float, warmup_fraction: float, schedule: str) -> float:
    """Multiplier of the peak lr at ``progress`` in [0, 1]: linear warmup, then linear or cosine decay to 0."""
    if progress < warmup_fraction:
        return progress / warmup_fraction
    rest = min(1.0, (progress - warmup_fraction) / max(1e-12, 1.0 - warmup_fraction))
    return 1.0 - rest if schedule == "linear" else 0.5 * (1.0 + math.cos(math.pi * rest))


def train_flops_per_token(model: BertForMaskedLM, seq_len: int, mlm_probability: float) -> float:
    """Training FLOPs per input token: 6 x encoder weights + attention scores (PaLM, Chowdhery et al. 2022,
    appendix B), plus the MLM head on the masked fraction only (the head runs on gathered positions)."""
    c = model.config
    encoder = sum(p.numel() for p in model.bert.encoder.parameters())
    head = c.hidden_size * c.hidden_size + c.hidden_size * c.vocab_size
    return 6 * encoder + 12 * c.num_hidden_layers * c.hidden_size * seq_len + 6 * head * mlm_probability


def bf16_peak_flops(device: torch.device) -> float | None:
    """Dense bf16 peak of the detected GPU (FLOP/s), or ``None`` on CPU / an unknown GPU."""
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((peak for key, peak in BF16_DENSE_PEAK.items() if key in name), None)


def hardware(env: Dist) -> dict[str, Any]:
    """Where the run trained: device type and name, number of processes, torch threads per process."""
    name = torch.cuda.get_device_name(env.device) if env.device.type == "cuda" else platform.processor() or "cpu"
    return {"device": env.device.type, "device_name": name, "world_size": env.world, "torch_threads": torch.get_num_threads()}


class Trainer:
    """The training loop: data order, masking, AdamW steps, evaluation, checkpoints and metric logging."""

    def __init__(self, cfg, model, vocab, train, heldout, env: Dist, log, ckpt_dir: Path) -> None:
        self.cfg, self.model, self.vocab, self.env, self.log = cfg, model, vocab, env, log
        self.train, self.heldout, self.ckpt_dir = train, heldout, ckpt_dir
        self.inner = MaskedOnlyMLM(model)
        self.net = self._wrap(self.inner)
        fused = env.device.type == "cuda"
        self.optimizer = torch.optim.AdamW(
            model.parameters(), lr=cfg.lr, betas=cfg.adam_betas, eps=cfg.adam_eps,
            weight_decay=cfg.weight_decay, fused=fused,
        )  # fmt: skip
        self.seq_len = train["input_ids"].shape[1]
        self.global_batch = env.world * cfg.batch_size_blocks * cfg.grad_accum_steps
        if self.global_batch > len(train["input_ids"]):
            raise ValueError(f"a step needs {self.global_batch} blocks but train has {len(train['input_ids'])}")
        self.flops_per_token = train_flops_per_token(model, self.seq_len, cfg.mlm_probability)
        self.peak = bf16_peak_flops(env.device)
        self.state: dict[str, Any] = {"step": 0, "epoch": 0, "position": 0, "elapsed_s": 0.0, "curve": []}

    def _wrap(self, net: torch.nn.Module) -> torch.nn.Module:
        if self.cfg.compile:
            net.mlm.bert.compile()
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
        tokens_per_s = self._loop()
        final = self.evaluate()
        self._record(self.state["step"], float("nan"), self._lr(), final["loss"])
        self._checkpoint()
        metrics = {
            "heldout_loss_initial": self.state["heldout_loss_initial"],
            "heldout_loss": final["loss"],
            "heldout_perplexity": math.exp(min(final["loss"], 50.0)),
            "heldout_mlm_accuracy": final["accuracy"],
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
        if self.peak:
            metrics["mfu"] = tokens_per_s * self.flops_per_token / (self.peak * self.env.world)
        return metrics

    def _fingerprint(self) -> str:
        """Hash of what the trained weights depend on: params, number of processes and the train blocks."""
        ids = self.train["input_ids"]
        params = self.cfg.model_dump(mode="json", exclude=NOT_IN_FINGERPRINT)
        blocks = hashlib.sha256(ids.numpy().tobytes()).hexdigest()
        digest = {"params": params, "world": self.env.world, "train": list(ids.shape), "blocks_sha256": blocks}
        return hashlib.sha256(json.dumps(digest, sort_keys=True).encode()).hexdigest()

    def _resume(self) -> int:
        path = checkpoint.latest(self.ckpt_dir)
        if path is None:
            return 0
        if checkpoint.read_state(path).get("fingerprint") != self._fingerprint():
            self.log.info(f"pretrain: {path} was made with other params or data; starting afresh")
            if self.env.main:
                checkpoint.clear(self.ckpt_dir)
            return 0
        state = checkpoint.load(path, self.model, self.optimizer, self.env.device)
        torch.set_rng_state(state.pop("torch_rng"))
        if self.env.device.type == "cuda" and "cuda_rng" in state:
            torch.cuda.set_rng_state(state.pop("cuda_rng"), self.env.device)
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

    def _progress(self) -> float:
        if self.cfg.budget_minutes is None:
            return self.state["step"] / self.cfg.max_steps
        return min(1.0, self.state["elapsed_s"] / (60 * self.cfg.budget_minutes))

    def _lr(self) -> float:
        return self.cfg.lr * lr_factor(self._progress(), self.cfg.warmup_fraction, self.cfg.lr_schedule)

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
                self._record(step, float("nan"), self._lr(), self.evaluate()["loss"])
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
            input_ids, attention, labels = self._masked(rows, torch.Generator().manual_seed(seed), self.train)
            sync = micro == len(indices) - 1 or self.env.world == 1
            with self._maybe_no_sync(sync), self._autocast():
                loss, _, _ = self.net(input_ids, attention, labels)
            (loss / len(indices)).backward()
            losses.append(loss.detach())
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.max_grad_norm)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return float(torch.stack(losses).mean()), float(grad_norm)

    def _masked(self, rows: torch.Tensor, generator: torch.Generator, blocks: dict[str, torch.Tensor]):
        input_ids, maskable = blocks["input_ids"][rows], blocks["maskable"][rows]
        attention = blocks["attention_mask"][rows]
        masked, labels = mask_tokens(
            input_ids, maskable, self.vocab, self.cfg.mlm_probability, generator, self.cfg.whole_word_mask
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
    def evaluate(self) -> dict[str, float]:
        """Masked-token loss (nats) and accuracy on this rank's share of the held-out blocks, summed over ranks.

        The masks come from a generator seeded by ``(seed, rank)`` alone, so every evaluation (initial,
        periodic, final) scores the same masked positions.
        """
        self.inner.eval()
        generator = torch.Generator().manual_seed(self.cfg.seed * 7919 + self.env.rank)
        mine = torch.arange(self.env.rank, len(self.heldout["input_ids"]), self.env.world)
        totals = torch.zeros(3, dtype=torch.float64)
        for rows in mine.split(self.cfg.batch_size_blocks):
            input_ids, attention, labels = self._masked(rows, generator, self.heldout)
            with self._autocast():
                # the unwrapped module: DDP's forward is a collective, and ranks may hold unequal shares
                loss, n_masked, n_correct = self.inner(input_ids, attention, labels)
            totals += torch.tensor([float(loss) * int(n_masked), int(n_masked), int(n_correct)], dtype=torch.float64)
        if self.env.world > 1:
            totals = totals.to(self.env.device)  # nccl reduces CUDA tensors only
            dist.all_reduce(totals)
        self.inner.train()
        loss_sum, n_masked, n_correct = totals.cpu().tolist()
        return {"loss": loss_sum / max(n_masked, 1), "accuracy": n_correct / max(n_masked, 1)}

    def _log_step(self, step: int, loss: float, grad_norm: float, tokens_per_s: float) -> None:
        values = {"train/loss": loss, "train/lr": self._lr(), "train/grad_norm": grad_norm}
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
