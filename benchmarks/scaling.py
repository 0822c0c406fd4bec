"""Per-stage costs of dedup and leakage at growing sizes, on both engines: the measurements behind docs/scaling.md.

Corpora (built before any clock starts, in a temporary folder):

- dedup at scale k: ``benchmarks/_dedup_corpus.planted`` (the default ingest rows, 6,948, plus k - 1 planted
  variants of each: one word in 60 or in 30 replaced), in ``SHARDS`` Parquet files of the ingest contract
  (role pretrain), so Ray reads them in parallel;
- leakage at scale k: the default sources after ingest and split (``benchmarks/leakage.default_corpora``, no
  dedup); the training rows (6,024) replicated k times with ``benchmarks/leakage.replicate``'s perturbation
  (new ``doc_id``s, the other columns copied), the 924 eval rows fixed, in ``SHARDS`` files plus one of eval rows.

Each run is the stage's own ``run`` (params.yaml, ``engine`` set, Ray with every CPU of this machine) in a fresh
subprocess (``benchmarks/_measure.run_measured``: wall seconds from spawn to exit, imports and Ray start-up
included; peak RSS of the driver process and of its whole tree, which holds the Ray workers, raylet and object
store). Reported per stage, engine and size: docs/s and docs/s per core, peak RSS, and from the stage's metrics
the LSH candidate and merged pairs per doc (dedup) and the matching pairs (leakage). Writes
``benchmarks/results/scaling.json`` (its ``rows``: the Ray engine's docs/s beside the local engine's, no goal).

    .venv/bin/python benchmarks/scaling.py                                   # 1x, 16x: about 5 minutes
    .venv/bin/python benchmarks/scaling.py --dedup-scales 144 --leakage-scales 48 --engines ray   # 10^6 docs
"""

from __future__ import annotations

import argparse
import json
import os
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
from benchmarks._measure import run_measured  # noqa: E402

RESULTS = REPO / "benchmarks" / "results" / "scaling.json"
SEED = 20240611
SHARDS = 8
TIMEOUT_S = 3600


def main() -> None:
    args = _parse()
    if args.part:
        return run_part(args.part, args.engine, args.work)
    from tasks.config import read_yaml

    raw = read_yaml(REPO / "params.yaml")
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() and args.keep else {"runs": []}
    with tempfile.TemporaryDirectory(prefix="bench-scaling-") as tmp:
        work = Path(tmp)
        rows = default_ingest_rows(raw, work / "base")
        for scale in args.dedup_scales:
            stage_dir = work / f"dedup-{scale}x"
            docs = write_dedup_corpus(rows, scale, stage_dir / "data" / "ingest")
            results["runs"] += [measure("dedup", engine, scale, docs, stage_dir) for engine in args.engines]
        if args.leakage_scales:
            from benchmarks.leakage import default_corpora

            trains, evals = default_corpora(raw, work / "leakage-base")
            for scale in args.leakage_scales:
                stage_dir = work / f"leakage-{scale}x"
                docs = write_leakage_corpus(trains, evals, scale, stage_dir / "data" / "split")
                results["runs"] += [measure("leakage", engine, scale, docs, stage_dir) for engine in args.engines]
    if args.keep:  # a rerun replaces the earlier run of the same stage, engine and scale
        latest = {(r["stage"], r["engine"], r["scale"]): r for r in results["runs"]}
        results["runs"] = sorted(latest.values(), key=lambda r: (r["stage"], r["scale"], r["engine"]))
    results["cores"] = os.cpu_count()
    results["rows"] = table_rows(results["runs"])
    RESULTS.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {RESULTS}")


def default_ingest_rows(raw: dict, work: Path) -> list[str]:
    """The default ingest rows' texts (params.yaml's sources read by the ingest stage)."""
    from tasks import ingest
    from tasks.config import Paths
    from tasks.config.ingest import IngestParams
    from tasks.tracking import NullLog

    ingest.run(IngestParams(**raw["ingest"]), Paths(data=work, models=work, metrics=work, reports=work), NullLog())
    return corpora.read_rows(work / "ingest")


def write_dedup_corpus(rows: list[str], scale: int, folder: Path) -> int:
    """The planted corpus at ``scale`` as ``SHARDS`` ingest files; returns its number of docs."""
    texts = corpora.planted(rows, scale, SEED).texts
    folder.mkdir(parents=True)
    for shard in range(SHARDS):
        part = range(shard, len(texts), SHARDS)
        table = {"doc_id": [f"{i:08d}" for i in part], "source": [f"part{shard}"] * len(part),
                 "role": ["pretrain"] * len(part), "text": [texts[i] for i in part]}  # fmt: skip
        label = pa.nulls(len(part), pa.string())
        pq.write_table(pa.table({**table, "label": label}), folder / f"part{shard}.parquet")
    return len(texts)


