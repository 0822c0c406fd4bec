"""Benchmark of the dedup stage against the peers users pick instead, and against this machine's limit.

Corpora: the default ingest rows at 1x, 4x, 16x and 64x with planted near duplicates (``benchmarks/_dedup_corpus.py``:
variants replacing one word in 60, or in 30, ground truth by exact Jaccard). Every tool runs on the same
documents, each in a fresh process (``benchmarks/_measure.py``: wall time from spawn to exit, imports and I/O
included; peak RSS of the largest process and of the process tree):

- ``clozeline``: ``tasks.dedup.run`` end to end (Parquet in, Parquet + cluster report + incremental index out, from
  scratch) with params.yaml's dedup values and ``keep_one_per: cluster`` (one kept per cluster, as the peers do);
- ``rensa``: the Rust MinHash library (``benchmarks/peers/rensa_minhash.py``, version pinned in the ``bench``
  optional group), the pipeline its user writes: batch signing with ``RMinHash.from_token_sets``,
  ``RMinHashLSH``, exact Jaccard of numpy hash sets, union-find; in three variants: one process with our
  normaliser (``lsh``), 2 forked workers that return numpy arrays and their sketches (``lsh-workers``), and the same
  with rensa's README's minimal normalisation, lowercase and ``\\w+`` (``lsh-workers-minimal``);
- ``datatrove``: datatrove 0.10.1's MinHash pipeline (signature, buckets, cluster, filter) on its local
  executor, with a whitespace word tokenizer (its fastest) and, at 1x only, its default spaCy one, from JSONL;
- ``text-dedup``: text-dedup 0.4.1's MinHash with its Jaccard check, from the stage's Parquet file, as its own
  config reads (Python 3.12 environment), up to
  4x (at 16x it ran past the 600 s limit in every run);
- ``naive``: one ``datasketch.MinHash.update`` per shingle, ``MinHashLSH`` insert and query, exact Jaccard and
  union-find (1x only: about 45 docs/s);
- ``limit``: the fastest known kernel plus the unavoidable read and normalise (``_dedup_parts.run_limit``):
  the Parquet read, ``normalize_many`` on the stage's 2 workers, and rensa's batch signing of the 5-gram hashes
  (made beforehand, not counted); no interpreter start or imports.

All tools: 5-gram word shingles, 128 permutations, threshold 0.8, 16 bands x 8 rows, exact Jaccard
verification where the tool has it, 2 workers (each runner states its settings in the results). Peers run in
their own environments (``benchmarks/peers/setup.sh``; rensa in the pipeline's, from the ``bench`` group); a
missing one is reported as skipped.

Scoring is independent of which row a tool keeps (``_dedup_corpus.score``): recall is the share of true pairs
(J >= 0.8) whose two documents a tool put in one cluster, precision the share of clustered documents with a
true near duplicate in their own cluster.

Timing: the machine is shared, so our stage, the limit and rensa's variants run in alternated rounds (A, B, C, A,
B, C, ...), at least 5 rounds up to 4x and 3 above (``_provenance.min_runs``; ``--repeats`` sets more), each run's
1-minute load average recorded beside it; datatrove and text-dedup run once. Dirty pages are written back
(``os.sync``) before every run, so no tool pays for the writeback of the tool before it. Reported per tool and
size: the median docs/s with its spread, MB/s, peak RSS, clusters, documents removed, precision and recall;
``ratio_vs_best_peer`` = our median docs/s over the median of the peer variant with the best median (best-of-N
beside it, labelled), ``fraction_of_limit`` = our median over the limit's (information). Goal per size: >= 1.5x
the fastest peer by the ratio of medians, precision 1.0 and recall within 0.002 of that peer's.

Run: ``.venv/bin/python benchmarks/dedup.py [--scales 1 4 16 64] [--note TEXT]`` (about an hour on 2 cores); writes
``benchmarks/results/dedup.json`` with its provenance (commit, code fingerprint of ``tasks.dedup``, CPU).
``--smoke``: the whole path (ingest of 40 rows a source, the corpus, every tool, the results file and its table)
in seconds, results to ``--out`` or a temporary folder.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# Run as a script, Python puts benchmarks/ first on sys.path, where benchmarks/tokenize.py would shadow the
# standard library's tokenize module; import from the repo root instead.
sys.path[:] = [str(REPO)] + [p for p in sys.path if Path(p or ".").resolve() != REPO / "benchmarks"]

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from benchmarks import _dedup_corpus as corpora  # noqa: E402
from benchmarks._measure import TimedOut, run_measured  # noqa: E402
from benchmarks._provenance import (  # noqa: E402
    add_smoke,
    min_runs,
    out_path,
    ratio_fields,
    smoke_sources,
    spread,
    write_results,
)
from tasks.config import read_yaml  # noqa: E402
from tasks.config.corpus.dedup import DedupParams  # noqa: E402

RESULTS = REPO / "benchmarks" / "results" / "dedup.json"
PEERS = REPO / "benchmarks" / ".peers"
SEED = 20240611
STAGE_MODULES = ["tasks.dedup"]  # what the stage runs: its code fingerprint goes with the figures
GOALS = {"ratio_vs_best_peer": 1.5, "precision": 1.0, "recall_below_peer": 0.002}
GOAL_TEXT = ">= 1.5x fastest peer (ratio of medians), precision 1.0, recall within 0.002 of its"
SMOKE_ROWS = 40  # per ingest source (smoke_sources: wikipedia_sample left out): the path, in seconds
# name -> (environment, runner, variant, largest scale it runs at); the variant is passed as --variant.
# "pipeline" is this interpreter's environment (rensa comes from the bench optional group).
# datatrove's default spaCy tokenizer makes it about 4x slower than with whitespace words, so it runs at 1x only;
# text-dedup grows as docs**1.5 (227 s at 4x here) and passed PEER_TIMEOUT_S at 16x in every run, so it stops at 4x.
PEER_RUNS = {
    "rensa (LSH, 1 process)": ("pipeline", "rensa_minhash.py", "lsh", 16),  # 7.7 GB at 16x: ~30 GB at 64x
    "rensa (LSH, 2 workers)": ("pipeline", "rensa_minhash.py", "lsh-workers", 64),
    "rensa (LSH, 2 workers, minimal normalisation)": ("pipeline", "rensa_minhash.py", "lsh-workers-minimal", 64),
    "datatrove (spaCy words)": ("datatrove", "datatrove_minhash.py", "spacy", 1),
    "datatrove (whitespace words)": ("datatrove", "datatrove_minhash.py", "whitespace", 16),
    "text-dedup": ("textdedup", "textdedup_minhash.py", "default", 4),
}
PEER_TIMEOUT_S = 600  # a peer still running then is killed and reported with this lower bound on its time


def main() -> None:
    args = _parse()
    out = out_path(args, RESULTS)
    cfg = bench_params()
    scales = [1] if args.smoke else args.scales
    with tempfile.TemporaryDirectory(prefix="bench-dedup-") as tmp:
        rows = default_rows(Path(tmp), SMOKE_ROWS if args.smoke else None)
        sizes = [
            measure_scale(
                cfg, rows, scale, Path(tmp) / f"x{scale}", args.repeats or min_runs(scale, args.smoke), args.smoke
            )
            for scale in scales
        ]
    body = summarize(cfg, sizes)
    if args.note:
        body["run_note"] = args.note
    write_results(out, body, STAGE_MODULES, smoke=args.smoke)


def bench_params() -> DedupParams:
    """params.yaml's dedup values, one document kept per cluster (as the peers keep one)."""
    return DedupParams.model_validate({**read_yaml(REPO / "params.yaml")["dedup"], "keep_one_per": "cluster"})


