"""The tokenize stage at corpus sizes 10x apart: wall seconds, docs/s and the driver's peak RSS (issue 63 item 3).

Corpus (``build``, before any clock starts): the default sources after ingest and split
(``benchmarks.leakage.default_corpora``, no dedup), written as the leakage stage's outputs
(``data/leakage/<source>.parquet``, ``leak_flag`` false, an empty ``table.parquet``). The pretraining rows
(``role: pretrain``, 2,330 in the default corpus) are remixed (``benchmarks._dedup_corpus.remixed``: one word in 3
replaced, new ``doc_id`` ``<id>~<copy>``) up to ``docs``; the task sources are as they are. Each source's file
holds its rows in the remix order (the copies after the originals: not sorted by ``doc_id``). The corpus is
written in parts (``write_corpus``): one copy of the 2,330 rows remixed at a time (``_dedup_corpus.remixes``, the
random stream ``remixed`` draws, in its order), and a Parquet row group per source whenever ``PART_ROWS`` rows
are held, so the builder holds at most ``PART_ROWS`` rows and a copy, whatever ``docs`` (at 10^6 the one-frame
build held 14 GB and was killed). Up to ``PART_ROWS`` (200,000 docs and the smaller sizes measured before)
a file is one row group, byte for byte the file the one-frame build wrote. The clozeline
tokenizer is the packaged MiniLM tokenizer copied to ``models/tokenizer`` (its training is the tokenizer stage's
cost, not this one's), so both tokenizers encode the same ids.

Runs (``measure``): per size, ``tasks.tokenize.run`` with params.yaml's ``tokenize`` section in a fresh process
(``python -m benchmarks._scaling_tokenize --part <work>``, ``benchmarks/_measure.run_measured``: wall seconds
from spawn to exit, imports included; ``peak_rss_mib`` the driver's ``VmHWM``), first from scratch (no
``tokenize_cache``), then again with the cache the first run left (every text found: the incremental path).
``docs`` counts the pretraining docs packed (train and heldout).

    .venv/bin/python -m benchmarks._scaling_tokenize --docs 6000 60000 --out /tmp/tok/scaling_tokenize.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import tempfile
from itertools import chain
from pathlib import Path
from typing import TYPE_CHECKING

from benchmarks._measure import rates, run_measured

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

REPO = Path(__file__).resolve().parents[1]
STAGE = "tokenize"
#: the code measured: the stage, its imports followed
MEASURED = ("tasks.tokenize",)
#: a run's limit: 10^6 pretraining docs from scratch take about an hour on 2 cores (one tokenizer process)
TIMEOUT_S = 4 * 3600
#: the record's engine per run: the stage has one engine; the incremental run is a row of its own
ENGINE = {"full": "local", "incremental": "local, incremental"}
#: --smoke: docs a default source
SMOKE_SOURCE_DOCS = 60
#: pretraining rows held before they are written (a row group per source): 200,000 docs, measured before the
#: corpus was written in parts, stay one row group a file
PART_ROWS = 262_144
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt")


def build(base: Path, docs_list: list[int], work: Path, max_docs: int | None = None) -> dict[int, Path]:
    """One workspace per size of ``docs_list`` under ``work``; returns ``{docs: workspace}``. ``max_docs``: at most
    that many docs a default source (a smoke run's)."""
    import pandas as pd

    from benchmarks.leakage import default_corpora
    from tasks.config import read_yaml

    trains, evals = default_corpora(read_yaml(REPO / "params.yaml"), base, max_docs)
    rows = pd.concat([trains, evals], ignore_index=True)
    return {docs: write_workspace(rows, docs, work / f"tokenize-{docs}") for docs in docs_list}


def write_workspace(rows: pd.DataFrame, docs: int, root: Path) -> Path:
    """The leakage outputs with the pretraining rows remixed up to ``docs``, the tokenizer and the leakage table."""
    import pandas as pd

    from tasks.common.models.encoders import reference_model_dir

    folder = root / "data" / "leakage"
    folder.mkdir(parents=True)
    write_corpus(rows, docs, folder)
    table = pd.DataFrame({c: pd.Series([], dtype=str) for c in ("train_doc", "eval_doc", "eval_source", "check")})
    table.to_parquet(folder / "table.parquet", index=False)
    tokenizer = root / "models" / "tokenizer"
    tokenizer.mkdir(parents=True)
    for name in TOKENIZER_FILES:
        if (reference_model_dir() / name).exists():
            shutil.copyfile(reference_model_dir() / name, tokenizer / name)
    return root


def write_corpus(rows: pd.DataFrame, docs: int, folder: Path) -> None:
    """``<folder>/<source>.parquet`` per source of ``rows``: its first ``docs`` pretraining rows and remixes (copy
    ``c`` of a row gets the ``doc_id`` ``<id>~<c>``), copy after copy, then its other rows, ``leak_flag`` and
    ``is_duplicate`` false. Written in parts: a copy of the pretraining rows remixed at a time, and a row group
    for each source once ``PART_ROWS`` rows are held (the last with the task rows), so the corpus is never held;
    up to ``PART_ROWS`` pretraining docs a file is one row group, the bytes ``DataFrame.to_parquet`` writes.
    Types and pandas metadata per source are those of its pretraining rows and task rows together."""
    import pandas as pd
    import pyarrow.parquet as pq

    from benchmarks._dedup_corpus import remixes

    pre = flagged(rows[rows["role"] == "pretrain"].reset_index(drop=True))
    others = flagged(rows[rows["role"] != "pretrain"])
    sample = pd.concat([pre.iloc[:docs], others], ignore_index=True)
    writers = {
        source: pq.ParquetWriter(folder / f"{source}.parquet", table_of(part).schema, compression="snappy")
        for source, part in sample.groupby("source", sort=True)
    }
    held: list[pd.DataFrame] = []
    copies = chain([list(pre["text"])], remixes(list(pre["text"]), near_duplicates=False))
    for copy, texts in zip(range(math.ceil(docs / max(len(pre), 1))), copies):
        part = pre.assign(text=texts, doc_id=[d if copy == 0 else f"{d}~{copy}" for d in pre["doc_id"]])
        held.append(part.iloc[: docs - copy * len(pre)])
        if sum(map(len, held)) >= PART_ROWS:
            write_parts(writers, pd.concat(held, ignore_index=True))
            held = []
    write_parts(writers, pd.concat([*held, others], ignore_index=True))
    for writer in writers.values():
        writer.close()


def flagged(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with ``is_duplicate`` and ``leak_flag`` false: leakage outputs."""
    return frame.assign(is_duplicate=False, leak_flag=False)


def table_of(frame: pd.DataFrame) -> pa.Table:
    import pyarrow as pa

    return pa.Table.from_pandas(frame, preserve_index=False)


def write_parts(writers: dict, frame: pd.DataFrame) -> None:
    """A row group of ``frame``'s rows of each source to its writer (none for a source without rows)."""
    for source, part in frame.groupby("source", sort=True):
        writers[source].write_table(table_of(part).cast(writers[source].schema))


def measure(root: Path, label: str, smoke: bool = False) -> dict:
    """One stage run on ``root`` in a fresh process: its seconds, peak RSS and docs packed."""
    command = [sys.executable, "-m", "benchmarks._scaling_tokenize", "--part", str(root)] + ["--smoke"] * smoke
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    measured = run_measured(command, REPO, env=env, log=root / f"{label}.log", timeout_s=TIMEOUT_S)
    metrics = json.loads((root / "metrics.json").read_text())
    docs = sum(split["docs"] for split in metrics["pretrain"]["clozeline"].values())
    run = {"stage": STAGE, "engine": ENGINE[label], "docs": docs, **measured, **rates(docs, measured["seconds"])}
    run["phases"] = metrics["phases"]  # which step of the stage set the peak (``_phase_log``)
    print(
        f"scaling tokenize {label}: {docs} docs in {measured['seconds']:.1f} s ({run['docs_per_s']:.0f} docs/s), "
        f"peak {measured['driver_peak_rss_mib']:.0f} MiB driver, {measured['peak_tree_rss_mib']:.0f} MiB tree",
        flush=True,
    )
    return run


def measured_runs(work: Path, docs_list: list[int], smoke: bool = False) -> list[dict]:
    """Per size: a from-scratch run, then an incremental one (the first run's cache kept). A record has
    ``scaling.py``'s keys: ``stage`` (``tokenize``), ``engine`` (``ENGINE``: ``local`` from scratch, ``local,
    incremental`` with the cache), ``scale`` (the docs asked for), ``docs``, ``seconds``, ``docs_per_s``,
    ``docs_per_s_per_core``, ``peak_rss_mib``, ``driver_peak_rss_mib``, ``peak_tree_rss_mib``, ``cores``,
    ``phases`` and ``provenance``. ``smoke``: the default corpus cut to ``SMOKE_SOURCE_DOCS`` docs a source."""
    from benchmarks._provenance import provenance

    runs = []
    for docs, root in build(work / "base", docs_list, work, SMOKE_SOURCE_DOCS if smoke else None).items():
        for label in ("full", "incremental"):
            runs.append(measure(root, label, smoke) | {"scale": docs, "provenance": provenance(MEASURED, smoke=smoke)})
    return runs


def run_part(root: Path, smoke: bool = False) -> None:
    """In the subprocess: ``tasks.tokenize.run`` on ``root``; its metrics, with the ``phases`` its
    ``_phase_log.PhaseLog`` recorded (the driver's RSS at each of its progress lines), to ``<root>/metrics.json``.
    ``smoke``: only the pretraining sources the workspace holds (a smoke's corpus leaves out
    ``_provenance.SLOW_SOURCE``)."""
    from benchmarks._phase_log import PhaseLog
    from tasks import tokenize
    from tasks.config import Paths, load_params

    cfg = load_params(REPO / "params.yaml").tokenize
    if smoke:
        held = [name for name in cfg.pretrain_sources if (root / "data" / "leakage" / f"{name}.parquet").exists()]
        cfg = cfg.model_copy(update={"pretrain_sources": held})
    paths = Paths(data=root / "data", models=root / "models", metrics=root / "m", reports=root / "r")
    log = PhaseLog()
    metrics = tokenize.run(cfg, paths, log)
    metrics["phases"] = log.finish()
    (root / "metrics.json").write_text(json.dumps(metrics), encoding="utf-8")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, nargs="+", default=[6_000, 60_000], help="pretraining docs a size")
    parser.add_argument("--out", type=Path, help="results JSON (default: print only)")
    parser.add_argument("--part", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--smoke", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.part:
        return run_part(args.part, args.smoke)
    if any(n < 1 for n in args.docs):
        parser.error("--docs takes positive integers")
    with tempfile.TemporaryDirectory(prefix="bench-scaling-tokenize-") as tmp:
        runs = measured_runs(Path(tmp), args.docs)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"runs": runs}, indent=2, sort_keys=True) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
