"""The ingest and split stages at growing sizes: wall seconds, driver and tree peak RSS, in records shaped like
``benchmarks/scaling.py``'s ``measure()`` records (engine ``local``: neither stage has another).

Inputs (built before any clock starts, under ``work``, from the default corpus: params.yaml's ingest sources read
by the ingest stage once, ``default_ingest``):

- ingest at ``n`` docs: a user's own source, ``kind: jsonl``, role pretrain, ``text_field: text``: ``n`` records
  ``{"text": ...}`` cycling through the default rows' texts, in files of ``FILE_DOCS`` lines (ids: file and line).
  A corpus of 10^8 documents comes as many files, and a file is ingest's unit (read, cached and written whole), so
  the file size is fixed and the number of files grows with ``n``;
- split at about ``n`` docs: the default rows shaped as dedup writes them (``cluster_id`` = ``doc_id``,
  ``is_duplicate`` false: every row its own cluster), the task sources once and each pretraining source ``k``
  times (copy ``c`` > 0 renames ``doc_id`` and ``group`` ``<id>~<c>``), ``k`` the copies that come nearest ``n``
  docs in all. The task sets stay the size a study labels; a corpus that grows is pretraining text.

Each run is the stage's own ``run`` (params.yaml's section, the ingest source above) in a fresh process (``python
-m benchmarks._scaling_stages <stage> <work>``, ``benchmarks/_measure.run_measured``: wall seconds from spawn to
exit, imports included; the peak RSS of the largest process, ``VmHWM``, of the driver alone, and of the tree: the
stages run in one process, so the three agree).

    from benchmarks import _scaling_stages as stages
    results["runs"] += stages.measured_runs(work / "stages", [7_000, 110_000], smoke=False)
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from benchmarks._measure import rates, run_measured
from benchmarks._provenance import provenance, smoke_sources

REPO = Path(__file__).resolve().parents[1]
STAGES = ("ingest", "split")
#: documents a JSONL file of the ingest input holds (a file is ingest's unit)
FILE_DOCS = 5_000
#: rows a Parquet row group of the split input holds
GROUP_ROWS = 65_536
#: ``--smoke``: documents a source of the default corpus (the base), and the sizes measured
SMOKE_BASE_DOCS, SMOKE_SIZES = 60, [300]
TIMEOUT_S = 3600


def measured_runs(work: Path, sizes: list[int], smoke: bool = False, stages: tuple[str, ...] = STAGES) -> list[dict]:
    """Per stage of ``stages`` and size of ``sizes`` (docs), one run (``measure``) on an input built under
    ``work`` (removed after its run); the default corpus is ingested once, into ``work/base``."""
    base = default_ingest(work / "base", SMOKE_BASE_DOCS if smoke else None)
    out = []
    for size in sizes:
        for stage in stages:
            folder = work / f"{stage}-{size}"
            docs = BUILDERS[stage](base, size, folder)
            out.append(measure(stage, docs, folder, smoke))
            shutil.rmtree(folder)
    return out


def default_ingest(work: Path, max_docs: int | None = None) -> Path:
    """``<work>/ingest``: params.yaml's ingest sources as the ingest stage writes them (at most ``max_docs`` a
    source, ``smoke_sources``)."""
    from tasks import ingest
    from tasks.config import Paths, read_yaml
    from tasks.config.corpus.ingest import IngestParams
    from tasks.tracking import NullLog

    raw = read_yaml(REPO / "params.yaml")["ingest"]
    cfg = IngestParams(**{**raw, "sources": smoke_sources(raw["sources"], max_docs)})
    ingest.run(cfg, Paths(data=work, models=work, metrics=work, reports=work), NullLog())
    return work / "ingest"


def ingest_input(base: Path, docs: int, folder: Path) -> int:
    """``<folder>/raw/part-<i>.jsonl``: ``docs`` records cycling through the base's texts, ``FILE_DOCS`` a file;
    returns ``docs``."""
    from benchmarks._dedup_corpus import read_rows

    texts = read_rows(base)
    raw = folder / "raw"
    raw.mkdir(parents=True)
    for file, start in enumerate(range(0, docs, FILE_DOCS)):
        lines = (json.dumps({"text": texts[i % len(texts)]}) + "\n" for i in range(start, min(docs, start + FILE_DOCS)))
        with (raw / f"part-{file:05d}.jsonl").open("w", encoding="utf-8") as handle:
            handle.writelines(lines)
    return docs


def split_input(base: Path, docs: int, folder: Path) -> int:
    """``<folder>/data/dedup/<source>.parquet`` (and dedup's ``manifest.json``): the base's sources shaped as
    dedup writes them, each pretraining source copied ``k`` times (the module docstring); returns the rows."""
    from tasks.common.files.shards import read_source, source_files, write_manifest

    out = folder / "data" / "dedup"
    out.mkdir(parents=True)
    tables = {name: read_source(files) for name, files in source_files(base).items()}
    pretrain = [name for name, t in tables.items() if t.num_rows and t.column("role")[0].as_py() == "pretrain"]
    fixed = sum(t.num_rows for name, t in tables.items() if name not in pretrain)
    per_copy = sum(tables[name].num_rows for name in pretrain)
    copies = max(1, round((docs - fixed) / per_copy))
    for name, table in tables.items():
        write_copies(table, copies if name in pretrain else 1, out / f"{name}.parquet")
    write_manifest(out, {name: [out / f"{name}.parquet"] for name in tables})
    return fixed + copies * per_copy


def write_copies(table: pa.Table, copies: int, path: Path) -> None:
    """``copies`` copies of ``table`` (ingest rows) as dedup output rows, one copy at a time (the first as it is,
    copy ``c`` with ``doc_id`` and ``group`` suffixed ``~c``), in row groups of at most ``GROUP_ROWS``."""
    with pq.ParquetWriter(path, dedup_schema(table.schema)) as writer:
        for copy in range(copies):
            suffix = f"~{copy}" if copy else ""
            ids = pc.binary_join_element_wise(table.column("doc_id"), suffix, "")
            groups = pc.binary_join_element_wise(table.column("group"), suffix, "")
            rows = table.set_column(0, "doc_id", ids).set_column(table.schema.get_field_index("group"), "group", groups)
            rows = rows.append_column("cluster_id", ids).append_column("is_duplicate", pa.array([False] * len(rows)))
            writer.write_table(rows, row_group_size=GROUP_ROWS)


def dedup_schema(schema: pa.Schema) -> pa.Schema:
    """The ingest schema plus dedup's two columns."""
    return schema.append(pa.field("cluster_id", pa.string())).append(pa.field("is_duplicate", pa.bool_()))


BUILDERS = {"ingest": ingest_input, "split": split_input}


def measure(stage: str, docs: int, folder: Path, smoke: bool = False) -> dict:
    """One run of ``stage`` on ``folder`` in a fresh process: a ``scaling.py``-shaped record (``scale``: the docs)
    with the stage's docs out."""
    command = [sys.executable, "-m", "benchmarks._scaling_stages", stage, str(folder)]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    measured = run_measured(command, REPO, env=env, log=folder / f"{stage}.log", timeout_s=TIMEOUT_S)
    metrics = json.loads((folder / "metrics.json").read_text())
    run = {
        "stage": stage,
        "engine": "local",
        "scale": docs,
        "docs": docs,
        **measured,
        **rates(docs, measured["seconds"]),
    }
    run |= {"docs_out": docs_out(stage, metrics), "provenance": provenance((f"tasks.{stage}",), smoke=smoke)}
    print(
        f"scaling {stage} local: {docs:,} docs in {measured['seconds']:.0f} s ({run['docs_per_s']:,.0f} docs/s), "
        f"peak {measured['driver_peak_rss_mib']:,.0f} MiB driver, {measured['peak_tree_rss_mib']:,.0f} MiB tree",
        flush=True,
    )
    return run


def docs_out(stage: str, metrics: dict) -> int:
    """The docs the stage wrote: ingest's ``totals.docs_out``, split's docs per source and split, summed."""
    if stage == "ingest":
        return metrics["totals"]["docs_out"]
    return sum(sum(source["docs"].values()) for source in metrics["sources"].values())


def main(stage: str, folder: Path) -> None:
    """In the subprocess: the stage's ``run`` on ``<folder>/data`` (ingest: the JSONL source ``<folder>/raw``); its
    metrics go to ``<folder>/metrics.json``."""
    from tasks import ingest, split
    from tasks.config import Paths, load_params
    from tasks.tracking import NullLog

    params = load_params(REPO / "params.yaml")
    paths = Paths(data=folder / "data", models=folder / "models", metrics=folder / "m", reports=folder / "r")
    if stage == "ingest":
        source = {"name": "web", "kind": "jsonl", "path": str(folder / "raw"), "role": "pretrain", "text_field": "text"}
        cfg = type(params.ingest)(**{**params.ingest.model_dump(), "sources": [source]})
        metrics = ingest.run(cfg, paths, NullLog())
    else:
        metrics = split.run(params.split, paths, NullLog())
    (folder / "metrics.json").write_text(json.dumps(metrics), encoding="utf-8")


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
