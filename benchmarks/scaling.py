"""Per-stage costs of every data stage at growing sizes (dedup and leakage on both engines; ingest, split and
tokenize, which have one), and of pretraining's feed at two corpus sizes 10x apart: the measurements behind
docs/scaling.md (its tables: ``benchmarks/_scaling_tables.py``). Ingest and split: ``benchmarks/_scaling_stages.py``
(``--stage-sizes``); tokenize, from scratch and then incremental: ``benchmarks/_scaling_tokenize.py``
(``--tokenize-docs``); their corpora and runs are described there.

Corpora (built before any clock starts, in a temporary folder):

- dedup at scale k: the default ingest rows (6,948, with their natural copies) and k - 1 *remixes* of each: one
  word in 3 replaced by a random corpus word, so no 5-gram survives and a remix is a distinct
  document of the same length and vocabulary; one remix in 10 is followed by a near duplicate
  of it (one word in 60 replaced, 5-gram Jaccard about 0.85). A web-like rate of near duplicates, unlike
  ``benchmarks/dedup.py``'s corpus, where each row has k - 1 near copies (its LSH candidates grow as k^2).
  ``SHARDS`` Parquet files of the ingest contract (role pretrain), so Ray reads them in parallel;
- leakage at scale k: the default sources after ingest and split (``benchmarks/leakage.default_corpora``, no
  dedup); the training rows (6,024) and k - 1 remixes of each (new ``doc_id``s, the other columns copied), the
  924 eval rows fixed, in ``SHARDS`` files plus one of eval rows. ``--leakage-encoder stand-in``: the semantic pass
  with a 1-layer random encoder of MiniLM's widths (``benchmarks/_scaling_leakage.py``), rows of their own
  (``semantic_encoder``): their driver memory is the pass's, their time is not; only their pretraining rows grow.

Each run is the stage's own ``run`` (params.yaml, ``engine`` set, Ray with every CPU of this machine) in a fresh
subprocess (``benchmarks/_measure.run_measured``: wall seconds from spawn to exit, imports and Ray start-up
included; peak RSS of the driver process and of its whole tree, which holds the Ray workers, raylet and object
store). Reported per stage, engine and size: docs/s and docs/s per core, peak RSS, and from the stage's metrics
the LSH candidate and merged pairs per doc (dedup) and the matching pairs (leakage), and its ``phases``
(``benchmarks/_phase_log.py``: the driver's RSS at each of the stage's progress lines and its peak between
two, so a step's own growth is told from the fixed costs of the others). The engines alternate, round
after round (``min_runs``: 5 rounds up to 4x, 3 above), each round on a fresh copy of the input (no cache of an
earlier round); docs/s is the median over the rounds, with its spread. Writes ``benchmarks/results/scaling.json``
(its ``rows``: the Ray engine's docs/s beside the local engine's, ratio of medians, no goal) with its provenance
(``benchmarks/_provenance.py``). ``--smoke``: both stages, one round, on ``SMOKE_ROWS`` rows (leakage:
``SMOKE_TRAIN`` training and ``SMOKE_EVAL`` eval rows, without the semantic pass, which leakage_semantic.py's smoke
runs), on the local engine only unless ``--engines`` names ray:
a Ray start-up costs about 20 s a run, over the smoke's budget (tests/common/test_ray_engines.py runs both stages on Ray
in ``make test``); its results go to ``--out`` and a copy of docs/scaling.md with the new tables beside it, named
after it (``<out>.md``; an ``--out`` that would name docs/scaling.md itself is refused). A measured run with its own
``--out`` does the same: only a run into ``benchmarks/results/scaling.json`` rewrites docs/scaling.md.

The feed (``benchmarks/_scaling_feed.py``): ``--feed-blocks`` packed blocks (default 50,000 and 500,000) in the
tokenize stage's shard format, then per size and rank of ``--feed-ranks`` a fresh process running the trainer's
own feed for ``--feed-steps`` steps, no model: steps/s and that process's peak RSS (the goal: independent of the
corpus size). ``--smoke``: ``SMOKE_FEED_BLOCKS``, ``SMOKE_FEED_STEPS`` steps.

    .venv/bin/python benchmarks/scaling.py                                   # 1x, 16x: about 20 minutes
    .venv/bin/python benchmarks/scaling.py --keep --dedup-scales --leakage-scales --feed-ranks 2   # the feed only
    .venv/bin/python benchmarks/scaling.py --keep --dedup-scales 131 --leakage-scales 166 --rounds 1 \
        --stage-sizes 1000000 --tokenize-docs --feed-blocks --engines ray                # 10^6 docs each
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# Run as a script, Python puts benchmarks/ first on sys.path, where benchmarks/tokenize.py would shadow the
# standard library's tokenize module; import from the repo root instead.
sys.path[:] = [str(REPO)] + [p for p in sys.path if Path(p or ".").resolve() != REPO / "benchmarks"]

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from benchmarks import _dedup_corpus as corpora  # noqa: E402
from benchmarks import _scaling_feed as feed  # noqa: E402
from benchmarks import _scaling_stages as stages  # noqa: E402
from benchmarks import _scaling_tokenize as tokenize_runs  # noqa: E402
from benchmarks._measure import rates, run_measured  # noqa: E402
from benchmarks._provenance import (  # noqa: E402
    add_smoke,
    min_runs,
    out_path,
    provenance,
    smoke_sources,
    write_results,
)
from benchmarks._scaling_leakage import write_leakage_corpus, write_stand_in  # noqa: E402
from benchmarks._scaling_tables import DOC, table_rows, write_doc  # noqa: E402

RESULTS = REPO / "benchmarks" / "results" / "scaling.json"
SHARDS = 8
#: a stage run's limit: leakage's stand-in at 64x (153,738 training docs, ~1.1 million corpus windows embedded)
#: ran past 3,600 s on 2 cores beside other runs, killed with 8 of its 19 files of windows embedded
TIMEOUT_S = 4 * 3600
#: --smoke's sizes: dedup rows; leakage training and eval rows (the smoke's leakage runs without its semantic pass)
SMOKE_ROWS, SMOKE_TRAIN, SMOKE_EVAL = 200, 30, 10
#: --smoke's feed: blocks at two sizes 10x apart, and steps a rank
SMOKE_FEED_BLOCKS, SMOKE_FEED_STEPS = [2_000, 20_000], 10
#: --smoke's sizes of ingest and split (docs), and of tokenize (pretraining docs)
SMOKE_STAGE_SIZES, SMOKE_TOKENIZE_DOCS = [300], [100]
#: The code measured: every data stage, its imports followed. The results file's provenance covers them all; each
#: record carries its own stage's (``stage_code``), so an edit to one stage leaves the others' rows current.
MEASURED = ("tasks.ingest", "tasks.dedup", "tasks.split", "tasks.leakage", "tasks.tokenize")


def stage_code(stage: str) -> tuple[str]:
    """The module a ``stage``'s record measured (``tasks.<stage>``, its imports followed by the fingerprint)."""
    return (f"tasks.{stage}",)


