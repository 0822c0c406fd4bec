"""The parts of the dedup benchmark that run our code, each in its own fresh process started by dedup.py:
``python benchmarks/_dedup_parts.py PART WORKDIR``. Only what the part needs is imported, as in a stage run.

Each writes ``<workdir>/<part>.json``: the ids of the documents it removes (``removed``) where it clusters,
and ``inner_seconds``, the time of the measured work without the interpreter start and imports.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# Run as a script, benchmarks/ would lead sys.path and benchmarks/tokenize.py shadow the standard library's.
sys.path[:] = [str(REPO)] + [p for p in sys.path if Path(p or ".").resolve() != REPO / "benchmarks"]

import json  # noqa: E402
import multiprocessing  # noqa: E402
import time  # noqa: E402
from concurrent.futures import ProcessPoolExecutor  # noqa: E402

import numpy as np  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from benchmarks._reference import word_ngrams  # noqa: E402
from tasks import dedup  # noqa: E402
from tasks.common import minhash, textnorm  # noqa: E402
from tasks.common.unionfind import UnionFind  # noqa: E402
from tasks.config import Paths, read_yaml  # noqa: E402
from tasks.config.dedup import DedupParams  # noqa: E402
from tasks.tracking import NullLog  # noqa: E402


def measure(part: str, work: Path) -> None:
    """Run ``part`` ("stage", "naive" or "limit") on ``<work>/data/ingest/bench.parquet``."""
    cfg = DedupParams.model_validate({**read_yaml(REPO / "params.yaml")["dedup"], "keep_one_per": "cluster"})
    start = time.perf_counter()
    out = {"stage": run_stage, "naive": run_naive, "limit": run_limit}[part](cfg, work)
    out["inner_seconds"] = time.perf_counter() - start
    (work / f"{part}.json").write_text(json.dumps(out))


def run_stage(cfg: DedupParams, work: Path) -> dict:
    """The dedup stage end to end; removed = the rows it marks ``is_duplicate``."""
    dedup.run(cfg, Paths(data=work / "data", models=work, metrics=work, reports=work), NullLog())
    table = pq.read_table(work / "data" / "dedup" / "bench.parquet", columns=["doc_id", "is_duplicate"])
    ids, duplicate = table.column("doc_id").to_pylist(), table.column("is_duplicate").to_pylist()
    return {"removed": [int(doc_id) for doc_id, flag in zip(ids, duplicate) if flag]}


def run_limit(cfg: DedupParams, work: Path) -> dict:
    """Normalize, split, hash and sign every text already in memory, on the stage's worker count and shards:
    the per-document work of MinHash at these settings, without I/O, exact matching, LSH or verification."""
    texts = _texts(work)
    a, b = minhash.permutations(cfg.num_perm, cfg.seed)
    shards = [(texts[k : k + cfg.shard_size_docs], cfg.shingle_size_words, a, b)
              for k in range(0, len(texts), cfg.shard_size_docs)]  # fmt: skip
    start = time.perf_counter()
    with ProcessPoolExecutor(cfg.num_proc, mp_context=multiprocessing.get_context("fork")) as pool:
        signed = sum(len(part) for part in pool.map(_sign, shards))
    return {"kernel_seconds": time.perf_counter() - start, "signed": signed}


def _sign(job: tuple) -> np.ndarray:
    texts, n, a, b = job
    values, doc = minhash.word_hash_stream(textnorm.normalize_many(texts), minhash.WordHashes())
    return minhash.signatures(minhash.shingle_windows(values, doc, len(texts), n), a, b)


def run_naive(cfg: DedupParams, work: Path) -> dict:
    """What a user writes with datasketch alone: one ``MinHash.update`` per shingle, ``MinHashLSH`` insert and
    query, exact Jaccard on the shingle sets and union-find; one row kept per cluster (the first)."""
    from datasketch import MinHash, MinHashLSH

    texts = _texts(work)
    shingle_sets = [word_ngrams(textnorm.words(text), cfg.shingle_size_words) for text in texts]
    lsh = MinHashLSH(num_perm=cfg.num_perm, params=minhash.lsh_bands_rows(cfg.threshold, cfg.num_perm, cfg.lsh_weights))
    sketches = []
    for i, shingles in enumerate(shingle_sets):
        sketch = MinHash(num_perm=cfg.num_perm, seed=cfg.seed)
        for shingle in shingles:
            sketch.update(shingle.encode("utf-8"))
        sketches.append(sketch)
        lsh.insert(i, sketch)
    clusters = UnionFind(priority=lambda row: row)
    first_of_text: dict[str, int] = {}
    for i, text in enumerate(texts):
        clusters.union(i, first_of_text.setdefault(textnorm.normalize(text), i))
    for i, sketch in enumerate(sketches):
        for j in lsh.query(sketch):
            a, b = shingle_sets[i], shingle_sets[j]
            if j > i and a and len(a & b) >= cfg.threshold * len(a | b):
                clusters.union(i, j)
    return {"removed": [i for i in range(len(texts)) if clusters.find(i) != i]}


def _texts(work: Path) -> list[str]:
    with pq.ParquetFile(work / "data" / "ingest" / "bench.parquet") as parquet:
        return parquet.read(columns=["text"]).column(0).to_pylist()


if __name__ == "__main__":
    measure(sys.argv[1], Path(sys.argv[2]))
