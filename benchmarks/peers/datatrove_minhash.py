"""Runs datatrove's MinHash dedup (signature -> buckets -> cluster -> filter) on a JSONL of {"id", "text"} documents.

Run it with datatrove's own environment, never the pipeline's::

    benchmarks/.peers/datatrove/bin/python benchmarks/peers/datatrove_minhash.py \
        --input docs.jsonl --workdir /tmp/dt --output result.json --workers 2 [--variant spacy|whitespace]

Follows datatrove's ``examples/minhash_deduplication.py`` (four executors chained with ``depends=``), with
``LocalPipelineExecutor`` instead of Slurm. Variants differ only in the word tokenizer:
``spacy``: datatrove's default for ``language="en"`` (spaCy ``blank("en")``); ``whitespace``: ``str.split()`` on
the already simplified text (datatrove accepts a ``WordTokenizer`` instance as ``language``), datatrove "at its best".
The executors start their pools with ``fork`` (``--start-method``; datatrove's default is ``forkserver``, whose
workers import datatrove and spaCy again in each of the four executors): on Linux a user who knows the executor
picks it (same clusters; about 2-5 s less a run on BBC News, 4 of 4 alternated pairs). Two more settings a user
tuning it for this corpus picks: ``TextNormConfig(norm_numbers=False, norm_unicode_diacritics=False)``, since
clozeline keeps digits and diacritics (the same work; the per-character NFD strip costs about as much as the rest
of ``simplify_text``), and ``SHARDS_PER_WORKER`` input shards a worker, so that no worker idles while another
finishes a large contiguous shard (the executor hands each task to the next free worker). The input is read and
rewritten as shards inside the clock: ``JsonlReader`` shards by file, so the tool needs them.
See benchmarks/peers/README.md for every setting and the output format.
"""

import time

T0 = time.perf_counter()  # before the heavy imports: "seconds" includes importing datatrove, spaCy, numpy

import argparse  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
from array import array  # noqa: E402
from pathlib import Path  # noqa: E402

from _measure import TreeMemory, read_jsonl, write_result  # noqa: E402

N_GRAMS, NUM_BUCKETS, HASHES_PER_BUCKET, SEED = 5, 16, 8, 1
VARIANTS = ("spacy", "whitespace")
SHARDS_PER_WORKER = 4


