"""Tiny stand-ins for the export stage's inputs, on top of ``finetune_fixtures``: a pair task's tokenized rows,
the raw test rows the export re-scores (``data/leakage/<source>.parquet``), and finetune runs of a tiny task of
each kind (classification, token classification, pair) whose metrics and kept models the export reads."""

from __future__ import annotations

import json
from pathlib import Path

import datasets
import pandas as pd
from transformers import BertTokenizerFast

from finetune_fixtures import OTHER, SPORT, TASKS, TECH, save_tiny_bert, tiny_params, write_task_data
from tasks.config import Paths
from tasks.config.model.export import ExportParams
from tasks.config.model.finetune import FinetuneParams
from tasks.finetune import run as finetune_run
from tasks.tracking import NullLog

SOURCES = {"cls": "news", "ner": "tweets", "pair": "pairs"}
ALL_TASKS = {
    **TASKS,
    "pair": {"kind": "pair_classification", "source": "pairs", "metric": "macro_f1", "recipe": "pair"},
}
N_DOCS = {"train": 12, "dev": 6, "test": 6}
WINDOW_TOKENS, WINDOW_OVERLAP = 8, 2  # finetune_fixtures.ner_rows: capacity 6, overlap 2


def pair_rows(tok, n_docs: int, prefix: str) -> list[dict]:
    """``[CLS] a [SEP] b [SEP]`` rows: label 1 when both texts share a topic; every third pair is long (cut
    longest first by a 10-token limit). Each row keeps its two texts in ``text_pair``."""
    rows = []
    for i in range(n_docs):
        first = (SPORT if i % 2 else TECH)[i % 4 : i % 4 + 2] + OTHER[: 1 + 5 * (i % 3 == 0)]
        same = i % 3 != 1
        second = ((SPORT if i % 2 else TECH) if same else (TECH if i % 2 else SPORT))[i % 5 : i % 5 + 2]
        a, b = " ".join(first), " ".join(second)
        enc = tok(a, b, return_token_type_ids=True)
        rows.append(
            {
                "doc_id": f"{prefix}{i:03d}",
                "text": f"{a}\n\n{b}",
                "n_words": len(first) + len(second),
                "train_overlap": False,
                "input_ids": enc["input_ids"],
                "attention_mask": [1] * len(enc["input_ids"]),
                "label": int(same),
                "n_tokens_full": len(enc["input_ids"]),
                "token_type_ids": enc["token_type_ids"],
                "text_pair": [a, b],
            }
        )
    return rows


def write_pair_data(root: Path, model_folder: Path) -> None:
    """``<root>/tokenize/pair/clozeline/{train,dev,test}`` + ``labels.json``."""
    tok = BertTokenizerFast.from_pretrained(model_folder)
    for split, n in N_DOCS.items():
        rows = [{k: v for k, v in r.items() if k != "text_pair"} for r in pair_rows(tok, n, f"{split}-")]
        datasets.Dataset.from_list(rows).save_to_disk(str(root / "tokenize" / "pair" / "clozeline" / split))
    (root / "tokenize" / "pair" / "clozeline" / "labels.json").write_text(json.dumps(["different", "same"]))


def write_raw_test_rows(paths: Paths, model_folder: Path) -> None:
    """``data/leakage/<source>.parquet`` holding the test rows of every fixture task (the raw text re-scored)."""
    (paths.data / "leakage").mkdir(parents=True, exist_ok=True)
    tok = BertTokenizerFast.from_pretrained(model_folder)
    pairs = {r["doc_id"]: r["text_pair"] for r in pair_rows(tok, N_DOCS["test"], "test-")}
    for task, source in SOURCES.items():
        table = datasets.load_from_disk(str(paths.data / "tokenize" / task / "clozeline" / "test")).to_list()
        rows = {}
        for row in table:
            words = row.get("words")
            rows[row["doc_id"]] = {
                "doc_id": row["doc_id"],
                "role": "task",
                "split": "test",
                "is_duplicate": False,
                "text": row.get("text") or " ".join(words),
                "tokens": words,
                "meta": json.dumps({"text_pair": pairs[row["doc_id"]]} if task == "pair" else {}),
            }
        pd.DataFrame(list(rows.values())).to_parquet(paths.data / "leakage" / f"{source}.parquet")


def finetune_params(seeds: list[int], operational: bool = False) -> FinetuneParams:
    """``tiny_params`` with the majority and TF-IDF baselines for the classifiers and a pair recipe
    (``longest_first``)."""
    base = tiny_params(["pretrained/full/mean-pool"], ["pretrained/full/first"], seeds, operational=operational)
    raw = base.model_dump(mode="json")
    raw["recipes"]["cls"]["baselines"] = ["majority", "tfidf-lr"]
    raw["recipes"]["pair"] = {**raw["recipes"]["cls"], "truncation": "longest_first"}
    raw["tasks"] = ALL_TASKS
    return FinetuneParams.model_validate(raw)


def export_params(log_model: bool = False, tolerance: float = 1e-4) -> ExportParams:
    return ExportParams.model_validate(
        {
            "probability_tolerance": tolerance,
            "threads": 1,
            "batch_size": 4,
            "log_model": log_model,
            "tasks": ALL_TASKS,
            "ner_window_tokens": WINDOW_TOKENS,
            "ner_window_overlap_tokens": WINDOW_OVERLAP,
        }
    )


def build_workspace(root: Path, seeds: list[int]) -> Paths:
    """Tiny BERT, the three tasks' data and raw test rows, and a finetune run of each task (metrics written to
    ``metrics/finetune/<task>.json`` as the runner would)."""
    pretrained = save_tiny_bert(root / "models" / "pretrained", hidden=32, seed=0)
    write_task_data(root / "data", pretrained, "clozeline", N_DOCS)
    write_pair_data(root / "data", pretrained)
    paths = Paths(data=root / "data", models=root / "models", metrics=root / "metrics", reports=root / "reports")
    write_raw_test_rows(paths, pretrained)
    cfg = finetune_params(seeds)
    for task in SOURCES:
        metrics = finetune_run(cfg, paths, NullLog(), task)
        (paths.metrics / "finetune").mkdir(parents=True, exist_ok=True)
        (paths.metrics / "finetune" / f"{task}.json").write_text(json.dumps(metrics), encoding="utf-8")
    return paths