def default_rows(work: Path, max_docs: int | None = None) -> list[str]:
    """The default ingest rows: params.yaml's ingest sources read by the ingest stage. ``max_docs``: at most that
    many a source, wikipedia_sample left out (the smoke run's tiny corpus)."""
    from tasks import ingest
    from tasks.config import Paths
    from tasks.config.corpus.ingest import IngestParams
    from tasks.tracking import NullLog

    values = read_yaml(REPO / "params.yaml")["ingest"]
    cfg = IngestParams.model_validate({**values, "sources": smoke_sources(values["sources"], max_docs)})
    ingest.run(cfg, Paths(data=work / "rows", models=work, metrics=work, reports=work), NullLog())
    return corpora.read_rows(work / "rows" / "ingest")


def measure_scale(cfg: DedupParams, rows: list[str], scale: int, work: Path, repeats: int, smoke: bool) -> dict:
    """Every tool on the corpus at ``scale``: timings, memory and scores. Our stage, the limit and the peers in
    this environment run in ``repeats`` alternated rounds, the other peers once (and naive at 1x only)."""
    corpus = corpora.planted(rows, scale, SEED)
    write_inputs(work, corpus.texts)
    (work / "params.json").write_text(cfg.model_dump_json())  # the parts skip the (pure-Python) YAML parser
    started = time.perf_counter()
    known = corpora.truth(corpus, cfg.shingle_size_words)
    print(f"bench dedup {scale}x: {len(corpus.texts)} docs, truth in {time.perf_counter() - started:.0f} s")
    alternated = {"clozeline": lambda: _part("stage", work), "limit": lambda: _part("limit", work)}
    alternated.update(
        {
            name: (lambda spec=spec: _peer(work, *spec[:3]))
            for name, spec in PEER_RUNS.items()
            if spec[0] == "pipeline" and scale <= spec[3]
        }
    )
    runs: dict[str, list[dict]] = {name: [] for name in alternated}
    for round_ in range(repeats):
        for name, run in alternated.items():
            runs[name].append(_loaded(run))
            print(
                f"  round {round_ + 1} {name}: {runs[name][-1].get('seconds', 'skipped')} s, "
                f"load {runs[name][-1]['load_1min_before']:.2f}"
            )
    tools = {name: _summary(measured) for name, measured in runs.items()}
    if scale == 1:
        tools["naive"] = _summary([_loaded(lambda: _part("naive", work))])
    tools.update(
        {
            name: _summary([_loaded(lambda spec=spec: _peer(work, *spec[:3]))])
            if scale <= spec[3]
            else {"skipped": f"not run above {spec[3]}x"}
            for name, spec in PEER_RUNS.items()
            if name not in alternated
        }
    )
    megabytes = sum(len(text.encode("utf-8")) for text in corpus.texts) / 1e6
    for name, tool in tools.items():
        if "seconds_all_runs" in tool:
            rates = [len(corpus.texts) / seconds for seconds in tool["seconds_all_runs"]]
            median = spread(rates)["median"]
            tool.update(
                docs_per_s_all_runs=rates,
                docs_per_s=median,
                docs_per_s_spread=spread(rates),
                mb_per_s=megabytes * median / len(corpus.texts),
            )
        if "clusters" in tool:
            removed = set(tool.pop("removed", []))
            tool.update(corpora.score(tool.pop("clusters"), corpus, known, cfg.threshold, removed))
        print(f"  {name}: {_brief(tool)}")
    return {"scale": scale, "docs": len(corpus.texts), "text_mb": megabytes, "smoke": smoke, "tools": tools}


