"""Runs text-dedup's MinHash (with its Jaccard "check false positives" step) on Parquet (``doc_id``, ``text``) or
JSONL (``{"id", "text"}`` a line) documents.

Run it with text-dedup's own environment (Python >= 3.12), never the pipeline's::

    benchmarks/.peers/textdedup/bin/python benchmarks/peers/textdedup_minhash.py \
        --input docs.parquet --workdir /tmp/td --output result.json --workers 2

text-dedup 0.4.1's CLI (``python -m text_dedup.minhash``) only builds a ``text_dedup.config.Config`` (from a
``config.toml``, through pydantic-settings' CliApp) and calls ``text_dedup.minhash.main(config)``; this runner
builds the same Config object directly and calls the same ``main``. The input is read by text-dedup itself,
``datasets.load_dataset`` with ``file_type`` ``parquet`` (as its own ``configs/minhash.toml``, and the file the
dedup stage reads) or ``json`` for a ``.jsonl`` file. The ids and texts the result needs are read after the
clock stops. See benchmarks/peers/README.md.
"""

import time

T0 = time.perf_counter()  # before the heavy imports: "seconds" includes importing datasets, polars, numpy

import argparse  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import os  # noqa: E402
import pickle  # noqa: E402
import shutil  # noqa: E402
from pathlib import Path  # noqa: E402

from _measure import TreeMemory, read_jsonl, write_result  # noqa: E402

NGRAM, NUM_PERM, BANDS, ROWS, THRESHOLD, SEED = 5, 128, 16, 8, 0.8, 42


def main() -> None:
    args = _parse()
    mem = TreeMemory().start()
    work = Path(args.workdir) / "textdedup"
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    # datasets caches the loaded JSON and every map/filter result; keep all of it inside the workdir
    os.environ["HF_DATASETS_CACHE"] = str(work / "hf_cache")
    t_imports = time.perf_counter()
    from importlib.metadata import version

    import datasets
    from text_dedup import minhash
    from text_dedup.config import MinHashAlgorithmConfig
    from text_dedup.config.base import load_config_from_toml

    t_work = time.perf_counter()

    file_type = "parquet" if Path(args.input).suffix == ".parquet" else "json"
    # Config reads only a TOML file (its settings_customise_sources drops init kwargs), as the CLI does
    toml = work / "config.toml"
    toml.write_text(
        _toml(
            {
                "input": {
                    "input_type": "local_files",
                    "file_type": file_type,
                    "read_arguments": {
                        "path": file_type,
                        "data_files": str(Path(args.input).resolve()),
                        "split": "train",
                        "cache_dir": str(work / "hf_cache"),
                    },
                },
                "algorithm": {
                    "algorithm_name": "minhash",
                    "text_column": "text",
                    "num_perm": NUM_PERM,
                    "bands": BANDS,
                    "rows": ROWS,
                    "threshold": THRESHOLD,
                    "ngram_size": NGRAM,
                    # min_length: the default (5); also the fewest words a document needs to be kept at all
                    "min_length": NGRAM,
                    "hash_bits": 64,
                    "hash_func_name": "xxh3",
                    "seed": SEED,
                    "check_false_positive": True,
                    "num_proc": args.workers,
                },
                "output": {
                    "output_dir": str(work / "output"),
                    "save_clusters": True,
                    "keep_index_column": True,
                    "keep_cluster_column": True,
                    "clean_cache": False,
                },
                "debug": {"logging_level": logging.INFO},
            }
        )
    )
    config = load_config_from_toml(toml)
    algo = config.algorithm
    if not isinstance(algo, MinHashAlgorithmConfig):
        raise TypeError(f"text-dedup built {type(algo).__name__}, not a MinHash config")
    minhash.main(config)
    t_done = time.perf_counter()

    ids, texts = read_docs(Path(args.input))
    # __INDEX__ is the input row number (assigned before the length filter). clusters.pickle maps every
    # document that survived the Jaccard check to its cluster id (the smallest index among them); a document
    # is removed when its cluster id is not its own index.
    parents: dict[int, int] = pickle.loads((work / "output" / "clusters.pickle").read_bytes())
    removed = [ids[i] for i, c in parents.items() if c != i]
    clusters: dict[int, list[str]] = {}
    for i, c in parents.items():
        clusters.setdefault(c, []).append(ids[i])
    kept_index = set(datasets.load_from_disk(str(work / "output"))[algo.internal_index_column])
    too_short = [ids[i] for i, text in enumerate(texts) if not algo.get_filtering_func()(text)]
    dropped = sorted(ids[i] for i in set(range(len(ids))) - kept_index)
    if dropped != sorted(removed + too_short):
        raise RuntimeError("text-dedup's output and its cluster assignment disagree")
    workdir_bytes = sum(p.stat().st_size for p in work.rglob("*") if p.is_file())
    if not args.keep_workdir:
        shutil.rmtree(work)
    memory = mem.stop()

    result = {
        "tool": f"text-dedup {version('text-dedup')}",
        "variant": args.variant,
        "settings": {
            "word_tokenizer": "lowercase, then regex split on \\W (Unicode), empty pieces dropped: words = \\w+ runs",
            "normalization": "lowercase only (no Unicode normalization, digits and diacritics kept)",
            "shingles": f"word {NGRAM}-grams joined by ' ', UTF-8 bytes, as a set; a document with fewer than "
            f"min_length={NGRAM} words is dropped from the output entirely (reported as too_short_ids, not removed)",
            "shingle_hash": f"xxh3_64(seed={SEED}) & 0xFFFFFFFF (32-bit: hash_bits=64 hashes with min(64, 32) bits)",
            "minhash": "(a * h + b) mod (2^61 - 1) & (2^32 - 1) in uint64 (hash_bits=64, its 'backwards "
            f"compatibility mode'), a, b from numpy RandomState(seed={SEED}); signature values are 32-bit",
            "precision_bits": 32,
            "hash_bits_setting": algo.hash_bits,
            "num_perm": algo.num_perm,
            "bands": algo.bands,
            "rows": algo.rows,
            "threshold": algo.threshold,
            "jaccard_check": algo.check_false_positive,
            "jaccard_check_note": "check_false_positive: every pair inside each LSH connected component is "
            "compared by exact Jaccard of the 5-gram sets (>= threshold kept); all verified members of one LSH "
            "component then share one cluster id (their smallest index), without re-clustering the verified "
            "pairs themselves",
            "clustering": "LSH: documents sharing a band value are connected (polars group_by + polars_grouper "
            "super_merger connected components); the member with the smallest input index is kept",
            "workers": args.workers,
            "num_proc": algo.num_proc,
            "input": f"datasets.load_dataset('{file_type}') of the input file (input file_type {file_type})",
        },
        "seconds": round(t_done - T0, 3),
        "seconds_excluding_imports": round(t_done - t_work, 3),
        "seconds_imports": round(t_work - t_imports, 3),
        "docs_in": len(ids),
        "docs_per_second": round(len(ids) / (t_done - T0), 1),
        **memory,
        "workdir_bytes": workdir_bytes,
        "too_short_ids": sorted(too_short),
        "removed_ids": removed,
        "clusters": [c for c in clusters.values() if len(c) >= 2],
    }
    write_result(args.output, result)
    print(
        json.dumps(
            {k: v for k, v in result.items() if k not in ("removed_ids", "clusters", "settings", "too_short_ids")}
        )
    )