def main() -> None:
    args = _parse()
    mem = TreeMemory().start()
    t_imports = time.perf_counter()
    from importlib.metadata import version

    from _datatrove_words import SplitTokenizer
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.dedup import MinhashDedupCluster, MinhashDedupFilter, MinhashDedupSignature
    from datatrove.pipeline.dedup.minhash import MinhashConfig, MinhashDedupBuckets
    from datatrove.pipeline.readers import JsonlReader
    from datatrove.pipeline.writers.jsonl import JsonlWriter
    from datatrove.utils.hashing import HashConfig
    from datatrove.utils.text import TextNormConfig
    from datatrove.utils.typeshelper import Languages

    if args.variant == "spacy":
        language, tokenizer_desc = Languages.english, "datatrove default for language='en': spaCy blank('en') tokenizer"
    else:
        language, tokenizer_desc = SplitTokenizer(), "str.split() on the simplified text (custom WordTokenizer)"
    t_work = time.perf_counter()

    work = Path(args.workdir) / f"datatrove-{args.variant}"
    if work.exists():  # datatrove skips tasks it finds completed in a logging dir: never reuse one
        shutil.rmtree(work)
    docs = read_jsonl(args.input)
    shard_ids = _write_shards(docs, work / "input", SHARDS_PER_WORKER * args.workers)
    shards = len(shard_ids)

    config = MinhashConfig(
        n_grams=N_GRAMS,
        num_buckets=NUM_BUCKETS,
        hashes_per_bucket=HASHES_PER_BUCKET,
        seed=SEED,
        norm_config=TextNormConfig(norm_numbers=False, norm_unicode_diacritics=False),
        hash_config=HashConfig(precision=64, hash_fc="xxhash"),
    )

    def reader():
        return JsonlReader(str(work / "input"), compression=None, text_key="text", id_key="id")

    stage1 = LocalPipelineExecutor(
        pipeline=[
            reader(),
            MinhashDedupSignature(output_folder=str(work / "signatures"), config=config, language=language),
        ],
        tasks=shards,
        workers=args.workers,
        logging_dir=str(work / "logs/signatures"),
        start_method=args.start_method,
    )
    stage2 = LocalPipelineExecutor(
        pipeline=[
            MinhashDedupBuckets(
                input_folder=str(work / "signatures"), output_folder=str(work / "buckets"), config=config
            )
        ],
        tasks=config.num_buckets,
        workers=args.workers,
        logging_dir=str(work / "logs/buckets"),
        depends=stage1,
        start_method=args.start_method,
    )
    stage3 = LocalPipelineExecutor(
        pipeline=[
            MinhashDedupCluster(
                input_folder=str(work / "buckets"),
                output_folder=str(work / "remove_ids"),
                config=config,
                save_cluster_id=True,
            )
        ],
        tasks=1,
        logging_dir=str(work / "logs/clusters"),
        depends=stage2,
        start_method=args.start_method,
    )
    stage4 = LocalPipelineExecutor(
        pipeline=[
            reader(),
            MinhashDedupFilter(
                input_folder=str(work / "remove_ids"),
                exclusion_writer=JsonlWriter(str(work / "removed"), compression=None),
            ),
            JsonlWriter(str(work / "output"), compression=None),
        ],
        tasks=shards,
        workers=args.workers,
        logging_dir=str(work / "logs/filter"),
        depends=stage3,
        start_method=args.start_method,
    )
    stage4.run()
    t_done = time.perf_counter()

    removed = read_jsonl_dir(work / "removed")
    kept = read_jsonl_dir(work / "output")
    clusters, removed_by_files = _read_cluster_files(work / "remove_ids", shard_ids)
    if removed_by_files != sorted(d["id"] for d in removed):
        raise RuntimeError("datatrove's .remove files and the documents its filter dropped disagree")
    workdir_bytes = sum(p.stat().st_size for p in work.rglob("*") if p.is_file())
    if not args.keep_workdir:
        shutil.rmtree(work)
    memory = mem.stop()

    result = {
        "tool": f"datatrove {version('datatrove')}",
        "variant": args.variant,
        "settings": {
            "word_tokenizer": tokenizer_desc,
            "normalization": "datatrove simplify_text: lowercase, punctuation -> space, whitespace runs -> one "
            "space; digits, diacritics and weekday/month names kept (norm_numbers and norm_unicode_diacritics "
            "off: clozeline keeps both)",
            "text_norm_config": vars(config.norm_config),
            "shingles": f"word {N_GRAMS}-grams joined by ' ' (a document with fewer than {N_GRAMS} words gets no "
            "signature and can never be a duplicate)",
            "shingle_hash": "xxhash xxh64_intdigest of the joined n-gram string (HashConfig hash_fc='xxhash')",
            "minhash": "(a * h + b) mod (2^61 - 1) in uint64 (a*h wraps mod 2^64 first), "
            f"a, b from numpy RandomState(seed={SEED}); precision 64",
            "precision_bits": config.hash_config.precision,
            "num_perm": config.num_buckets * config.hashes_per_bucket,
            "bands": config.num_buckets,
            "rows": config.hashes_per_bucket,
            "threshold": None,
            "lsh_threshold_implied": round((1 / config.num_buckets) ** (1 / config.hashes_per_bucket), 3),
            "jaccard_check": False,
            "jaccard_check_note": "datatrove's MinHash has no verification step: every pair that collides in any "
            "band is a duplicate (no threshold parameter exists)",
            "clustering": "union-find over all band collisions (union by size); the root of each set is kept, "
            "every other member removed",
            "workers": args.workers,
            "tasks": {"signature": shards, "buckets": config.num_buckets, "cluster": 1, "filter": shards},
            "executor": f"LocalPipelineExecutor, start_method {args.start_method}",
            "input_shards": f"input split into {shards} contiguous JSONL shards ({SHARDS_PER_WORKER} a worker, "
            "one per signature/filter task, each handed to the next free worker; JsonlReader shards by file), "
            "written inside the clock",
        },
        "seconds": round(t_done - T0, 3),
        "seconds_excluding_imports": round(t_done - t_work, 3),
        "seconds_imports": round(t_work - t_imports, 3),
        "docs_in": len(docs),
        "docs_read_by_tool": len(removed) + len(kept),
        "docs_per_second": round(len(docs) / (t_done - T0), 1),
        **memory,
        "workdir_bytes": workdir_bytes,
        "removed_ids": [d["id"] for d in removed],
        "clusters": [c for c in clusters if len(c) >= 2],
    }
    write_result(args.output, result)
    print(json.dumps({k: v for k, v in result.items() if k not in ("removed_ids", "clusters", "settings")}))


