"""Hand-made inputs of the dedup stage (ingest files that follow the row contract, params from params.yaml) and
one run of the stage on them (``DedupRun``; the ``run_dedup`` fixture of tests/conftest.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import NamedTuple

import pyarrow as pa
import pyarrow.parquet as pq

from tasks import dedup
from tasks.config import Paths, read_yaml
from tasks.config.corpus.dedup import DedupParams
from tasks.ingest.normalize import ROW_SCHEMA  # the document row contract dedup reads
from tasks.tracking import NullLog

RAW = read_yaml(Path(__file__).resolve().parents[1] / "params.yaml")["dedup"]


def make_cfg(**overrides) -> DedupParams:
    """params.yaml's dedup section, one process, with ``overrides``."""
    return DedupParams.model_validate({**RAW, "num_proc": 1, **overrides})


def make_paths(tmp_path: Path) -> Paths:
    return Paths(data=tmp_path / "data", models=tmp_path / "models", metrics=tmp_path / "m", reports=tmp_path / "r")


def _write(tmp_path: Path, name: str, records: list[dict]) -> None:
    folder = tmp_path / "data" / "ingest"
    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(records, schema=ROW_SCHEMA), folder / f"{name}.parquet")


def write_source(tmp_path: Path, name: str, texts: list[str], role: str = "task", labels=None) -> list[str]:
    """An ingest file of ``texts`` (no group, tokens or tags); returns the doc_ids."""
    ids = [f"{name}:{i:03d}" for i in range(len(texts))]
    labels = labels or [None] * len(texts)
    _write(
        tmp_path,
        name,
        [
            dict(doc_id=d, source=name, role=role, text=t, label=lab, group=None, tokens=None, tags=None, meta="{}")
            for d, t, lab in zip(ids, texts, labels)
        ],
    )
    return ids


def write_rows(tmp_path: Path, name: str, rows: list[dict], role: str = "task") -> list[str]:
    """An ingest file; each row gives ``text`` or ``tokens`` (+ ``tags``), optionally ``label``/``group`` (default:
    its doc_id); returns the doc_ids."""
    ids = [f"{name}:{i:03d}" for i in range(len(rows))]
    _write(
        tmp_path,
        name,
        [
            dict(
                doc_id=doc_id,
                source=name,
                role=role,
                text=row.get("text") or " ".join(row["tokens"]),
                label=row.get("label"),
                group=row.get("group", doc_id),
                tokens=row.get("tokens"),
                tags=row.get("tags"),
                meta="{}",
            )
            for doc_id, row in zip(ids, rows)
        ],
    )
    return ids


def text(prefix: str, n: int, replace: dict[int, str] | None = None) -> str:
    """``n`` distinct fixed-width words ``<prefix>000 ...``; ``replace`` swaps word positions for others."""
    tokens = [f"{prefix}{i:03d}" for i in range(n)]
    for position, word in (replace or {}).items():
        tokens[position] = word
    return " ".join(tokens)


class DedupRun(NamedTuple):
    """One run's metrics, ``rows`` ({doc_id: (cluster_id, is_duplicate)}) and cluster records (clusters.jsonl's
    lines)."""

    metrics: dict
    rows: dict[str, tuple[str, bool]]
    records: list[dict]

    def flags(self) -> tuple[dict, dict[str, bool], dict[str, dict]]:
        """``metrics, {doc_id: is_duplicate}, {cluster_id: record}``."""
        return (
            self.metrics,
            {doc: dup for doc, (_, dup) in self.rows.items()},
            {r["cluster_id"]: r for r in self.records},
        )


def run_dedup(tmp_path: Path, cfg: DedupParams | None = None) -> DedupRun:
    """Run the stage on ``tmp_path/data/ingest`` (params: ``cfg``, else ``make_cfg()``)."""
    metrics = dedup.run(cfg or make_cfg(), make_paths(tmp_path), NullLog())
    out = tmp_path / "data" / "dedup"
    rows = {}
    for path in sorted(out.glob("*.parquet")):
        table = pq.read_table(path).to_pydict()
        rows.update(zip(table["doc_id"], zip(table["cluster_id"], table["is_duplicate"])))
    records = [json.loads(line) for line in (out / "clusters.jsonl").read_text("utf-8").splitlines()]
    return DedupRun(metrics, rows, records)
