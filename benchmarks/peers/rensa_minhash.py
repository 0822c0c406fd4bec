"""Runs a MinHash near-duplicate pipeline built on rensa (Rust MinHash, PyPI ``rensa``) on the documents of the
dedup benchmark, normalised and shingled exactly as clozeline's dedup stage does.

Run it with the pipeline's environment once the ``bench`` optional group is installed (``pip install -e
'.[bench]'``; ``benchmarks/peers/setup.sh`` does it)::

    .venv/bin/python benchmarks/peers/rensa_minhash.py --input docs.parquet --workdir /tmp/r \
        --output result.json --workers 2 --variant lsh|lsh-workers|deduplicator

rensa is a kernel library, not a pipeline: this runner is the pipeline a user writes around it, given rensa's
fastest paths (its README's "Batch APIs"). Every variant:

1. reads ``id`` and ``text`` (Parquet with pyarrow, or JSONL);
2. normalises with ``tasks.common.textnorm.normalize_many`` (Cf removed, NFKC, casefold, whitespace collapsed;
   clozeline's own, the fastest normaliser here) and splits words with ``textnorm.words_of_normalized``
   (``\\w+``);
3. builds each document's set of word 5-grams (joined by a space); a document with fewer than 5 words has none
   and is matched by its normalised text only (as clozeline does);
4. signs every document in one batch call (``RMinHash.from_token_sets``, 128 permutations, seed 42: rensa
   hashes the tokens and signs in Rust);
5. finds candidates with rensa's LSH or deduplicator (below), 16 bands x 8 rows;
6. verifies each candidate pair by exact Jaccard of the 5-gram sets (>= 0.8), skipping pairs already in one
   cluster, and unions verified pairs and equal normalised texts (union-find); the smallest index is kept.

Variants (step 5):
- ``lsh``: ``RMinHashLSH(threshold=0.8, num_perm=128, num_bands=16)``, ``insert_many`` and ``query_all``; one
  process;
- ``lsh-workers``: the same, with steps 2-4 in ``--workers`` forked processes (each returns its documents'
  ``RMinHash`` objects and 64-bit shingle hashes for the Jaccard check);
- ``deduplicator``: ``RMinHashDeduplicator(threshold=0.8, num_perm=128, use_lsh=True, num_bands=16)``:
  ``add_pairs`` in index order (a document whose estimated Jaccard with a stored one reaches 0.8 is not
  stored), then ``get_duplicate_sets`` gives each document's stored near duplicates, verified as above.

Output: as the other peer runners (benchmarks/peers/README.md): ``removed_ids``, ``clusters``, ``settings``,
``seconds`` (from the first line, imports included) and memory.
"""

import time

T0 = time.perf_counter()  # before the heavy imports: "seconds" includes importing rensa, pyarrow, numpy

import argparse  # noqa: E402
import json  # noqa: E402
import multiprocessing  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

from _measure import TreeMemory, write_result  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
NGRAM, NUM_PERM, BANDS, THRESHOLD, SEED = 5, 128, 16, 0.8, 42
VARIANTS = ("lsh", "lsh-workers", "deduplicator")


