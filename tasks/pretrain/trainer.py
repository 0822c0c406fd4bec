"""The MLM training loop of ``pretrain``: data order, masking, AdamW steps, held-out evaluation, checkpoints,
throughput and MFU, and metric logging. The process group and hardware peaks are ``tasks.pretrain.hardware``;
masking and the masked-only loss ``tasks.pretrain.mlm``; the held-out evaluation ``tasks.pretrain.heldout``;
checkpoint files and fingerprints ``tasks.pretrain.checkpoint``; the learning rate's warm-up, decay and scaling to
the global batch ``tasks.pretrain.schedule``.
"""

from __future__ import annotations

import math
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from tqdm import tqdm

from tasks.common.models.optim import decay_groups
from tasks.common.runtime.device import autocast, peak_memory_mib
from tasks.pretrain import checkpoint
from tasks.pretrain.blocks import blocks_sha256
from tasks.pretrain.checkpoint import NOT_IN_FINGERPRINT, pretrain_code_sha256, sha256_json
from tasks.pretrain.feed import MicroBatch, Prefetcher, masked_batch, needs_attention_mask
from tasks.pretrain.hardware import Dist, Throughput, gather_ints, hardware, peak_flops, train_flops_per_token
from tasks.pretrain.heldout import HeldoutEval
from tasks.pretrain.mlm import MaskedOnlyMLM
from tasks.pretrain.schedule import lr_factor, lr_record, tokens_per_step


def count_params(model: torch.nn.Module) -> int:
    """Number of distinct parameters (tied weights counted once)."""
    return sum(p.numel() for p in model.parameters())


