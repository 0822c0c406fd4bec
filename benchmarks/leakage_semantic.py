"""Cost of the semantic leakage detector against the lexical audit, and bf16/int8 against fp32: docs per second.

Corpus: the default sources after ``ingest`` and ``split`` (``benchmarks/leakage.py``'s ``default_corpora``,
no dedup), or ``data/split`` when it exists (``--from-split``). Timed, in this process, on the same
training docs (``tasks.leakage.outputs.train_rows``) against the same eval docs (``eval_rows``):

- ``lexical``: ``tasks.leakage.lexical.words.tokenize`` (words + UTS #39 fold), word hashes and every lexical detector
  (``detectors.detect``: 13-grams, whole docs, MinHash docs and passages), as the stage runs them;
- ``semantic``: the eval docs' and the training docs' windows embedded by ``tasks.leakage.semantic.encoder.Encoder``
  (params.yaml's ``leakage.semantic``: 128-token windows every 126, ``cpu_precision``) and the exact search;
  then fp32, bf16 autocast and dynamic int8 on the first ``--fp32-docs`` training docs only, with the agreement
  of bf16 and int8 with fp32: cosine of the same windows' embeddings (min, p1, median) and the flagged
  (eval doc, training doc) pairs at thresholds 0.8 and 0.9.

Docs/s is training docs per wall second (the stage runs with every core; the machine is shared, so CPU
seconds are reported next to it). Writes ``benchmarks/results/leakage_semantic.json`` with its provenance
(``benchmarks/_provenance.py``) and one information row: the semantic pass's docs/s against the lexical audit's
(measured once each: a cost, not a race). Run: ``.venv/bin/python benchmarks/leakage_semantic.py`` (about 5-10
minutes on 2 cores); ``--smoke``: every pass and precision on ``SMOKE_TRAIN`` training and ``SMOKE_EVAL`` eval docs,
each cut to its first ``SMOKE_WORDS`` words, in batches of ``SMOKE_BATCH`` windows.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[0] = str(ROOT)  # benchmarks/tokenize.py would shadow the stdlib module

import argparse  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

from benchmarks._provenance import add_smoke, out_path, write_results  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "leakage_semantic.json"
SMOKE_SOURCE_DOCS, SMOKE_TRAIN, SMOKE_EVAL, SMOKE_FP32_DOCS = 40, 16, 8, 4
SMOKE_WORDS = 60  # a smoke run's texts cut to their first 60 words: one 128-token window each
SMOKE_BATCH = 8  # windows per forward pass in a smoke run (batches are padded to it: fixed shapes)
#: The code measured: the leakage stage (its lexical detectors, semantic encoder and search), imports followed.
MEASURED = ("tasks.leakage",)


def corpora(from_split: bool, max_docs: int | None = None):
    """``(train frame, eval frame)``; ``max_docs`` a source when built (``leakage.default_corpora``)."""
    import pandas as pd

    from tasks.config import read_yaml
    from tasks.leakage.outputs import eval_rows, train_rows

    folder = ROOT / "data" / "split"
    if from_split and folder.is_dir():
        rows = pd.concat([pd.read_parquet(f) for f in sorted(folder.glob("*.parquet"))], ignore_index=True)
        return train_rows(rows), eval_rows(rows)
    from benchmarks.leakage import default_corpora

    with tempfile.TemporaryDirectory() as tmp:
        return default_corpora(read_yaml(ROOT / "params.yaml"), Path(tmp), max_docs)


def clock():
    return time.perf_counter(), time.process_time()


def since(start) -> dict:
    wall, cpu = clock()
    return {"wall_s": round(wall - start[0], 3), "cpu_s": round(cpu - start[1], 3)}


def lexical(train_texts: list[str], eval_texts: list[str], cfg) -> dict:
    from tasks.leakage.lexical.detectors import detect
    from tasks.leakage.lexical.words import make_sides, tokenize

    start = clock()
    trains, evals = make_sides([tokenize(t) for t in train_texts], [tokenize(t) for t in eval_texts])
    matches = detect(trains, evals, cfg.lexical)
    return {**since(start), "pairs": len(matches)}


def semantic_pass(train_texts: list[str], eval_texts: list[str], cfg, precision: str):
    from tasks.leakage.semantic import encoder, method

    scfg = cfg.semantic.model_copy(update={"cpu_precision": precision, "enabled": True})
    start = clock()
    enc = encoder.Encoder(scfg, cfg.hardware)
    loaded = since(start)
    evals = enc.windows(eval_texts)
    corpus = enc.windows(train_texts)
    embedded = since(start)
    pairs, _ = method.pair_scores(evals, corpus, 0.8, scfg)
    return (
        {
            **since(start),
            "load": loaded,
            "embedded": embedded,
            "windows": int(len(corpus.doc) + len(evals.doc)),
            "tokens": enc.stats["tokens_embedded"],
            "pairs_at_0.8": len(pairs),
        },
        evals,
        corpus,
    )


def flagged_pairs(evals, corpus, threshold: float) -> set[tuple[int, int]]:
    """(eval doc, training doc) pairs with a window pair at or above ``threshold``."""
    q, i = np.nonzero(evals.vectors @ corpus.vectors.T >= threshold)
    return set(zip(evals.doc[q].tolist(), corpus.doc[i].tolist()))


def agreement(a, b, evals_a, evals_b, precision: str) -> dict:
    """Cosine between the same windows' two embeddings (``a`` at ``precision``, ``b`` fp32), and flagged-pair
    agreement at two thresholds."""
    same = np.concatenate([(a.vectors * b.vectors).sum(axis=1), (evals_a.vectors * evals_b.vectors).sum(axis=1)])
    out = {
        "windows": int(len(same)),
        "cosine_min": round(float(same.min()), 5),
        "cosine_p1": round(float(np.quantile(same, 0.01)), 5),
        "cosine_median": round(float(np.median(same)), 5),
    }
    for t in (0.8, 0.9):
        sa, sb = flagged_pairs(evals_a, a, t), flagged_pairs(evals_b, b, t)
        out[f"pairs_at_{t}"] = {precision: len(sa), "fp32": len(sb), "both": len(sa & sb)}
    return out


def summary_row(out: dict, precision: str) -> dict:
    """The docs table's row (information): the semantic pass's training docs/s against the lexical audit's."""
    ours, lexical_rate = out["docs_per_s"][f"semantic ({precision})"], out["docs_per_s"]["lexical"]
    return {
        "benchmark": "leakage_semantic",
        "unit": "train docs/s",
        "ours": ours,
        "case": f"{out['train_docs']:,} train / {out['eval_docs']:,} eval docs, semantic pass ({precision})",
        "best_peer": "lexical audit (same run)",
        "best_peer_value": lexical_rate,
        "ratio_vs_best_peer": ours / lexical_rate,
        "limit": None,
        "fraction_of_limit": None,
        "goal": None,
        "meets_goal": None,
    }