def _loaded(run) -> dict:
    """``run()``'s measurement with the 1-minute load average just before it (the machine is shared)."""
    load = os.getloadavg()[0]
    return {**run(), "load_1min_before": load}


def _summary(measured: list[dict]) -> dict:
    """One tool's runs: the first run's fields (clusters and scores: every run of a tool gives the same), the
    seconds and loads of every run, and the median seconds; a skip if none ran."""
    ran = [run for run in measured if "seconds" in run]
    if not ran:
        return measured[0]
    seconds = [run["seconds"] for run in ran]
    return {
        **ran[0],
        "seconds": spread(seconds)["median"],
        "seconds_all_runs": seconds,
        "load_1min_before_runs": [run.get("load_1min_before") for run in ran],
        "peak_tree_rss_mib": max(run["peak_tree_rss_mib"] for run in ran),
    }


def write_inputs(work: Path, texts: list[str]) -> None:
    """The same documents as an ingest-contract Parquet file (ours, rensa's and text-dedup's) and as JSONL
    (datatrove's reader)."""
    ids = [f"{i:07d}" for i in range(len(texts))]
    ingest = work / "data" / "ingest"
    ingest.mkdir(parents=True)
    table = {"doc_id": ids, "source": ["bench"] * len(texts), "role": ["pretrain"] * len(texts), "text": texts}
    pq.write_table(pa.table({**table, "label": pa.nulls(len(texts), pa.string())}), ingest / "bench.parquet")
    with (work / "docs.jsonl").open("w", encoding="utf-8") as out:
        for doc_id, text in zip(ids, texts):
            out.write(json.dumps({"id": doc_id, "text": text}) + "\n")


