"""Re-scoring an export as a user runs it: raw test text in, ``python -m clozeline.predict`` in a fresh process,
predictions compared with the ones the finetune stage evaluated.

The raw inputs are the test rows of ``data/leakage/<source>.parquet`` (what tokenize read): a document's
``text``, a pair's ``meta.text_pair``, a sentence's ``tokens`` (its words), for the docs the evaluated run
scored. The fresh process loads the folder with the standard Auto classes (``clozeline.predict.load``), runs
the registered pipeline one document at a time (tokenization included, timed per document) and, for a
classifier, once more at ``export.batch_size`` documents per batch.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
from seqeval.metrics import classification_report
from seqeval.scheme import IOB2
from sklearn.metrics import accuracy_score, f1_score

import clozeline
from clozeline.entities import strict_tags
from tasks.common.files.parquet import read_clean_source

MS_PER_S = 1000


def read_jsonl(path: Path) -> list[dict]:
    """Every JSON object of a JSONL file."""
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]


def raw_inputs(data: Path, source: str, kind: str, doc_ids: list[str]) -> list[dict]:
    """``{doc_id, text}``, ``{doc_id, text, text_pair}`` or ``{doc_id, words}`` per doc of ``doc_ids`` (in that
    order), from the source's clean rows. Raises ``ValueError`` naming the file when a doc is missing."""
    rows = read_clean_source(data, source).set_index("doc_id")
    absent = [d for d in doc_ids if d not in rows.index]
    if absent:
        raise ValueError(f"{data}/leakage/{source}.parquet: no row for evaluated test docs {absent[:3]}")
    out = []
    for doc_id in doc_ids:
        row = rows.loc[doc_id]
        if kind == "token_classification":
            out.append({"doc_id": doc_id, "words": [str(w) for w in row["tokens"]]})
        elif kind == "pair_classification":
            first, second = json.loads(row["meta"] or "{}")["text_pair"]
            out.append({"doc_id": doc_id, "text": first, "text_pair": second})
        else:
            out.append({"doc_id": doc_id, "text": str(row["text"])})
    return out


def run_predict(
    folder: Path, inputs: Path, output: Path, labels: list[str], threads: int, batch_size: int | None
) -> tuple[list[dict], dict]:
    """``python -m clozeline.predict`` on ``inputs`` in a fresh process; returns its records and its timing.
    Raises ``ValueError`` with the process's one-line error (a folder that does not load, labels that differ)."""
    labels_file = output.with_name("labels.json")
    labels_file.write_text(json.dumps(labels), encoding="utf-8")
    cmd = [
        sys.executable,
        "-m",
        "clozeline.predict",
        str(folder),
        "--input",
        str(inputs),
        "--output",
        str(output),
        "--labels",
        str(labels_file),
        "--threads",
        str(threads),
    ]
    cmd += ["--batch-size", str(batch_size)] if batch_size else []
    root = Path(clozeline.__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.startswith("clozeline.predict:")]
        tail = lines[-1] if lines else " ".join(done.stderr.strip().splitlines()[-1:])
        raise ValueError(f"export: {folder}: re-scoring failed: {tail}")
    records = read_jsonl(output)
    return [r for r in records if "timing" not in r], next(r["timing"] for r in records if "timing" in r)


def as_task_order(record: dict, labels: list[str]) -> list[float] | None:
    """A classifier's probabilities in the task's label order (its ``probs`` map label -> probability); a
    tagger's per-word probabilities unchanged; None when the export's labels are not the task's."""
    probs = record["probs"]
    if isinstance(probs, dict):
        return [probs[name] for name in labels] if set(probs) == set(labels) else None
    return probs


def as_read(pred):
    """An evaluated prediction as the export reports it: a label unchanged; a tagger's word tags as the
    evaluation reads them (``clozeline.entities.strict_tags``: an ``I-X`` that starts no entity in strict IOB2
    is ``O``; the same entities, so the same scores)."""
    return strict_tags(pred) if isinstance(pred, list) else pred


