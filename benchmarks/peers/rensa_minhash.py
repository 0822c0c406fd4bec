"""Runs a MinHash near-duplicate pipeline built on rensa (Rust MinHash, PyPI ``rensa``) on the documents of the
dedup benchmark, written as a competent rensa user would write it: rensa signs and bands, numpy carries the
arrays, Python only glues.

Run it with the pipeline's environment once the ``bench`` optional group is installed (``pip install -e
'.[bench]'``; ``benchmarks/peers/setup.sh`` does it)::

    .venv/bin/python benchmarks/peers/rensa_minhash.py --input docs.parquet --workdir /tmp/r \
        --output result.json --workers 2 --variant lsh|lsh-workers|lsh-workers-minimal

Every variant:

1. reads ``doc_id`` and ``text`` (Parquet with pyarrow, or JSONL ``{"id", "text"}``);
2. normalises and splits words, per variant (below);
3. makes each document's word 5-grams, joined by a space (a document with fewer than 5 words has none and is
   matched by its normalised text only, as clozeline does);
4. signs every document of a batch in one call (``RMinHash.from_token_sets``, 128 permutations, seed 42: rensa
   hashes the tokens with its FxHash and signs in Rust);
5. keeps each document's shingles as sorted unique 64-bit hashes (Python's string hash, which forked processes
   share) in one flat numpy array with offsets, and its normalised text as one 64-bit hash;
6. ``RMinHashLSH(threshold=0.8, num_perm=128, num_bands=16)`` (16 bands x 8 rows), ``insert_many`` and
   ``query_all``;
7. unions equal normalised texts, then verifies each document's candidates (later documents only: LSH answers
   both orders) that are not yet in its cluster by exact Jaccard of the hash sets (>= 0.8), all of one
   document's in one numpy binary search, and unions the verified ones (union-find; the smallest index kept).

Variants:
- ``lsh``: steps 2-5 in one process; normalisation ``tasks.common.matching.textnorm.normalize_many`` (clozeline's own:
  Cf removed, NFKC, casefold, whitespace collapsed), words ``textnorm.words_of_normalized`` (``\\w+``);
- ``lsh-workers``: the same normalisation, steps 2-5 sharded over ``--workers`` forked processes (contiguous
  ranges of documents, inherited at fork, never pickled); each returns numpy arrays (shingle hashes, offsets,
  text hashes) and its ``RMinHash`` objects (rensa's own compact pickling, about 670 bytes each): what step 6
  needs, no Python set or list of tokens;
- ``lsh-workers-minimal``: as ``lsh-workers`` with rensa's README's minimal normalisation: ``text.lower()`` and
  ``re.findall(r"\\w+")`` (no NFKC, no casefold, no format-character removal).

Output: as the other peer runners (benchmarks/peers/README.md): ``removed_ids``, ``clusters``, ``settings`` and
``seconds`` (from the first line, imports included). Its memory is measured from outside, as the stage's
(``benchmarks/_measure.py``, which dedup.py runs it under): a poller thread in this process would take CPU from it.
"""

import time

T0 = time.perf_counter()  # before the heavy imports: "seconds" includes importing rensa, pyarrow, numpy

import argparse  # noqa: E402
import json  # noqa: E402
import multiprocessing  # noqa: E402
import re  # noqa: E402
import sys  # noqa: E402
from itertools import chain  # noqa: E402
from pathlib import Path  # noqa: E402

from _measure import write_result  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
NGRAM, NUM_PERM, BANDS, THRESHOLD, SEED = 5, 128, 16, 0.8, 42
VARIANTS = ("lsh", "lsh-workers", "lsh-workers-minimal")
SHARDS_PER_WORKER = 4  # contiguous shards, taken in turn: long and short documents sit in different parts
WORD = re.compile(r"\w+")
_TEXTS: list[str] = []  # inherited by the forked workers