def _part(name: str, work: Path) -> dict:
    """One fresh-process run of one of our parts, from scratch: the stage's incremental index of an earlier
    round is removed first (a repeat would otherwise reuse every signature and Jaccard). The limit's seconds
    are its counted steps (``run_limit``)."""
    shutil.rmtree(work / "data" / "dedup_index", ignore_errors=True)
    command = [sys.executable, str(REPO / "benchmarks" / "_dedup_parts.py"), name, str(work)]
    os.sync()
    measured = run_measured(command, cwd=REPO, log=work / f"{name}.log")
    out = json.loads((work / f"{name}.json").read_text())
    if name == "limit":
        measured["wall_seconds"] = measured["seconds"]
    return {**measured, **out, **(stage_clusters(work) if name == "stage" else {})}


def stage_clusters(work: Path) -> dict:
    """The stage's duplicate clusters (``cluster_id`` shared by two or more rows) and the rows it marks
    ``is_duplicate``, as integer document ids, from ``<work>/data/dedup/bench.parquet``."""
    table = pq.read_table(work / "data" / "dedup" / "bench.parquet", columns=["doc_id", "cluster_id", "is_duplicate"])
    ids = [int(doc_id) for doc_id in table.column("doc_id").to_pylist()]
    members: dict[str, list[int]] = {}
    for doc_id, cluster in zip(ids, table.column("cluster_id").to_pylist()):
        members.setdefault(cluster, []).append(doc_id)
    removed = [doc_id for doc_id, flag in zip(ids, table.column("is_duplicate").to_pylist()) if flag]
    return {"removed": removed, "clusters": [docs for docs in members.values() if len(docs) > 1]}


def _peer(work: Path, environment: str, runner: str, variant: str) -> dict:
    if environment == "pipeline":
        python, source = Path(sys.executable), work / "data" / "ingest" / "bench.parquet"
        missing = _missing_module(runner)
        if missing:
            return {"skipped": f"{missing} is not installed here (benchmarks/peers/setup.sh installs the bench group)"}
    else:
        python = PEERS / environment / "bin" / "python"
        source = work / ("data/ingest/bench.parquet" if environment == "textdedup" else "docs.jsonl")
        if not (PEERS / environment / ".installed").exists():
            return {"skipped": f"no {environment} environment (benchmarks/peers/setup.sh builds it)"}
    scratch, output = work / f"{environment}-{variant}", work / f"{environment}-{variant}.json"
    command = [str(python), str(REPO / "benchmarks" / "peers" / runner), "--input", str(source)]
    command += ["--workdir", str(scratch), "--output", str(output), "--workers", "2", "--variant", variant]
    os.sync()
    try:
        measured = run_measured(command, cwd=work, log=work / f"{environment}-{variant}.log", timeout_s=PEER_TIMEOUT_S)
    except TimedOut as err:
        return {"skipped": f"timed out: {err}", "seconds_at_least": PEER_TIMEOUT_S}
    except RuntimeError as err:
        return {"skipped": f"failed: {err}"}
    result = json.loads(output.read_text())
    result["runner_seconds"] = result.pop("seconds", None)  # the runner's own clock: no interpreter start, no output
    removed = [int(doc_id) for doc_id in result.pop("removed_ids")]
    clusters = [[int(doc_id) for doc_id in cluster] for cluster in result.pop("clusters")]
    return {**measured, **result, "removed": removed, "clusters": clusters}  # seconds: spawn to exit, as ours


def _missing_module(runner: str) -> str | None:
    """The package a pipeline-environment runner needs, when it is not importable here."""
    import importlib.util

    module = runner.split("_")[0]
    return None if importlib.util.find_spec(module) else module