def main() -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from-split", action="store_true", help="read data/split instead of building it")
    parser.add_argument("--fp32-docs", type=int, default=300)
    add_smoke(parser, RESULTS)
    args = parser.parse_args()
    from tasks.config import load_params

    results = out_path(args, RESULTS)
    cfg = load_params(ROOT / "params.yaml").leakage
    train, evals = corpora(args.from_split, SMOKE_SOURCE_DOCS if args.smoke else None)
    train_texts, eval_texts = [str(t) for t in train["text"]], [str(t) for t in evals["text"]]
    if args.smoke:
        train_texts, eval_texts, args.fp32_docs = train_texts[:SMOKE_TRAIN], eval_texts[:SMOKE_EVAL], SMOKE_FP32_DOCS
        cfg = cfg.model_copy(update={"semantic": cfg.semantic.model_copy(update={"batch_size": SMOKE_BATCH})})
        train_texts, eval_texts = (
            [" ".join(t.split()[:SMOKE_WORDS]) for t in texts] for texts in (train_texts, eval_texts)
        )
    out = {"train_docs": len(train_texts), "eval_docs": len(eval_texts)}
    out["lexical"] = lexical(train_texts, eval_texts, cfg)
    out["semantic"], _, _ = semantic_pass(train_texts, eval_texts, cfg, cfg.semantic.cpu_precision)
    sample = train_texts[: args.fp32_docs]
    n = len(train_texts)
    out["docs_per_s"] = {
        "lexical": n / out["lexical"]["wall_s"],
        f"semantic ({cfg.semantic.cpu_precision})": n / out["semantic"]["wall_s"],
    }
    runs = {p: semantic_pass(sample, eval_texts, cfg, p) for p in ("fp32", "bf16", "int8")}
    for p, (timing, _, _) in runs.items():
        out["docs_per_s"][f"semantic {p} (first {len(sample)} docs)"] = round(len(sample) / timing["wall_s"], 1)
    out["agreement_with_fp32"] = {
        p: agreement(runs[p][2], runs["fp32"][2], runs[p][1], runs["fp32"][1], p) for p in ("bf16", "int8")
    }
    out["rows"] = [summary_row(out, cfg.semantic.cpu_precision)]
    write_results(results, out, MEASURED, args.smoke)
    return out


if __name__ == "__main__":
    main()