def write_leakage_corpus(trains, evals, scale: int, folder: Path) -> int:
    """The split-contract corpus: training rows replicated ``scale`` times in ``SHARDS`` files, eval rows in one;
    returns the number of training docs."""
    import pandas as pd

    from benchmarks.leakage import replicate

    copies = pd.concat([trains] * scale, ignore_index=True)
    copy = [c for c in range(scale) for _ in range(len(trains))]
    copies["text"] = replicate(list(trains["text"]), scale)
    copies["doc_id"] = [d if c == 0 else f"{d}~{c}" for d, c in zip(copies["doc_id"], copy)]
    folder.mkdir(parents=True)
    for shard in range(SHARDS):
        copies.iloc[shard::SHARDS].to_parquet(folder / f"part{shard}.parquet", index=False)
    evals.to_parquet(folder / "eval.parquet", index=False)
    return len(copies)


def measure(stage: str, engine: str, scale: int, docs: int, stage_dir: Path) -> dict:
    """One stage run in a fresh process; its timings, memory and the stage metrics that size the work."""
    command = [sys.executable, __file__, "--part", stage, "--engine", engine, "--work", str(stage_dir)]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    measured = run_measured(command, REPO, env=env, log=stage_dir / f"{engine}.log", timeout_s=TIMEOUT_S)
    metrics = json.loads((stage_dir / f"metrics-{engine}.json").read_text())
    cores = os.cpu_count() or 1
    run = {"stage": stage, "engine": engine, "scale": scale, "docs": docs, "cores": cores, **measured,
           "docs_per_s": docs / measured["seconds"], "docs_per_s_per_core": docs / measured["seconds"] / cores}
    if stage == "dedup":
        lsh = metrics["lsh"]
        run.update(candidate_pairs=lsh["candidate_pairs"], merged_pairs=lsh["merged_pairs"],
                   candidates_per_doc=lsh["candidate_pairs"] / docs, merged_per_doc=lsh["merged_pairs"] / docs,
                   docs_removed=metrics["all"]["docs_removed"], bands=lsh["bands"], rows=lsh["rows"])
    else:
        run.update(matching_pairs=sum(metrics["pairs_by_method"].values()),
                   removed=sum(s["removed"] for s in metrics["sources"].values()))
    print(f"scaling {stage} {engine} {scale}x: {docs} docs in {measured['seconds']:.0f} s "
          f"({run['docs_per_s']:.0f} docs/s), peak {measured['peak_rss_mib']:.0f} MiB driver, "
          f"{measured['peak_tree_rss_mib']:.0f} MiB tree", flush=True)
    return run


def run_part(stage: str, engine: str, work: Path) -> None:
    """In the subprocess: the stage's ``run`` on ``<work>/data``; its metrics go to ``<work>/metrics-<engine>.json``."""
    from tasks import dedup, leakage
    from tasks.config import Paths, load_params
    from tasks.tracking import NullLog

    params = load_params(REPO / "params.yaml")
    cfg = getattr(params, stage).model_copy(update={"engine": engine})
    paths = Paths(data=work / "data", models=work / "models", metrics=work / "m", reports=work / "r")
    metrics = {"dedup": dedup, "leakage": leakage}[stage].run(cfg, paths, NullLog())
    (work / f"metrics-{engine}.json").write_text(json.dumps(metrics), encoding="utf-8")


def table_rows(runs: list[dict]) -> list[dict]:
    """README table rows: the Ray engine's docs/s beside the local engine's in the same run (information only)."""
    out = []
    for run in (r for r in runs if r["engine"] == "ray"):
        local = next((r for r in runs if r["engine"] == "local" and (r["stage"], r["scale"]) == (run["stage"], run["scale"])), None)  # noqa: E501
        out.append({
            "benchmark": "scaling", "case": f"{run['stage']} {run['scale']}x: {run['docs']:,} docs, engine: ray",
            "unit": "docs/s", "ours": run["docs_per_s"], "best_peer": "engine: local" if local else None,
            "best_peer_value": local["docs_per_s"] if local else None,
            "ratio_vs_best_peer": run["docs_per_s"] / local["docs_per_s"] if local else None,
            "limit": None, "fraction_of_limit": None, "goal": None, "meets_goal": None,
        })  # fmt: skip
    return out


def _parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dedup-scales", type=int, nargs="*", default=[1, 16])
    parser.add_argument("--leakage-scales", type=int, nargs="*", default=[1, 16])
    parser.add_argument("--engines", nargs="+", default=["local", "ray"], choices=["local", "ray"])
    parser.add_argument("--keep", action="store_true", help="add to the runs in the results file (a rerun replaces)")
    parser.add_argument("--part", choices=["dedup", "leakage"], help=argparse.SUPPRESS)
    parser.add_argument("--engine", choices=["local", "ray"], help=argparse.SUPPRESS)
    parser.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    return parser.parse_args()


if __name__ == "__main__":
    main()