def _brief(tool: dict) -> str:
    if "skipped" in tool:
        return f"skipped ({tool['skipped'][:200]})"
    quality = (
        f", {tool['clusters']} clusters, P {tool['precision']:.4f} R {tool['recall']:.4f}"
        if "precision" in tool
        else ""
    )
    return f"{tool['docs_per_s']:.0f} docs/s, {tool['peak_tree_rss_mib']:.0f} MiB{quality}"


# ------------------------------------------------------------------------------------------------- summary


def summarize(cfg: DedupParams, sizes: list[dict]) -> dict:
    """Per-size rows (ratios of medians), the scaling curves and every measurement."""
    rows = [table_row(size) for size in sizes]
    return {
        "ratio_vs_best_peer": rows[-1]["ratio_vs_best_peer"],
        "fraction_of_limit": rows[-1]["fraction_of_limit"],
        "rows": rows,
        "scaling": scaling(sizes),
        "sizes": sizes,
        "params": cfg.model_dump(),
        "goals": GOALS,
        "meets_goals": all(row["meets_goal"] for row in rows),
        "seed": SEED,
        "machine_note": "2 shared cores; every figure from the same run; wall time from spawn to exit; medians of "
        "alternated runs, each run's 1-minute load average beside it",
    }


def scaling(sizes: list[dict]) -> dict:
    """Per tool: median seconds and peak tree RSS at each size, and the growth exponent of each between the smallest
    and the largest size it ran at (``log(t_large / t_small) / log(docs_large / docs_small)``: 1 is linear)."""
    out = {}
    for name in sizes[0]["tools"]:
        ran = [(size["docs"], size["tools"][name]) for size in sizes if "seconds" in size["tools"].get(name, {})]
        curve = {
            "docs": [d for d, _ in ran],
            "seconds": [t["seconds"] for _, t in ran],
            "peak_tree_rss_mib": [t["peak_tree_rss_mib"] for _, t in ran],
        }
        if len(ran) > 1:
            growth = math.log(ran[-1][0] / ran[0][0])
            curve["time_exponent"] = math.log(curve["seconds"][-1] / curve["seconds"][0]) / growth
            curve["memory_exponent"] = math.log(curve["peak_tree_rss_mib"][-1] / curve["peak_tree_rss_mib"][0]) / growth
        out[name] = curve
    return out


def table_row(size: dict) -> dict:
    """One docs-table row: our median docs/s against the peer variant with the best median (ratio of medians,
    spreads and best-of-N beside it), the limit's median, and the goal (``GOALS``)."""
    tools = size["tools"]
    peers = {name: tool for name, tool in tools.items() if name in PEER_RUNS and "docs_per_s" in tool}
    best = max(peers, key=lambda name: peers[name]["docs_per_s"]) if peers else None
    ours = tools["clozeline"]
    fields = ratio_fields(ours["docs_per_s_all_runs"], peers[best]["docs_per_s_all_runs"] if best else None)
    limit = tools["limit"]["docs_per_s"]
    quality = (
        best is not None
        and ours["precision"] >= GOALS["precision"]
        and ours["recall"] >= peers[best]["recall"] - GOALS["recall_below_peer"]
    )
    ratio = fields["ratio_vs_best_peer"]
    return {
        "benchmark": "dedup",
        "case": f"{size['scale']}x: {size['docs']:,} docs",
        "unit": "docs/s",
        "best_peer": best,
        **fields,
        "limit": limit,
        "fraction_of_limit": fields["ours"] / limit,
        "goal": GOAL_TEXT,
        "meets_goal": bool(ratio is not None and ratio >= GOALS["ratio_vs_best_peer"] and quality),
    }


def _parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scales", type=int, nargs="+", default=[1, 4, 16, 64], help="corpus sizes, x default rows")
    parser.add_argument(
        "--repeats",
        type=int,
        default=None,
        help="alternated rounds per size (default: 5 up to 4x, 3 above; 1 with --smoke)",
    )
    parser.add_argument(
        "--note",
        default=None,
        help="a line kept in the results as run_note (e.g. that the machine was busy: each run's load is recorded)",
    )
    add_smoke(parser, RESULTS)
    return parser.parse_args()


if __name__ == "__main__":
    main()