def main() -> None:
    args = _parse()
    t_imports = time.perf_counter()
    sys.path.insert(0, str(REPO))  # tasks.common.matching.textnorm: the stage's own normaliser (all but -minimal)
    from importlib.metadata import version

    import numpy as np
    import rensa

    t_work = time.perf_counter()
    ids, texts = _read(Path(args.input))
    minhashes, flat, offsets, text_keys = _signed(texts, args.variant, args.workers)
    lsh = rensa.RMinHashLSH(threshold=THRESHOLD, num_perm=NUM_PERM, num_bands=BANDS)
    lsh.insert_many(minhashes)
    candidates = lsh.query_all(minhashes)
    clusters = UnionFind(len(texts))
    _, first = np.unique(text_keys, return_inverse=True)  # equal normalised texts (wordless ones too): one cluster
    _, first_of = np.unique(first, return_index=True)
    for i, group in enumerate(first.tolist()):
        clusters.union(i, int(first_of[group]))
    checked = merged = 0
    for i, found in enumerate(candidates):
        if offsets[i] == offsets[i + 1]:
            continue
        root = clusters.find(i)
        todo = [j for j in found if j > i and clusters.find(j) != root]
        if not todo:
            continue
        checked += len(todo)
        for j in np.asarray(todo)[_jaccards(flat, offsets, i, todo) >= THRESHOLD].tolist():
            clusters.union(i, j)
            merged += 1
    roots = [clusters.find(i) for i in range(len(texts))]
    members: dict[int, list[str]] = {}
    for i, root in enumerate(roots):
        members.setdefault(root, []).append(ids[i])
    removed = [ids[i] for i, root in enumerate(roots) if root != i]
    t_done = time.perf_counter()
    result = {
        "tool": f"rensa {version('rensa')}",
        "variant": args.variant,
        "settings": _settings(args),
        "seconds": round(t_done - T0, 3),
        "seconds_excluding_imports": round(t_done - t_work, 3),
        "seconds_imports": round(t_work - t_imports, 3),
        "docs_in": len(texts),
        "docs_per_second": round(len(texts) / (t_done - T0), 1),
        "pairs_checked": checked,
        "pairs_merged": merged,
        "removed_ids": removed,
        "clusters": [c for c in members.values() if len(c) >= 2],
    }
    write_result(args.output, result)
    print(json.dumps({k: v for k, v in result.items() if k not in ("removed_ids", "clusters", "settings")}))