def read_docs(path: Path) -> tuple[list[str], list[str]]:
    """The documents' ids and texts in input order (``__INDEX__`` numbers them so): Parquet ``doc_id`` and
    ``text`` (pyarrow, which ``datasets`` installs), or JSONL ``id`` and ``text``."""
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        table = pq.read_table(path, columns=["doc_id", "text"])
        return [str(i) for i in table.column("doc_id").to_pylist()], table.column("text").to_pylist()
    docs = read_jsonl(path)
    return [str(d["id"]) for d in docs], [d["text"] for d in docs]


def _toml(tables: dict) -> str:
    """The few TOML shapes the config needs: tables of scalars and one inline table of strings."""

    def value(v: object) -> str:
        if isinstance(v, dict):
            return "{ " + ", ".join(f"{k} = {value(x)}" for k, x in v.items()) + " }"
        return json.dumps(v)  # bools, ints, floats and (JSON-escaped) strings are valid TOML as JSON writes them

    return "".join(
        f"[{name}]\n" + "".join(f"{k} = {value(v)}\n" for k, v in table.items()) + "\n"
        for name, table in tables.items()
    )


def _parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--input", required=True, help="Parquet (doc_id, text) or JSONL ({'id', 'text'} a line)")
    parser.add_argument("--workdir", required=True, help="scratch folder (the runner uses DIR/textdedup)")
    parser.add_argument("--output", required=True, help="result JSON")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--variant", choices=("default",), default="default")
    parser.add_argument("--keep-workdir", action="store_true", help="keep text-dedup's output and datasets cache")
    return parser.parse_args()


if __name__ == "__main__":
    main()