class Trainer:
    """The training loop of pretraining seed ``seed`` (None: ``cfg.seed``, the first): data order, masking, AdamW
    steps, evaluation, checkpoints and metric logging."""

    def __init__(
        self, cfg, model, vocab, train, heldout, env: Dist, log, ckpt_dir: Path, seed: int | None = None
    ) -> None:
        self.cfg, self.model, self.vocab, self.env, self.log = cfg, model, vocab, env, log
        self.train, self.heldout, self.ckpt_dir, self.seed = (
            train,
            heldout,
            ckpt_dir,
            cfg.seed if seed is None else seed,
        )
        ids = train["input_ids"]  # hashed once, a chunk at a time: every checkpoint's fingerprint needs it
        self.data_sha256 = sha256_json([list(ids.shape), blocks_sha256(ids)])
        if env.world > 1:  # before DDP, whose own check of the model shapes says less
            self._same_run_on_every_rank()
        self.inner = MaskedOnlyMLM(model, compile=cfg.compile)
        self.net = self._wrap(self.inner)
        self.with_mask = needs_attention_mask(train, heldout)
        self.seq_len = train["input_ids"].shape[1]
        self.global_batch = env.world * cfg.batch_size_blocks * cfg.grad_accum_steps
        self._kept_order: tuple[int, torch.Tensor] | None = None  # (epoch, order): _epoch_order's
        self.lr = lr_record(cfg, tokens_per_step(cfg, env.world, self.seq_len))  # rescaled to the global batch
        # fused: one kernel for all tensors, on CPU too (5x faster than the per-tensor loop in finetune)
        self.optimizer = torch.optim.AdamW(
            decay_groups(model, cfg.weight_decay),
            lr=self.lr["lr_effective"],
            betas=cfg.adam_betas,
            eps=cfg.adam_eps,
            fused=True,
        )
        self.heldout_eval = HeldoutEval(cfg, self.inner, vocab, train, heldout, env, self.seed, self.with_mask)
        if self.global_batch > len(train["input_ids"]):
            raise ValueError(f"a step needs {self.global_batch} blocks but train has {len(train['input_ids'])}")
        self.flops_per_token = train_flops_per_token(model, self.seq_len, cfg.mlm_probability)
        self.peak = peak_flops(env.device, cfg.bf16)
        self.state: dict[str, Any] = {"step": 0, "epoch": 0, "elapsed_s": 0.0, "curve": []}
        self.throughput = Throughput(self.global_batch * self.seq_len)
        self.snapshot_steps = sorted({round(f * cfg.max_steps) for f in cfg.dose_snapshot_fractions})

    def _wrap(self, net: torch.nn.Module) -> torch.nn.Module:
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
        if self.env.main:
            self.log.params(self.lr)
            self.log.info(f"pretrain: peak lr {self.lr['lr_rule']}")
        if resumed_from == 0:
            self.state["heldout_loss_initial"] = self.evaluate()["loss"]
            self._snapshot_if_due(0)
        self._loop()
        final = self.evaluate(per_block=True)
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
            "heldout_per_block": final["per_block"],  # {masked, correct, unigram_correct} per block: the report's units
            "steps": self.state["step"],
            "resumed_from_step": resumed_from,
            **self.throughput.summary(),
            "train_minutes": self.state["elapsed_s"] / 60,
            "peak_memory_mib": peak_memory_mib(self.env.device),
            "n_params": count_params(self.model),
            "train_blocks": len(self.train["input_ids"]),
            "heldout_blocks": len(self.heldout["input_ids"]),
            "seq_len_tokens": self.seq_len,
            **self.lr,
            "hardware": hardware(self.env),
        }
        metrics["peak_flops_per_s"] = self.peak  # null: CPU or a GPU not in hardware.GPU_PEAKS (MFU unknown)
        metrics["mfu"] = self._mfu(metrics["train_tokens_per_s"])
        return metrics

    def _mfu(self, tokens_per_s: float) -> float | None:
        """Model FLOPs utilisation of ``tokens_per_s`` (all ranks) against the device's peak, or None."""
        return tokens_per_s * self.flops_per_token / (self.peak * self.env.world) if self.peak else None

    def _fingerprint(self) -> dict[str, str]:
        """sha256 of each thing the trained weights depend on: params (with this run's seed, not the list), number
        of processes, the train blocks and the code (``pretrain_code_sha256``). Resumed only if all four match."""
        params = self.cfg.model_dump(mode="json", exclude=NOT_IN_FINGERPRINT | {"seeds"}) | {"seed": self.seed}
        return {
            "params": sha256_json(params),
            "world": sha256_json(self.env.world),
            "data": self.data_sha256,
            "code": pretrain_code_sha256(),
        }

    def _same_run_on_every_rank(self) -> None:
        """Raise ``ValueError`` on every rank if a rank has other params, train blocks or code than rank 0: nodes
        started from different checkouts would otherwise train one model on mismatched settings."""
        every = gather_ints(self.env, int(sha256_json(self._fingerprint())[:15], 16))  # 60 bits: fits int64
        differ = [rank for rank, theirs in enumerate(every) if theirs != every[0]]
        if differ:
            raise ValueError(
                f"pretrain: ranks {differ} have other params.yaml pretrain values, train blocks or code "
                "than rank 0: start every node from the same checkout and data"
            )

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
        self._same_step_on_every_rank()
        self.log.info(f"pretrain: resumed from {path} at step {self.state['step']}")
        return self.state["step"]

    def _same_step_on_every_rank(self) -> None:
        """Raise ``RuntimeError`` on every rank if the ranks resumed at different steps (a node that read an
        older checkpoint from a stale copy of the checkpoint folder)."""
        steps = gather_ints(self.env, self.state["step"])
        if len(set(steps)) > 1:
            raise RuntimeError(
                f"pretrain: ranks resumed at different steps {steps}: every rank must read the "
                "checkpoint rank 0 wrote (share models/checkpoints/pretrain)"
            )

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
        return self.lr["lr_effective"] * lr_factor(progress, self.cfg.warmup_fraction, self.cfg.lr_schedule)

    def _step_lr(self) -> float:
        """The learning rate the last step ran at (what the curve and MLflow show)."""
        return float(self.optimizer.param_groups[0]["lr"])

    def _done(self) -> bool:
        """Whether training stops before this step. Steps are the same count on every rank; the clock of a
        budget is read only at logging steps, where rank 0's decision is broadcast (no collective per step)."""
        if self.state["step"] >= self.cfg.max_steps:
            return True
        if self.cfg.budget_minutes is None or self.state["step"] % self.cfg.log_every_steps:
            return False
        return self._rank0_says(self._progress() >= 1.0)

    def _rank0_says(self, value: bool) -> bool:
        """``value`` of rank 0 on every rank (a broadcast; no-op with one process)."""
        if self.env.world == 1:
            return value
        flag = torch.tensor(float(value), device=self.env.device)
        dist.broadcast(flag, src=0)
        return bool(flag)

    def _loop(self) -> None:
        cfg, feed = self.cfg, Prefetcher(self._micro_batches, self.env.device)
        bar = tqdm(total=cfg.max_steps, initial=self.state["step"], desc="pretrain", disable=not self.env.main)
        last_ckpt, loss_sum, steps_in_window = time.monotonic(), None, 0
        self.throughput.start()
        try:
            while not self._done():
                started = time.monotonic()
                for group in self.optimizer.param_groups:
                    group["lr"] = self._lr()
                loss, grad_norm = self._step(feed.get(self.state["step"]))
                loss_sum = loss.double() if loss_sum is None else loss_sum + loss.double()
                self.state["step"] += 1
                self.state["elapsed_s"] += time.monotonic() - started  # host time: the budget's clock
                steps_in_window += 1
                bar.update(1)
                step = self.state["step"]
                if step % cfg.log_every_steps == 0 or step == cfg.max_steps:
                    self._log_step(step, float(loss_sum) / steps_in_window, float(grad_norm), steps_in_window)
                    bar.set_postfix(loss=f"{self.curve[-1][1]:.3f}", tok_s=f"{self.throughput.last:.0f}", refresh=False)
                    loss_sum, steps_in_window = None, 0
                with self.throughput.paused():
                    last_ckpt = self._between_steps(step, last_ckpt)
        finally:
            feed.close()
            bar.close()

    def _between_steps(self, step: int, last_ckpt: float) -> float:
        """Held-out evaluation, dose-response snapshot and checkpoint when due; returns the checkpoint clock."""
        if step % self.cfg.eval_every_steps == 0 and step < self.cfg.max_steps:  # fit() evaluates the last step
            self._record(step, float("nan"), self._step_lr(), self.evaluate()["loss"])
        self._snapshot_if_due(step)
        if self._checkpoint_due(step, last_ckpt):
            self._checkpoint()
            return time.monotonic()
        return last_ckpt

    def _checkpoint_due(self, step: int, last: float) -> bool:
        """By steps on every rank alike; by minutes only at logging steps, rank 0's clock deciding."""
        if self.cfg.checkpoint_every_steps and step % self.cfg.checkpoint_every_steps == 0:
            return True
        minutes = self.cfg.checkpoint_every_minutes
        if not minutes or step % self.cfg.log_every_steps:
            return False
        return self._rank0_says(time.monotonic() - last >= 60 * minutes)

    def _rows(self, step: int) -> torch.Tensor:
        """Block indices of this process for ``step``, ``(grad_accum, batch)``: epoch ``step // steps_per_epoch``
        in the order of a permutation seeded by ``seed + epoch`` (the ragged tail of an epoch is dropped)."""
        n = len(self.train["input_ids"])
        epoch, index = divmod(step, n // self.global_batch)
        order = self._epoch_order(epoch, n)
        start = index * self.global_batch
        mine = order[start : start + self.global_batch].view(self.env.world, self.cfg.grad_accum_steps, -1)
        return mine[self.env.rank]

    def _epoch_order(self, epoch: int, n: int) -> torch.Tensor:
        """The permutation of the ``n`` blocks for ``epoch`` (``randperm`` seeded by ``seed + epoch``), drawn once an
        epoch and kept until the epoch changes: drawing it costs O(blocks), about 7 ms at 500,000 blocks on one
        core, where a step reads ``global_batch`` of it (``benchmarks/scaling.py``'s feed: steps/s fell 4.5x from
        50,000 to 500,000 blocks when every step drew it, 1.2-1.4x since). A function of ``(seed, epoch)`` alone,
        so a resumed run draws the same order; kept, it adds 8 bytes a block to the process (int64)."""
        kept = self._kept_order
        if kept is None or kept[0] != epoch:
            kept = (epoch, torch.randperm(n, generator=torch.Generator().manual_seed(self.seed + epoch)))
            self._kept_order = kept
        return kept[1]

    def _micro_batches(self, step: int) -> list[MicroBatch]:
        """The masked micro-batches of ``step`` on the host; each mask is seeded by ``(seed, step, micro, rank)``."""
        cfg, out = self.cfg, []
        for micro, rows in enumerate(self._rows(step)):
            seed = ((self.seed * 1_000_003 + step) * 1009 + micro) * 1031 + self.env.rank
            generator = torch.Generator().manual_seed(seed)
            out.append(
                masked_batch(
                    self.train,
                    rows,
                    self.vocab,
                    cfg.mlm_probability,
                    generator,
                    cfg.whole_word_mask,
                    self.with_mask,
                    corruption=(cfg.mask_token_fraction, cfg.random_token_fraction),
                )
            )
        return out

    def _step(self, batches: list[MicroBatch]) -> tuple[torch.Tensor, torch.Tensor]:
        """One optimizer step over the micro-batches (on the device); returns (mean loss, grad norm) as 0-dim
        device tensors, read by the host only at logging steps."""
        losses = []
        for micro, batch in enumerate(batches):
            sync = micro == len(batches) - 1 or self.env.world == 1
            with self._maybe_no_sync(sync), autocast(self.env.device, self.cfg.bf16):
                loss, _ = self.net(batch.input_ids, batch.attention_mask, batch.positions, batch.targets)
            (loss / len(batches)).backward()
            losses.append(loss.detach())
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.max_grad_norm)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.state["epoch"] = self.state["step"] // (len(self.train["input_ids"]) // self.global_batch)
        return torch.stack(losses).mean(), grad_norm

    def _maybe_no_sync(self, sync: bool):
        return nullcontext() if sync else self.net.no_sync()

    def evaluate(self, per_block: bool = False) -> dict[str, Any]:
        """The held-out loss and accuracy now, with the unigram baseline, overall and per source, and with
        ``per_block`` each block's counts (``heldout.HeldoutEval.evaluate``)."""
        return self.heldout_eval.evaluate(per_block)

    def _mean_over_ranks(self, value: float) -> float:
        """``value`` averaged over the ranks (a collective, at the same step on every rank): DDP averages the
        ranks' gradients with equal weights, so the ranks' mean loss is the loss the step descended."""
        if self.env.world == 1:
            return value
        total = torch.tensor([value], dtype=torch.float64, device=self.env.device)
        dist.all_reduce(total)  # SUM: gloo has no AVG
        return float(total) / self.env.world

    def _log_step(self, step: int, local_loss: float, grad_norm: float, steps: int) -> None:
        """Log the mean train loss of the last ``steps`` steps (over ranks), the grad norm and the throughput
        of the window (``Throughput.lap``: the host has just synced on the loss, so the window's time is the
        device's)."""
        loss = self._mean_over_ranks(local_loss)
        values = {"train/loss": loss, "train/lr": self._step_lr(), "train/grad_norm": grad_norm}
        values["train/tokens_per_s"] = self.throughput.lap(steps)
        if self.peak:
            values["train/mfu"] = self._mfu(values["train/tokens_per_s"])
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