def _signed(texts: list[str], variant: str, workers: int):
    """``(RMinHash per doc, flat sorted unique shingle hashes, (docs + 1,) offsets, (docs,) text hashes)``."""
    import numpy as np

    global _TEXTS
    minimal = variant.endswith("-minimal")
    if variant == "lsh" or workers < 2:
        parts = [_shard((0, len(texts), minimal), texts)]
    else:
        _TEXTS = texts
        count = workers * SHARDS_PER_WORKER
        bounds = [(len(texts) * k // count, len(texts) * (k + 1) // count, minimal) for k in range(count)]
        with multiprocessing.get_context("fork").Pool(workers) as pool:
            parts = pool.map(_shard, bounds, chunksize=1)
    sizes = np.concatenate([part[2] for part in parts])
    offsets = np.zeros(len(sizes) + 1, np.int64)
    np.cumsum(sizes, out=offsets[1:])
    flat = np.concatenate([part[1] for part in parts])
    return [m for part in parts for m in part[0]], flat, offsets, np.concatenate([part[3] for part in parts])


def _shard(job: tuple, texts: list[str] | None = None):
    """Steps 2-5 for documents ``start:stop``: ``(RMinHash list, flat hashes, (docs,) sizes, (docs,) text
    hashes)``, the hashes sorted and unique within each document."""
    import numpy as np
    from rensa import RMinHash

    start, stop, minimal = job
    texts = (_TEXTS if texts is None else texts)[start:stop]
    if minimal:
        words = [WORD.findall(text.lower()) for text in texts]
        keys = [" ".join(w) for w in words]
    else:
        from tasks.common.matching import textnorm

        keys = textnorm.normalize_many(texts)
        words = list(map(textnorm.words_of_normalized, keys))
    shingles = [list(map(" ".join, zip(*(w[k:] for k in range(NGRAM))))) for w in words]
    minhashes = RMinHash.from_token_sets(shingles, NUM_PERM, SEED)
    counts = np.fromiter(map(len, shingles), np.int64, count=len(shingles))
    hashes = np.fromiter(map(hash, chain.from_iterable(shingles)), np.int64, count=int(counts.sum()))
    ends = np.cumsum(counts)
    for start, stop in zip((ends - counts).tolist(), ends.tolist()):
        hashes[start:stop].sort()  # per document: faster here than one np.lexsort((hashes, doc)) (+0.28 s at 1x)
    doc = np.repeat(np.arange(len(shingles)), counts)
    keep = np.ones(len(hashes), bool)
    keep[1:] = (hashes[1:] != hashes[:-1]) | (doc[1:] != doc[:-1])
    sizes = np.bincount(doc[keep], minlength=len(shingles))
    text_keys = np.fromiter(map(hash, keys), np.int64, count=len(keys))
    return minhashes, hashes[keep], sizes, text_keys


def _jaccards(flat, offsets, i: int, others: list[int]):
    """Exact Jaccard of document ``i``'s hash set with each of ``others``': ``(len(others),)`` float64."""
    import numpy as np

    x = flat[offsets[i] : offsets[i + 1]]
    pooled = np.concatenate([flat[offsets[j] : offsets[j + 1]] for j in others])
    sizes = np.array([offsets[j + 1] - offsets[j] for j in others])
    at = np.minimum(x.searchsorted(pooled), len(x) - 1)
    hits = np.concatenate([[0], np.cumsum(x[at] == pooled)])
    ends = np.cumsum(sizes)
    shared = hits[ends] - hits[ends - sizes]
    return shared / (len(x) + sizes - shared)


def _settings(args: argparse.Namespace) -> dict:
    minimal = args.variant.endswith("-minimal")
    return {
        "normalization": "text.lower() (rensa README)"
        if minimal
        else "tasks.common.matching.textnorm.normalize_many (Cf removed, NFKC, casefold, whitespace)",
        "words": "re.findall(r'\\w+')",
        "shingles": f"word {NGRAM}-grams joined by a space",
        "minhash": f"rensa RMinHash.from_token_sets (R-MinHash, FxHash tokens), num_perm={NUM_PERM}, seed={SEED}",
        "candidates": f"RMinHashLSH(threshold={THRESHOLD}, num_perm={NUM_PERM}, num_bands={BANDS}): insert_many, "
        "query_all",
        "jaccard_check": f"exact 5-gram Jaccard >= {THRESHOLD} (64-bit hashes, numpy) on each candidate pair not "
        "yet in one cluster",
        "clusters": "union-find over verified pairs and equal normalised texts; smallest index kept",
        "workers": 1 if args.variant == "lsh" else args.workers,
        "worker_results": "numpy arrays and RMinHash objects" if args.variant != "lsh" else None,
    }


class UnionFind:
    """Union by smallest index, path halving: each root is its set's smallest index."""

    def __init__(self, n: int) -> None:
        self.parent = list(range(n))

    def find(self, x: int) -> int:
        parent = self.parent
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def union(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)


def _read(path: Path) -> tuple[list[str], list[str]]:
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        with pq.ParquetFile(path) as parquet:
            table = parquet.read(columns=["doc_id", "text"])
        return table.column("doc_id").to_pylist(), table.column("text").to_pylist()
    rows = [json.loads(line) for line in path.open(encoding="utf-8") if line.strip()]
    return [row["id"] for row in rows], [row["text"] for row in rows]


def _parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--input", required=True, help="Parquet (doc_id, text) or JSONL ({'id', 'text'} a line)")
    parser.add_argument("--workdir", required=True, help="unused (rensa writes no scratch files)")
    parser.add_argument("--output", required=True, help="result JSON")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--variant", choices=VARIANTS, default="lsh")
    return parser.parse_args()


if __name__ == "__main__":
    main()
