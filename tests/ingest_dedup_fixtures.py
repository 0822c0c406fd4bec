"""Ingest then dedup over a folder of JSONL files (random texts from a 500-word vocabulary, near copies), and
the files the two stages write: the incremental runs' tests compare them with a from-scratch run's."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

from stage_helpers import RecordingLog
from tasks import dedup, ingest
from tasks.config import Paths, read_yaml
from tasks.config.corpus.dedup import DedupParams
from tasks.config.corpus.ingest import IngestParams

REPO = Path(__file__).resolve().parents[1]
DEDUP = read_yaml(REPO / "params.yaml")["dedup"]
VOCAB = [f"w{k}" for k in range(500)]


def words(rng: random.Random, n: int = 60) -> str:
    return " ".join(rng.choice(VOCAB) for _ in range(n))


def last_word_changed(text: str) -> str:
    """A near duplicate: 55 of the 60 shingles of a 60-word text shared, Jaccard 55/60 ~ 0.92 (threshold 0.8)."""
    return " ".join(text.split()[:-1] + ["changed"])


def write_file(raw: Path, name: str, texts: list[str], labels: list | None = None) -> None:
    labels = labels or ["a"] * len(texts)
    rows = [{"text": text, "label": label} for text, label in zip(texts, labels)]
    (raw / name).write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")


def paths_of(root: Path) -> Paths:
    return Paths(data=root / "data", models=root / "models", metrics=root / "metrics", reports=root / "reports")


def run_both(root: Path, raw: Path, ingest_incremental: bool = True, **dedup_changes) -> tuple[dict, dict]:
    """Ingest then dedup over the jsonl folder ``raw`` into ``root``; returns ({stage: metrics}, {stage: logged})."""
    spec = {
        "name": "docs",
        "kind": "jsonl",
        "role": "task",
        "path": str(raw),
        "text_field": "text",
        "label_field": "label",
    }
    cfg = DedupParams.model_validate({**DEDUP, "num_proc": 1, **dedup_changes})
    logs = {"ingest": RecordingLog(), "dedup": RecordingLog()}
    metrics = {
        "ingest": ingest.run(
            IngestParams(sources=[spec], incremental=ingest_incremental), paths_of(root), logs["ingest"]
        )
    }
    metrics["dedup"] = dedup.run(cfg, paths_of(root), logs["dedup"])
    return metrics, {stage: log.logged for stage, log in logs.items()}


def outputs(root: Path) -> dict[str, bytes]:
    """Every file the two stages write for later stages (not the persisted cache and index)."""
    files = sorted((root / "data" / "ingest").rglob("*")) + sorted((root / "data" / "dedup").rglob("*"))
    return {p.relative_to(root / "data").as_posix(): p.read_bytes() for p in files if p.is_file()}


def every_file(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted((root / "data").rglob("*")) if p.is_file()}


def assert_equals_from_scratch(tmp_path: Path, raw: Path, after: dict, **dedup_changes) -> None:
    """The incremental run's outputs and metrics equal a from-scratch run's on the same raw folder."""
    shutil.rmtree(tmp_path / "full", ignore_errors=True)  # from scratch: no cache, no index
    scratch, scratch_logged = run_both(tmp_path / "full", raw, **dedup_changes)
    assert scratch_logged["dedup"]["dedup.mode"] == "full"
    assert outputs(tmp_path / "inc") == outputs(tmp_path / "full")
    assert after == scratch
