"""Benchmark of the leakage detectors on the default corpora: training documents checked per second.

Builds the default corpora with the project's own ``ingest`` and ``split`` stages (params.yaml, every row
its own cluster) in a temporary folder, then times, on the same normalized words:

- ``baseline_set_intersection``: plain Python, per training doc ``set(n-grams) & eval n-grams`` for every
  n-gram length in use (13 and the shorter whole-text lengths), as a naive decontamination script does;
- ``ngram``: ``tasks.leakage.ngram_matches`` (numpy hashed n-grams, word-verified hits, spans and scores),
  including the word hashing;
- ``minhash``: ``minhash_doc_matches`` + ``minhash_passage_matches`` (signatures, banding, exact Jaccard).

Timings are noisy on a shared machine, so the result is the ratio to the baseline measured in the same run.
Also checks that the n-gram method and the baseline flag the same training docs. Writes
``benchmarks/results/leakage.json``. Run: ``.venv/bin/python benchmarks/leakage.py`` (about 1-2 minutes).
"""

from __future__ import annotations

import sys
from pathlib import Path

# Python puts this folder first on sys.path; benchmarks/tokenize.py would then shadow the stdlib module.
ROOT = Path(__file__).resolve().parents[1]
sys.path[0] = str(ROOT)

import json  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import pandas as pd  # noqa: E402

from benchmarks._reference import word_ngrams  # noqa: E402
from tasks import ingest, leakage, split  # noqa: E402
from tasks.common.textnorm import words  # noqa: E402
from tasks.config import Paths, read_yaml  # noqa: E402
from tasks.config.ingest import IngestParams  # noqa: E402
from tasks.config.leakage import LeakageParams  # noqa: E402
from tasks.config.split import SplitParams  # noqa: E402
from tasks.tracking import NullLog  # noqa: E402


def default_corpora(raw: dict, folder: Path):
    """``(train frame, eval frame)`` of the default sources after ingest and split (no dedup)."""
    paths = Paths(data=folder / "data", models=folder / "m", metrics=folder / "x", reports=folder / "r")
    ingest.run(IngestParams(**raw["ingest"]), paths, NullLog())
    dedup_dir = paths.stage_data("dedup")
    dedup_dir.mkdir(parents=True)
    for file in sorted(paths.stage_data("ingest").glob("*.parquet")):
        frame = pd.read_parquet(file)
        frame.assign(cluster_id=frame["doc_id"], is_duplicate=False).to_parquet(dedup_dir / file.name, index=False)
    split.run(SplitParams(**raw["split"]), paths, NullLog())
    rows = pd.concat([pd.read_parquet(f) for f in sorted(paths.stage_data("split").glob("*.parquet"))])
    return leakage.train_rows(rows), leakage.eval_rows(rows)


def baseline_hits(train_tokens, eval_tokens, cfg: LeakageParams) -> set[int]:
    """Training docs sharing an n-gram with any eval doc: Python sets of space-joined n-grams."""
    by_length: dict[int, set[str]] = {}
    for tokens in eval_tokens:
        if len(tokens) >= cfg.min_match_words:
            length = min(cfg.ngram_words, len(tokens))
            by_length.setdefault(length, set()).update(word_ngrams(tokens, length))
    return {
        i for i, tokens in enumerate(train_tokens) if any(word_ngrams(tokens, n) & grams for n, grams in by_length.items())
    }


def timed(fn, *args):
    start = time.perf_counter()
    result = fn(*args)
    return result, time.perf_counter() - start


def main() -> dict:
    raw = read_yaml(ROOT / "params.yaml")
    cfg = LeakageParams(**raw["leakage"])
    with tempfile.TemporaryDirectory(prefix="bench-leakage-") as tmp:
        trains, evals = default_corpora(raw, Path(tmp))
    train_tokens = [words(t) for t in trains["text"]]
    eval_tokens = [words(t) for t in evals["text"]]
    base, t_base = timed(baseline_hits, train_tokens, eval_tokens, cfg)
    (train_side, eval_side), t_ids = timed(leakage.make_sides, train_tokens, eval_tokens)
    ngram, t_ngram = timed(leakage.ngram_matches, train_side, eval_side, cfg)
    doc, t_doc = timed(leakage.minhash_doc_matches, train_side, eval_side, cfg)
    passage, t_passage = timed(leakage.minhash_passage_matches, train_side, eval_side, cfg)
    n = len(train_tokens)
    rates = {
        "baseline_set_intersection": n / t_base,
        "ngram": n / (t_ids + t_ngram),
        "minhash": n / (t_doc + t_passage),
    }
    result = {
        "corpus": {
            "train_docs": n,
            "eval_docs": len(eval_tokens),
            "train_words": sum(map(len, train_tokens)),
            "eval_words": sum(map(len, eval_tokens)),
        },
        "seconds": {
            "baseline_set_intersection": t_base,
            "ngram": t_ids + t_ngram,
            "minhash_doc": t_doc,
            "minhash_passage": t_passage,
        },
        "docs_per_second": rates,
        "ratio_vs_baseline": {k: v / rates["baseline_set_intersection"] for k, v in rates.items()},
        "flagged_train_docs": {
            "baseline": len(base),
            "ngram": len({i for i, *_ in ngram}),
            "minhash_doc": len({i for i, *_ in doc}),
            "minhash_passage": len({i for i, *_ in passage}),
        },
        "ngram_agrees_with_baseline": base == {i for i, *_ in ngram},
    }
    out = ROOT / "benchmarks" / "results" / "leakage.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return result


if __name__ == "__main__":
    print(json.dumps(main(), indent=2, sort_keys=True))
