"""Nothing is silently left out at ingest: a source that yields no document stops ``python -m tasks ingest`` with
one line naming it and its drop counts, for every file kind (a JSONL ``text_field`` its records lack was a silent
0 with exit 0)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import yaml

ROOT = Path(__file__).resolve().parents[1]


def workspace(root: Path, sources: list[dict]) -> Path:
    """A copy of the project's params.yaml (with ``sources``) and dvc.yaml at ``root``; the sources' files go
    under ``root/data/raw`` (a dep of the ingest stage)."""
    params = yaml.safe_load((ROOT / "params.yaml").read_text(encoding="utf-8"))
    params["ingest"]["sources"] = sources
    params["tasks"] = {"cls": {**params["tasks"]["cls"], "source": "good"}}
    params["tokenizer"]["unk_eval_sources"] = ["good"]
    root.mkdir(parents=True, exist_ok=True)
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False), encoding="utf-8")
    shutil.copyfile(ROOT / "dvc.yaml", root / "dvc.yaml")
    return root


def ingest(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tasks", "ingest"], cwd=root, capture_output=True, text=True,
                          timeout=300)  # fmt: skip


def made_sources(raw: Path) -> tuple[list[dict], dict[str, str]]:
    """One good source and a source of each file kind whose every document is dropped; returns the sources and,
    per bad source, the drop counts its message must carry (counted here from what was written)."""
    from datasets import Dataset

    raw.mkdir(parents=True)
    (raw / "good.jsonl").write_text("".join(json.dumps({"body": f"text {i}", "y": "a"}) + "\n" for i in range(3)))
    (raw / "typo.jsonl").write_text("".join(json.dumps({"body": f"text {i}"}) + "\n" for i in range(8)))
    (raw / "blank.csv").write_text("text,label\n  ,a\n\t,b\n,c\n")
    pq.write_table(pa.table({"body": ["x", "y"], "label": ["a", "b"]}), raw / "cols.parquet")
    (raw / "empty").mkdir()
    for k in range(4):
        (raw / "empty" / f"{k}.txt").write_text(" \n\n \t\n")
    Dataset.from_dict({"body": ["p", "q", "r"]}).save_to_disk(str(raw / "hf"))
    (raw / "notes.conll").write_text("# newdoc id = d1\n\n# text = nothing\n")
    sources = [
        {"name": "good", "kind": "jsonl", "role": "task", "path": str(raw / "good.jsonl"), "text_field": "body",
         "label_field": "y"},
        {"name": "typo", "kind": "jsonl", "role": "pretrain", "path": str(raw / "typo.jsonl"), "text_field": "text"},
        {"name": "blank", "kind": "csv", "role": "pretrain", "path": str(raw / "blank.csv"), "text_field": "text"},
        {"name": "cols", "kind": "parquet", "role": "pretrain", "path": str(raw / "cols.parquet"),
         "text_field": "text"},
        {"name": "empty", "kind": "text", "role": "pretrain", "path": str(raw / "empty")},
        {"name": "hf", "kind": "hf_disk", "role": "pretrain", "path": str(raw / "hf"), "text_field": "text"},
        {"name": "notes", "kind": "conll", "role": "pretrain", "path": str(raw / "notes.conll"), "tag_column": 1},
    ]
    counts = {"typo": "8 in, dropped {'missing_text': 8}", "blank": "3 in, dropped {'empty': 3}",
              "cols": "2 in, dropped {'missing_text': 2}", "empty": "4 in, dropped {'empty': 4}",
              "hf": "3 in, dropped {'missing_text': 3}", "notes": "0 in, dropped {}"}
    return sources, counts


def test_sources_of_no_document_stop_ingest_naming_each_in_one_line(tmp_path):
    root = tmp_path / "ws"
    sources, counts = made_sources(root / "data" / "raw")
    done = ingest(workspace(root, sources))
    assert done.returncode == 1, done.stdout + done.stderr
    line = done.stderr.strip().splitlines()[-1]
    assert "Traceback" not in done.stderr
    assert line.startswith("clozeline: ingest: ingest.sources: 6 source(s) yield 0 documents: "), line
    for spec in sources[1:]:
        assert f"{spec['name']!r} ({spec['kind']} {spec['path']}): {counts[spec['name']]}" in line, spec["name"]
    assert f"first: {sources[1]['path']}:1 (missing_text: no value in field 'text')" in line
    assert "'good'" not in line
    assert not (root / "data" / "ingest").exists()  # nothing written: a half corpus is not left for dedup


def test_the_same_sources_fixed_ingest_and_count_in_equals_out(tmp_path):
    root = tmp_path / "ws"
    sources, _ = made_sources(root / "data" / "raw")
    fixed = [sources[0], {**sources[1], "text_field": "body"}, {**sources[3], "text_field": "body"}]
    done = ingest(workspace(root, fixed))
    assert done.returncode == 0, done.stdout + done.stderr
    metrics = json.loads((root / "metrics" / "ingest.json").read_text())
    assert {name: m["docs_out"] for name, m in metrics["sources"].items()} == {"good": 3, "typo": 8, "cols": 2}
    assert metrics["totals"] == {"docs_in": 13, "docs_out": 13, "dropped_total": 0}