def _write_shards(docs: list[dict], folder: Path, n: int) -> list[list[str]]:
    """Contiguous shards (no empty one); returns each shard's ids in datatrove's own document numbering,
    which counts only documents with text (its reader skips the others)."""
    n = max(1, min(n, len(docs)))
    folder.mkdir(parents=True)
    size = -(-len(docs) // n)
    shard_ids = []
    for i in range(n):
        with open(folder / f"{i:05d}.jsonl", "w", encoding="utf-8") as f:
            for doc in docs[i * size : (i + 1) * size]:
                f.write(json.dumps({"id": str(doc["id"]), "text": doc["text"]}, ensure_ascii=False) + "\n")
        shard_ids.append([str(d["id"]) for d in docs[i * size : (i + 1) * size] if d["text"]])
    return shard_ids


def _read_cluster_files(folder: Path, shard_ids: list[list[str]]) -> tuple[list[list[str]], list[str]]:
    """Clusters from the cluster step's NNNNNN.clusters files ((doc index, cluster id) uint32 pairs, one file per
    input shard) and the removed ids from its NNNNNN.remove files (uint32 doc indexes). Read here rather than
    through MinhashDedupFilter(load_cluster_ids=True), which attaches no cluster id at all in a shard that has
    no .remove file (it returns early), so kept originals there would be missing from their clusters."""
    clusters: dict[int, list[str]] = {}
    removed: list[str] = []
    for rank, ids in enumerate(shard_ids):
        path = folder / f"{rank:06d}.clusters"
        if path.exists():
            values = array("I", path.read_bytes())
            for doc, cid in zip(values[0::2], values[1::2]):
                clusters.setdefault(cid, []).append(ids[doc])
        path = folder / f"{rank:06d}.remove"
        if path.exists():
            removed += [ids[doc] for doc in array("I", path.read_bytes())]
    return list(clusters.values()), sorted(removed)


def read_jsonl_dir(folder: Path) -> list[dict]:
    return [doc for path in sorted(folder.glob("*.jsonl")) for doc in read_jsonl(path)] if folder.exists() else []


def _parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--input", required=True, help="JSONL, one {'id': str, 'text': str} per line")
    parser.add_argument("--workdir", required=True, help="scratch folder (the runner uses DIR/datatrove-VARIANT)")
    parser.add_argument("--output", required=True, help="result JSON")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--variant", choices=VARIANTS, default="spacy")
    parser.add_argument("--keep-workdir", action="store_true", help="keep datatrove's intermediate files")
    parser.add_argument(
        "--start-method",
        choices=("fork", "forkserver", "spawn"),
        default="fork",
        help="the executors' process start method (datatrove's default: forkserver)",
    )
    return parser.parse_args()


if __name__ == "__main__":
    main()
