"""Pretraining's feed at two corpus sizes 10x apart, no model: steps/s and the peak RSS of one rank's process.

Blocks (``write_blocks``, before any clock starts): ``n`` packed blocks of ``tokenize.max_seq_len_tokens`` ids,
synthetic (``[CLS]`` then ids drawn uniformly from the non-special ids of a ``VOCAB``-id vocabulary, no padding;
the ids are ``_scaling_feed_part``'s), written by the tokenize stage's own ``tasks.tokenize.shards.ShardWriter`` in
shards of ``tokenize.shard_blocks``, ``BUILD_CHUNK`` blocks at a time. Part (``_scaling_feed_part.main``, a fresh
process per size and rank, run as ``python -m benchmarks._scaling_feed_part``): the stage's ``open_blocks``
(memory-mapped shards), the trainer's start-up scans of the train blocks (``blocks_sha256``, ``unigram_log_probs``,
``needs_attention_mask``), then ``steps`` steps of the trainer's own ``Trainer._micro_batches``
(``Trainer._rows``: the epoch's permutation of every block and this rank's slice; ``masked_batch``) with
params.yaml's pretrain values, on the host, without the prefetch thread. A rank is ``Dist(rank, world)``: the feed
takes both as numbers, no torch.distributed; the ranks of one size run one after the other (the OS page cache of
the shards is shared, a process's RSS is its own).

``--smoke`` calls the part's ``main`` in its own process (``in_process``; the pretrain imports once), so its RSS
figures are the benchmark process's. Measured (``benchmarks/_measure.run_measured``): ``peak_rss_mib``, the
process's ``VmHWM``, imports included
(``imports_rss_mib``: its RSS after the imports, before the blocks are opened); ``steps_per_s`` over the loop;
``startup_s``: open and scans. The goal (issue 63): each rank's peak RSS independent of the corpus size, met when
the larger corpus's peak is at most ``RSS_GOAL`` times the smaller's.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks._measure import run_measured
from benchmarks._provenance import provenance, ratio_fields
from benchmarks._scaling_feed_part import CLS_ID, SPECIAL, VOCAB, main

REPO = Path(__file__).resolve().parents[1]
STAGE = "feed"
#: the code measured: the feed's modules, their imports followed
MEASURED = ("tasks.pretrain.blocks", "tasks.pretrain.feed", "tasks.pretrain.trainer", "tasks.tokenize.shards")
TIMEOUT_S = 1800
BUILD_CHUNK = 20_000
SEED = 20240611
#: the goal: peak RSS at 10x the blocks at most this multiple of the smaller corpus's (independent of the size)
RSS_GOAL = 1.10


def write_blocks(folder: Path, n_blocks: int, seq_len: int, shard_blocks: int) -> None:
    """``n_blocks`` synthetic blocks ``(n_blocks, seq_len)`` in the tokenize stage's shard format at ``folder``."""
    from tasks.tokenize.shards import ShardWriter

    rng = np.random.default_rng(SEED)
    writer = ShardWriter(folder, shard_blocks, np.arange(SPECIAL))
    for start in range(0, n_blocks, BUILD_CHUNK):
        blocks = rng.integers(SPECIAL, VOCAB, size=(min(BUILD_CHUNK, n_blocks - start), seq_len), dtype=np.int32)
        blocks[:, 0] = CLS_ID
        writer.add(blocks, np.array(["a", "b"])[np.arange(len(blocks)) % 2])
    writer.close()


def measured_runs(work: Path, sizes: list[int], world: int, steps: int, smoke: bool = False) -> list[dict]:
    """For each size (blocks) and each rank of ``world``: the feed in a fresh process (``measure``), on blocks
    written under ``work`` (each size's folder removed after its runs). Block length and shard size: params.yaml's
    ``tokenize`` section."""
    from tasks.config import load_params

    tokenize = load_params(REPO / "params.yaml").tokenize
    seq_len, out = tokenize.max_seq_len_tokens, []
    for blocks in sizes:
        folder = work / f"feed-{blocks}" / "blocks"
        write_blocks(folder, blocks, seq_len, tokenize.shard_blocks)
        for rank in range(world):
            out.append(measure(folder, rank, world, steps, smoke) | {"seq_len": seq_len})
        shutil.rmtree(folder.parent)
    return out