def main() -> None:
    args = _parse()
    mem = TreeMemory().start()
    t_imports = time.perf_counter()
    sys.path.insert(0, str(REPO))  # tasks.common.textnorm: the stage's own normaliser
    from importlib.metadata import version

    import rensa  # noqa: F401

    from tasks.common import textnorm  # noqa: F401

    t_work = time.perf_counter()
    ids, texts = _read(Path(args.input))
    if args.variant == "lsh-workers" and args.workers > 1:
        step = -(-len(texts) // args.workers)
        shards = [texts[k : k + step] for k in range(0, len(texts), step)]
        with multiprocessing.get_context("fork").Pool(args.workers) as pool:
            parts = pool.starmap(_sign_shard, [(shard, True) for shard in shards])
        normalized = [t for part in parts for t in part[0]]
        sets = [s for part in parts for s in part[1]]
        minhashes = [m for part in parts for m in part[2]]
    else:
        normalized, sets, minhashes = _sign_shard(texts)
    clusters = UnionFind(len(texts))
    first_of_text: dict[str, int] = {}
    for i, text in enumerate(normalized):  # equal normalised texts (wordless ones included) are one cluster
        clusters.union(i, first_of_text.setdefault(text, i))
    if args.variant == "deduplicator":
        candidates = _deduplicator_candidates(minhashes)
    else:
        from rensa import RMinHashLSH

        lsh = RMinHashLSH(threshold=THRESHOLD, num_perm=NUM_PERM, num_bands=BANDS)
        lsh.insert_many(minhashes)
        candidates = lsh.query_all(minhashes)
    checked = merged = 0
    symmetric = args.variant != "deduplicator"
    for i, found in enumerate(candidates):
        if not sets[i]:
            continue
        for j in found:
            # LSH answers both orders of a pair: take it once; the deduplicator answers stored (earlier) rows
            if (j <= i if symmetric else j == i) or clusters.find(i) == clusters.find(j):
                continue
            checked += 1
            a, b = sets[i], sets[j]
            shared = len(a & b)
            if shared >= THRESHOLD * (len(a) + len(b) - shared):
                clusters.union(i, j)
                merged += 1
    members: dict[int, list[str]] = {}
    for i in range(len(texts)):
        members.setdefault(clusters.find(i), []).append(ids[i])
    removed = [ids[i] for i in range(len(texts)) if clusters.find(i) != i]
    t_done = time.perf_counter()
    memory = mem.stop()
    result = {
        "tool": f"rensa {version('rensa')}",
        "variant": args.variant,
        "settings": {
            "normalization": "tasks.common.textnorm.normalize_many (Cf removed, NFKC, casefold, whitespace)",
            "words": "textnorm.words_of_normalized (\\w+)", "shingles": f"word {NGRAM}-grams joined by a space",
            "minhash": f"rensa RMinHash.from_token_sets (R-MinHash, FxHash tokens), num_perm={NUM_PERM}, seed={SEED}",
            "candidates": {"lsh": f"RMinHashLSH(threshold={THRESHOLD}, num_perm={NUM_PERM}, num_bands={BANDS})",
                           "lsh-workers": f"as lsh; steps 2-4 in {args.workers} forked processes",
                           "deduplicator": f"RMinHashDeduplicator(threshold={THRESHOLD}, num_perm={NUM_PERM}, "
                                           f"use_lsh=True, num_bands={BANDS}): add_pairs, get_duplicate_sets"
                           }[args.variant],
            "jaccard_check": f"exact 5-gram Jaccard >= {THRESHOLD} on each candidate pair not yet in one cluster",
            "clusters": "union-find over verified pairs and equal normalised texts; smallest index kept",
            "workers": args.workers if args.variant == "lsh-workers" else 1,
        },
        "seconds": round(t_done - T0, 3),
        "seconds_excluding_imports": round(t_done - t_work, 3),
        "seconds_imports": round(t_work - t_imports, 3),
        "docs_in": len(texts),
        "docs_per_second": round(len(texts) / (t_done - T0), 1),
        "pairs_checked": checked,
        "pairs_merged": merged,
        **memory,
        "removed_ids": removed,
        "clusters": [c for c in members.values() if len(c) >= 2],
    }
    write_result(args.output, result)
    print(json.dumps({k: v for k, v in result.items() if k not in ("removed_ids", "clusters", "settings")}))


def _sign_shard(texts: list[str], hashed: bool = False) -> tuple[list[str], list[set], list]:
    """Normalised texts, 5-gram sets (``hashed``: as 64-bit hashes, Python's string hash, which forked processes
    share: cheaper to send back) and rensa signatures of ``texts``."""
    from rensa import RMinHash

    from tasks.common import textnorm

    normalized = textnorm.normalize_many(texts)
    shingles = []
    for text in normalized:
        words = textnorm.words_of_normalized(text)
        shingles.append(set(map(" ".join, zip(*(words[k:] for k in range(NGRAM))))))
    minhashes = RMinHash.from_token_sets(shingles, NUM_PERM, SEED)
    return normalized, [set(map(hash, s)) for s in shingles] if hashed else shingles, minhashes


def _deduplicator_candidates(minhashes: list) -> list[list[int]]:
    from rensa import RMinHashDeduplicator

    dedup = RMinHashDeduplicator(threshold=THRESHOLD, num_perm=NUM_PERM, use_lsh=True, num_bands=BANDS, seed=SEED)
    dedup.add_pairs([(str(i), m) for i, m in enumerate(minhashes)])
    return [[int(key) for key in keys] for keys in dedup.get_duplicate_sets(minhashes)]


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