def compare(evaluated: list[dict], rescored: list[dict], labels: list[str], tolerance: float) -> dict:
    """Item by item: the same label (or tag per word, ``as_read``), and every probability within ``tolerance``.

    Returns ``items``, ``disagree`` (items failing either), ``label_mismatches``, ``probability_mismatches``,
    ``missing`` (evaluated items the export did not score), ``max_abs_probability_difference`` and
    ``examples`` (up to 5 disagreeing doc ids)."""
    by_id = {r["doc_id"]: r for r in rescored}
    label_bad, prob_bad, missing, worst = [], [], [], 0.0
    for item in evaluated:
        mine = by_id.get(item["doc_id"])
        if mine is None:
            missing.append(item["doc_id"])
            continue
        if mine["pred"] != as_read(item["pred"]):
            label_bad.append(item["doc_id"])
        probs = as_task_order(mine, labels)
        if probs is None or len(probs) != len(item["probs"]):
            prob_bad.append(item["doc_id"])
            continue
        gap = float(np.max(np.abs(np.asarray(probs) - np.asarray(item["probs"])))) if probs else 0.0
        worst = max(worst, gap)
        if gap > tolerance:
            prob_bad.append(item["doc_id"])
    bad = sorted(set(label_bad) | set(prob_bad) | set(missing))
    return {
        "items": len(evaluated),
        "disagree": len(bad),
        "label_mismatches": len(label_bad),
        "probability_mismatches": len(prob_bad),
        "missing": len(missing),
        "max_abs_probability_difference": worst,
        "probability_tolerance": tolerance,
        "examples": bad[:5],
    }


def scores(kind: str, gold: list, pred: list, labels: list[str]) -> dict[str, float]:
    """The contract's test metrics of predictions: classification ``test_accuracy``, ``test_macro_f1`` (every
    label, absent ones scoring 0); token classification entity P/R/F1 (seqeval, strict IOB2, on words)."""
    if kind != "token_classification":
        return {
            "test_accuracy": float(accuracy_score(gold, pred)),
            "test_macro_f1": float(f1_score(gold, pred, labels=labels, average="macro", zero_division=0)),
        }
    micro = classification_report(gold, pred, mode="strict", scheme=IOB2, output_dict=True, zero_division=0)[
        "micro avg"
    ]
    return {
        "test_entity_f1": float(micro["f1-score"]),
        "test_entity_precision": float(micro["precision"]),
        "test_entity_recall": float(micro["recall"]),
    }


def timing(records: list[dict], info: dict, batch_size: int | None, parameters: int | None, size_mib: float) -> dict:
    """The deployment row of the inference-cost table: per-document latency from raw text at batch 1 (p50,
    p95 over every test doc, tokenization included), documents per second at ``batch_size`` (a classifier),
    load time, parameters and size on disk, on the CPU with ``threads``."""
    seconds = np.asarray([r["seconds"] for r in records], dtype=float)
    batch = {
        "1": {
            "p50_ms_per_doc": float(np.percentile(seconds * MS_PER_S, 50)),
            "p95_ms_per_doc": float(np.percentile(seconds * MS_PER_S, 95)),
            "docs_per_s": float(len(seconds) / seconds.sum()) if seconds.sum() else None,
            "timed_batches": len(seconds),
        }
    }
    batched = (info.get("batch") or {}).get(str(batch_size)) if batch_size else None
    if batched:
        batch[str(batch_size)] = {"docs_per_s": len(seconds) / batched, "timed_batches": -(-len(seconds) // batch_size)}
    return {
        "device": "cpu",
        "threads": info.get("threads"),
        "timed_from": "raw text (tokenization included)",
        "batch": batch,
        "load_seconds": info.get("load_seconds"),
        "parameters": parameters,
        "size_on_disk_mib": size_mib,
    }
