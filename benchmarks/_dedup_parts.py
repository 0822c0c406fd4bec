"""The parts of the dedup benchmark that run our code, each in its own fresh process started by dedup.py:
``python benchmarks/_dedup_parts.py PART WORKDIR``. Only what the part needs is imported, as in a stage run.

Each writes ``<workdir>/<part>.json``: ``inner_seconds``, the time of the measured work without the interpreter
start and imports, and (naive) its duplicate clusters (``clusters``, lists of document ids) and the documents it
removes (``removed``); the stage's are read from its outputs by ``dedup.stage_clusters``, unmeasured.
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
from tasks.common.matching import minhash, textnorm  # noqa: E402
from tasks.common.matching.unionfind import UnionFind  # noqa: E402
from tasks.config import Paths, read_yaml  # noqa: E402
from tasks.config.corpus.dedup import DedupParams  # noqa: E402
from tasks.tracking import NullLog  # noqa: E402


def measure(part: str, work: Path) -> None:
    """Run ``part`` ("stage", "naive" or "limit") on ``<work>/data/ingest/bench.parquet``."""
    given = work / "params.json"  # written by dedup.py: params.yaml's dedup values, read without the YAML parser
    values = json.loads(given.read_text()) if given.exists() else read_yaml(REPO / "params.yaml")["dedup"]
    cfg = DedupParams.model_validate({**values, "keep_one_per": "cluster"})
    start = time.perf_counter()
    out = {"stage": run_stage, "naive": run_naive, "limit": run_limit}[part](cfg, work)
    out["inner_seconds"] = time.perf_counter() - start
    (work / f"{part}.json").write_text(json.dumps(out))


def run_stage(cfg: DedupParams, work: Path) -> dict:
    """The dedup stage end to end, and nothing else: its clusters are read from its outputs afterwards, outside
    the measured process (``dedup.stage_clusters``), as a user reads them."""
    dedup.run(cfg, Paths(data=work / "data", models=work, metrics=work, reports=work), NullLog())
    return {}


def run_limit(cfg: DedupParams, work: Path) -> dict:
    """The limit: what no MinHash dedup at these settings can skip, each step at its fastest known.

    - ``read_seconds``: the Parquet read of the texts (the interpreter start and imports are not counted);
    - ``normalize_seconds``: ``textnorm.normalize_many`` of every text on the stage's worker count and shards
      (forked workers; nothing comes back but counts);
    - ``kernel_seconds``: the fastest known signing kernel, rensa's ``RMinHash.digest_matrix_from_flat_token_hashes``
      on every document's 5-gram hashes (made beforehand, not counted), else our own ``minhash.signatures``.
    ``seconds`` is their sum: the interpreter start, imports, word splitting, shingling, LSH, verification and
    output are not in it.
    """
    global _TEXTS
    start = time.perf_counter()
    _TEXTS = _texts(work)
    read_seconds = time.perf_counter() - start
    bounds = [(k, min(k + cfg.shard_size_docs, len(_TEXTS))) for k in range(0, len(_TEXTS), cfg.shard_size_docs)]
    start = time.perf_counter()
    with ProcessPoolExecutor(cfg.num_proc, mp_context=multiprocessing.get_context("fork")) as pool:
        normalized = sum(pool.map(_normalize, bounds))
    normalize_seconds = time.perf_counter() - start
    shingles = [s for k, stop in bounds for s in _shingles(_TEXTS[k:stop], cfg.shingle_size_words)]
    flat = np.concatenate([np.zeros(0, np.uint64)] + shingles)
    offsets = np.concatenate([[0], np.cumsum([len(s) for s in shingles])]).astype(np.uint64)
    try:
        from rensa import RMinHash

        kernel = f"rensa {_version('rensa')} RMinHash.digest_matrix_from_flat_token_hashes"
        start = time.perf_counter()
        RMinHash.digest_matrix_from_flat_token_hashes(flat, offsets, cfg.num_perm, cfg.seed)
    except ImportError:
        kernel = "tasks.common.matching.minhash.signatures (rensa not installed)"
        a, b = minhash.permutations(cfg.num_perm, cfg.seed)
        start = time.perf_counter()
        minhash.signatures(shingles, a, b)
    kernel_seconds = time.perf_counter() - start
    return {
        "seconds": read_seconds + normalize_seconds + kernel_seconds,
        "read_seconds": read_seconds,
        "normalize_seconds": normalize_seconds,
        "kernel_seconds": kernel_seconds,
        "kernel": kernel,
        "normalized": normalized,
    }


_TEXTS: list[str] = []  # inherited by the forked normalizing workers


def _normalize(bounds: tuple[int, int]) -> int:
    return len(textnorm.normalize_many(_TEXTS[bounds[0] : bounds[1]]))


def _shingles(texts: list[str], n: int) -> list[np.ndarray]:
    values, doc = minhash.word_hash_stream(textnorm.normalize_many(texts), minhash.WordHashes())
    return [minhash.sorted_unique(w) for w in minhash.shingle_windows(values, doc, len(texts), n)]


def _version(package: str) -> str:
    from importlib.metadata import version

    return version(package)


def _clusters_of(labels: list[int]) -> list[list[int]]:
    members: dict[int, list[int]] = {}
    for doc, label in enumerate(labels):
        members.setdefault(label, []).append(doc)
    return [docs for docs in members.values() if len(docs) > 1]


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
    roots = [clusters.find(i) for i in range(len(texts))]
    return {"removed": [i for i in range(len(texts)) if roots[i] != i], "clusters": _clusters_of(roots)}


def _texts(work: Path) -> list[str]:
    with pq.ParquetFile(work / "data" / "ingest" / "bench.parquet") as parquet:
        return parquet.read(columns=["text"]).column(0).to_pylist()


if __name__ == "__main__":
    measure(sys.argv[1], Path(sys.argv[2]))
