"""The feed part of ``benchmarks/_scaling_feed.py``, run in a fresh process (``python -m
benchmarks._scaling_feed_part FOLDER RANK WORLD STEPS OUT``): open the blocks, the trainer's start-up scans, then
``STEPS`` steps of rank ``RANK`` of ``WORLD``; writes ``{imports_rss_mib, startup_s, steps_per_s, blocks}`` to
``OUT`` (JSON). Its imports are the pretrain stage's (torch, the trainer), so its RSS after them is a baseline."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from benchmarks._measure import memory_mib
from tasks.config import load_params

REPO = Path(__file__).resolve().parents[1]
VOCAB = 30522  # the synthetic blocks' vocabulary (bert-base-uncased's size); ids 0-4 special, 4 the mask id
SPECIAL, MASK_ID, CLS_ID = 5, 4, 2


def main(folder: Path, rank: int, world: int, steps: int, out: Path) -> None:
    """The measured part (see the module docstring). The pretrain stage's modules (torch, the trainer) are imported
    here, so that ``benchmarks._scaling_feed`` can read this module's ids without them."""
    import torch

    from tasks.pretrain.blocks import blocks_sha256, open_blocks
    from tasks.pretrain.feed import needs_attention_mask
    from tasks.pretrain.hardware import Dist
    from tasks.pretrain.mlm import MaskingVocab, unigram_log_probs

    torch.set_num_threads(1)
    # this process's own VmHWM: getrusage's ru_maxrss keeps the peak of the process that forked it (Linux carries
    # it across exec), which read the benchmark's parent (963 MiB against a 517 MiB peak), not the imports
    imports_rss = memory_mib(os.getpid())[1]
    cfg = load_params(REPO / "params.yaml").pretrain
    special = torch.arange(VOCAB) < SPECIAL
    vocab = MaskingVocab(
        MASK_ID, special.nonzero().flatten(), (~special).nonzero().flatten(), torch.zeros_like(special)
    )
    start = time.perf_counter()
    train = open_blocks(folder)
    blocks_sha256(train["input_ids"])
    unigram_log_probs(train["input_ids"], train["maskable"], vocab)
    with_mask = needs_attention_mask(train)
    opened = time.perf_counter()
    feed = feed_only(cfg, vocab, train, Dist(rank, world, torch.device("cpu")), with_mask)
    for step in range(steps):
        feed._micro_batches(step)
    done = time.perf_counter()
    figures = {
        "imports_rss_mib": imports_rss,
        "startup_s": opened - start,
        "steps_per_s": steps / (done - opened),
        "blocks": len(train["input_ids"]),
        "batch_blocks": cfg.batch_size_blocks * cfg.grad_accum_steps,
    }
    out.write_text(json.dumps(figures), encoding="utf-8")


def feed_only(cfg, vocab, train: dict, env, with_mask: bool):
    """A ``Trainer`` holding only what its ``_rows`` and ``_micro_batches`` read (no model, optimizer or process
    group, ``__init__`` not run): the feed measured is the trainer's own code. ``vocab``: a ``MaskingVocab``;
    ``env``: a ``Dist``."""
    from tasks.pretrain.trainer import Trainer

    feed = Trainer.__new__(Trainer)
    feed.cfg, feed.vocab, feed.train, feed.env, feed.with_mask, feed.seed = cfg, vocab, train, env, with_mask, cfg.seed
    feed.global_batch = env.world * cfg.batch_size_blocks * cfg.grad_accum_steps
    feed._kept_order = None  # the epoch order _rows keeps
    return feed


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), Path(sys.argv[5]))