def main() -> None:
    args = _parse()
    if args.part:
        return run_part(args.part, args.engine, args.work, args.smoke, args.leakage_semantic == "on", args.encoder)
    if args.tables:
        return write_doc(json.loads(RESULTS.read_text()))
    from tasks.config import read_yaml

    out = out_path(args, RESULTS)
    raw = read_yaml(REPO / "params.yaml")
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() and args.keep and not args.smoke else {"runs": []}
    limit = SMOKE_ROWS if args.smoke else None
    with tempfile.TemporaryDirectory(prefix="bench-scaling-") as tmp:
        work = Path(tmp)
        rows = default_ingest_rows(raw, work / "base", limit and limit // 4)[:limit] if args.dedup_scales else []
        for scale in args.dedup_scales:
            source = work / f"dedup-{scale}x" / "data" / "ingest"
            docs = write_dedup_corpus(rows, scale, source)
            results["runs"] += alternated(
                "dedup", scale, docs, source, args.engines, args.rounds or min_runs(scale, args.smoke), args.smoke
            )
        if args.leakage_scales:
            from benchmarks.leakage import default_corpora

            trains, evals = default_corpora(raw, work / "leakage-base", SMOKE_TRAIN if args.smoke else None)
            stand_in = args.leakage_encoder == "stand-in" and write_stand_in(work / "stand-in-encoder")
            for scale in args.leakage_scales:
                source = work / f"leakage-{scale}x" / "data" / "split"
                if args.smoke:
                    trains, evals = trains[:SMOKE_TRAIN], evals[:SMOKE_EVAL]
                docs = write_leakage_corpus(trains, evals, scale, source, SHARDS, pretrain_only=bool(stand_in))
                results["runs"] += alternated(
                    "leakage",
                    scale,
                    docs,
                    source,
                    args.engines,
                    args.rounds or min_runs(scale, args.smoke),
                    args.smoke,
                    args.leakage_semantic == "on",
                    stand_in or None,
                )
        if args.stage_sizes:
            results["runs"] += stages.measured_runs(work / "stages", args.stage_sizes, args.smoke)
        if args.tokenize_docs:
            results["runs"] += tokenize_runs.measured_runs(work / "tokenize", args.tokenize_docs, args.smoke)
        if args.feed_blocks:
            results["runs"] += feed.measured_runs(work, args.feed_blocks, args.feed_ranks, args.feed_steps, args.smoke)
    if args.keep:  # a rerun replaces the earlier run of the same stage, engine and scale
        latest = {
            (r["stage"], r["engine"], r["scale"], r.get("semantic_pass"), r.get("semantic_encoder")): r
            for r in results["runs"]
        }
        results["runs"] = sorted(latest.values(), key=lambda r: (r["stage"], r["scale"], r["engine"]))
    results["cores"] = os.cpu_count()
    results["rows"] = table_rows(results["runs"])
    write_results(out, results, MEASURED, args.smoke)
    write_doc(results, smoke_doc(out) if args.smoke or out.resolve() != RESULTS.resolve() else DOC)


def smoke_doc(out: Path) -> Path:
    """Where a smoke run, or a run with its own ``--out``, writes its copy of docs/scaling.md: beside ``out``, named
    after it, never over the docs' page (only the results file's own run may replace its measured tables). Raises
    ``SystemExit``."""
    doc = out.with_suffix(".md")
    if doc.resolve() == DOC.resolve():
        raise SystemExit(f"scaling.py --smoke: {doc} is the docs' page; give --out another name or folder")
    return doc


def alternated(
    stage: str,
    scale: int,
    docs: int,
    source: Path,
    engines: list[str],
    rounds: int,
    smoke: bool = False,
    semantic: bool = True,
    encoder: Path | None = None,
) -> list[dict]:
    """``rounds`` rounds of every engine in turn, each on a fresh hard-linked copy of ``source`` (the stage's input
    folder), leakage's semantic pass with ``encoder`` (``--leakage-encoder stand-in``'s folder; None: params.yaml's
    encoder); per engine one record: the last round's figures, ``docs_per_s`` the median over the rounds with
    ``docs_per_s_runs`` (every round), peaks the largest."""
    done: dict[str, list[dict]] = {engine: [] for engine in engines}
    for i in range(rounds):
        for engine in engines:
            stage_dir = source.parents[1] / f"round{i}-{engine}"
            shutil.copytree(source, stage_dir / "data" / source.name, copy_function=os.link)
            done[engine].append(measure(stage, engine, scale, docs, stage_dir, smoke, semantic, encoder))
            shutil.rmtree(stage_dir / "data")
    measured = provenance(stage_code(stage), smoke=smoke)  # per run: --keep mixes several invocations' runs
    return [
        runs[-1]
        | {
            "provenance": measured,
            "docs_per_s_runs": [r["docs_per_s"] for r in runs],
            "docs_per_s": statistics.median(r["docs_per_s"] for r in runs),
            "docs_per_s_per_core": statistics.median(r["docs_per_s_per_core"] for r in runs),
            "seconds": statistics.median(r["seconds"] for r in runs),
            "peak_rss_mib": max(r["peak_rss_mib"] for r in runs),
            "driver_peak_rss_mib": max(r["driver_peak_rss_mib"] for r in runs),
            "peak_tree_rss_mib": max(r["peak_tree_rss_mib"] for r in runs),
            "phases": max(runs, key=lambda r: r["driver_peak_rss_mib"])["phases"],  # the round whose peak is kept
        }
        for runs in done.values()
    ]


def default_ingest_rows(raw: dict, work: Path, max_docs: int | None = None) -> list[str]:
    """The default ingest rows' texts (params.yaml's sources read by the ingest stage; at most ``max_docs`` a
    source, ``smoke_sources``)."""
    from tasks import ingest
    from tasks.config import Paths
    from tasks.config.corpus.ingest import IngestParams
    from tasks.tracking import NullLog

    cfg = IngestParams(**{**raw["ingest"], "sources": smoke_sources(raw["ingest"]["sources"], max_docs)})
    ingest.run(cfg, Paths(data=work, models=work, metrics=work, reports=work), NullLog())
    return corpora.read_rows(work / "ingest")


def write_dedup_corpus(rows: list[str], scale: int, folder: Path) -> int:
    """The remixed corpus at ``scale`` as ``SHARDS`` ingest files; returns its number of docs."""
    texts = corpora.remixed(rows, scale, near_duplicates=True)
    folder.mkdir(parents=True)
    for shard in range(SHARDS):
        part = range(shard, len(texts), SHARDS)
        table = {
            "doc_id": [f"{i:08d}" for i in part],
            "source": [f"part{shard}"] * len(part),
            "role": ["pretrain"] * len(part),
            "text": [texts[i] for i in part],
        }
        label = pa.nulls(len(part), pa.string())
        pq.write_table(pa.table({**table, "label": label}), folder / f"part{shard}.parquet")
    return len(texts)


def measure(
    stage: str,
    engine: str,
    scale: int,
    docs: int,
    stage_dir: Path,
    smoke: bool = False,
    semantic: bool = True,
    encoder: Path | None = None,
) -> dict:
    """One stage run in a fresh process; its timings, memory and the stage metrics that size the work. ``encoder``:
    the stand-in's folder, recorded as ``semantic_encoder: stand-in`` (its memory is the pass's, its time is not)."""
    command = [sys.executable, __file__, "--part", stage, "--engine", engine, "--work", str(stage_dir)]
    command += ["--smoke"] if smoke else []
    command += ["--leakage-semantic", "off"] if not semantic else []
    command += ["--encoder", str(encoder)] if encoder and semantic else []
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    measured = run_measured(command, REPO, env=env, log=stage_dir / f"{engine}.log", timeout_s=TIMEOUT_S)
    metrics = json.loads((stage_dir / f"metrics-{engine}.json").read_text())
    run = {
        "stage": stage,
        "engine": engine,
        "scale": scale,
        "docs": docs,
        **measured,
        **rates(docs, measured["seconds"]),
        "phases": metrics["phases"],
    }
    if stage == "dedup":
        lsh = metrics["lsh"]
        run.update(
            candidate_pairs=lsh["candidate_pairs"],
            merged_pairs=lsh["merged_pairs"],
            candidates_per_doc=lsh["candidate_pairs"] / docs,
            merged_per_doc=lsh["merged_pairs"] / docs,
            docs_removed=metrics["all"]["docs_removed"],
            bands=lsh["bands"],
            rows=lsh["rows"],
        )
    else:
        run.update(
            semantic_pass=semantic and not smoke,
            **({"semantic_encoder": "stand-in"} if encoder and semantic and not smoke else {}),
            matching_pairs=sum(metrics["pairs_by_method"].values()),
            removed=sum(s["removed"] for s in metrics["sources"].values()),
        )
        semantic = metrics.get("semantic", {})
        if semantic.get("enabled"):  # what the GPU projection of the semantic pass scales (_scaling_tables)
            tracked = metrics.get("tracked_metrics", {})
            run.update(
                semantic_corpus_docs=semantic["corpus"]["docs"],
                semantic_corpus_windows=semantic["corpus"]["windows"],
                semantic_windows_embedded=semantic["windows_embedded"],
                semantic_seconds=tracked.get("semantic_seconds_total"),
                semantic_embed_seconds=tracked.get("semantic_embed_seconds"),
            )
    print(
        f"scaling {stage} {engine} {scale}x: {docs} docs in {measured['seconds']:.0f} s "
        f"({run['docs_per_s']:.0f} docs/s), peak {measured['driver_peak_rss_mib']:.0f} MiB driver, "
        f"{measured['peak_tree_rss_mib']:.0f} MiB tree",
        flush=True,
    )
    return run


def run_part(
    stage: str, engine: str, work: Path, smoke: bool = False, semantic: bool = True, encoder: Path | None = None
) -> None:
    """In the subprocess: the stage's ``run`` on ``<work>/data``; its metrics go to ``<work>/metrics-<engine>.json``.
    ``smoke``: leakage without its semantic pass (MiniLM's load is most of a tiny run; leakage_semantic.py's smoke
    runs that pass); ``encoder``: the semantic pass's encoder folder (the stand-in's), else params.yaml's."""
    from benchmarks._phase_log import PhaseLog
    from tasks import dedup, leakage
    from tasks.config import Paths, load_params

    params = load_params(REPO / "params.yaml")
    cfg = getattr(params, stage).model_copy(update={"engine": engine})
    if (smoke or not semantic) and stage == "leakage":
        cfg = cfg.model_copy(update={"semantic": cfg.semantic.model_copy(update={"enabled": False})})
    elif encoder and stage == "leakage":
        cfg = cfg.model_copy(update={"semantic": cfg.semantic.model_copy(update={"encoder": str(encoder)})})
    paths = Paths(data=work / "data", models=work / "models", metrics=work / "m", reports=work / "r")
    log = PhaseLog()
    metrics = {"dedup": dedup, "leakage": leakage}[stage].run(cfg, paths, log)
    metrics["phases"] = log.finish()
    metrics["tracked_metrics"] = log.tracked  # timings the stage sends to MLflow only (its metrics file repeats)
    (work / f"metrics-{engine}.json").write_text(json.dumps(metrics), encoding="utf-8")


def _parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dedup-scales", type=int, nargs="*", default=[1, 16], help="131: 10^6 docs")
    parser.add_argument("--leakage-scales", type=int, nargs="*", default=[1, 16], help="166: 10^6 training docs")
    parser.add_argument(
        "--feed-blocks", type=int, nargs="*", default=[50_000, 500_000], help="pretraining's feed: blocks a size"
    )
    parser.add_argument(
        "--stage-sizes", type=int, nargs="*", default=[7_000, 110_000], help="ingest and split: docs a size"
    )
    parser.add_argument(
        "--tokenize-docs", type=int, nargs="*", default=[6_000, 60_000], help="tokenize: pretraining docs a size"
    )
    parser.add_argument("--rounds", type=int, help="dedup and leakage: rounds a size (default: 5 up to 4x, else 3)")
    parser.add_argument(
        "--leakage-semantic",
        choices=["on", "off"],
        default="on",
        help="leakage's semantic pass (params.yaml's); off: the lexical audit alone, a row of its own",
    )
    parser.add_argument(
        "--leakage-encoder",
        choices=["minilm", "stand-in"],
        default="minilm",
        help="the semantic pass's encoder; stand-in: 1 random layer (rows for memory, not time)",
    )
    parser.add_argument("--feed-ranks", type=int, default=1, help="the feed's world size: each rank measured")
    parser.add_argument("--feed-steps", type=int, default=200, help="the feed's steps a rank")
    parser.add_argument("--engines", nargs="+", choices=["local", "ray"], help="default: both (--smoke: local)")
    parser.add_argument("--keep", action="store_true", help="add to the runs in the results file (a rerun replaces)")
    parser.add_argument("--tables", action="store_true", help="only rewrite docs/scaling.md's tables")
    parser.add_argument("--part", choices=["dedup", "leakage"], help=argparse.SUPPRESS)
    parser.add_argument("--engine", choices=["local", "ray"], help=argparse.SUPPRESS)
    parser.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--encoder", type=Path, help=argparse.SUPPRESS)
    add_smoke(parser, RESULTS)
    args = parser.parse_args()
    sizes = args.feed_blocks + args.stage_sizes + args.tokenize_docs
    if args.feed_ranks < 1 or any(n < 1 for n in sizes) or args.feed_steps < 1 or (args.rounds or 1) < 1:
        parser.error(
            "--feed-ranks, --feed-blocks, --feed-steps, --stage-sizes, --tokenize-docs and --rounds take "
            "positive integers"
        )
    if args.smoke and not args.part:
        args.dedup_scales, args.leakage_scales = [1], [1]
        args.feed_blocks, args.feed_steps = SMOKE_FEED_BLOCKS, SMOKE_FEED_STEPS
        args.stage_sizes, args.tokenize_docs = SMOKE_STAGE_SIZES, SMOKE_TOKENIZE_DOCS
        if not args.engines:
            print(
                "scaling --smoke: engine ray skipped (about 20 s of start-up a run; tests/common/test_ray_engines.py "
                "runs both stages on Ray; --engines local ray includes it)",
                flush=True,
            )
    args.engines = args.engines or (["local"] if args.smoke else ["local", "ray"])
    return args


if __name__ == "__main__":
    main()