def measure(folder: Path, rank: int, world: int, steps: int, smoke: bool = False) -> dict:
    """One rank's feed on ``folder``'s blocks in a fresh process (``benchmarks/_scaling_feed_part.py``): its
    wall seconds and peak RSS (``run_measured``) with the part's own figures."""
    log, figures = folder.parent / f"rank{rank}of{world}.log", folder.parent / f"rank{rank}of{world}.json"
    if smoke:  # the part in this process, as pretrain.py's smoke runs its workers: the pretrain imports once
        timing = in_process(folder, rank, world, steps, figures)
    else:
        command = [sys.executable, "-m", "benchmarks._scaling_feed_part", str(folder), str(rank), str(world)]
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        timing = run_measured([*command, str(steps), str(figures)], REPO, env=env, log=log, timeout_s=TIMEOUT_S)
    run = json.loads(figures.read_text()) | timing
    run |= {"stage": STAGE, "engine": f"rank {rank}/{world}", "scale": run["blocks"], "docs": run["blocks"]}
    run |= {"rank": rank, "world": world, "steps": steps, "provenance": provenance(MEASURED, smoke=smoke)}
    print(
        f"scaling feed {run['blocks']:,} blocks, rank {rank}/{world}: {run['steps_per_s']:.0f} steps/s, "
        f"peak {run['peak_rss_mib']:.0f} MiB (imports {run['imports_rss_mib']:.0f})",
        flush=True,
    )
    return run


def in_process(folder: Path, rank: int, world: int, steps: int, figures: Path) -> dict:
    """A smoke run's part, called here (``_scaling_feed_part.main``): seconds, and this process's peak RSS as
    both peaks (a figure of the path, not of the feed)."""
    start = time.perf_counter()
    main(folder, rank, world, steps, figures)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"seconds": time.perf_counter() - start, "peak_rss_mib": peak, "peak_tree_rss_mib": peak}


def rows(runs: list[dict]) -> list[dict]:
    """``benchmarks/_table.py`` rows: per size and rank the feed's steps/s (information), and per rank the peak
    RSS of the largest corpus over the smallest's, against ``RSS_GOAL``."""
    out = [
        _row(
            f"feed {r['blocks']:,} blocks of {r['seq_len']}, rank {r['rank']}/{r['world']}",
            "steps/s",
            r["steps_per_s"],
            r,
        )
        | {"goal": None, "meets_goal": None}
        for r in sorted(runs, key=lambda r: (r["world"], r["rank"], r["blocks"]))
    ]
    for key in sorted({(r["rank"], r["world"]) for r in runs}):
        sizes = sorted((r for r in runs if (r["rank"], r["world"]) == key), key=lambda r: r["blocks"])
        if len(sizes) < 2:
            continue
        small, large = sizes[0], sizes[-1]
        growth = large["peak_rss_mib"] / small["peak_rss_mib"]
        case = (
            f"feed peak RSS, rank {key[0]}/{key[1]}: {large['blocks']:,} vs {small['blocks']:,} blocks "
            f"({large['peak_rss_mib']:,.0f} vs {small['peak_rss_mib']:,.0f} MiB)"
        )
        out.append(
            _row(case, "x peak RSS", growth, large) | {"goal": f"<= {RSS_GOAL:.2f}x", "meets_goal": growth <= RSS_GOAL}
        )
    return out


def _row(case: str, unit: str, value: float, run: dict) -> dict:
    return {
        "benchmark": "scaling",
        "case": case,
        "unit": unit,
        "best_peer": None,
        **ratio_fields([value], None),
        "limit": None,
        "fraction_of_limit": None,
        "provenance": run.get("provenance"),
    }


def table(runs: list[dict]) -> list[str]:
    """docs/scaling.md's feed table: a line per size and rank."""
    out = [
        "| feed (no model) | blocks | rank | steps | wall s | start-up s | steps/s | imports MiB | peak MiB |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in sorted(runs, key=lambda r: (r["world"], r["rank"], r["blocks"])):
        out.append(
            f"| {r['seq_len']} ids a block, {r['batch_blocks']} a step | {r['blocks']:,} | {r['rank']}/{r['world']} | "
            f"{r['steps']} | {r['seconds']:.1f} | {r['startup_s']:.1f} | {r['steps_per_s']:,.0f} | "
            f"{r['imports_rss_mib']:,.0f} | {r['peak_rss_mib']:,.0f} |"
        )
    return out
