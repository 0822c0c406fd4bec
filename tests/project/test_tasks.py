"""Tasks are data: runs with two classification tasks and a pair task, with only NER, and with only
classification, on corpora the tests write, through every stage a task needs (ingest .. tokenize, finetune,
report) and without pretraining: the arms are the packaged MiniLM (``reference``) and the baselines, and the
tokenizer trains on the task sources' own train text, so no placeholder source exists.

Expected values come from the made data itself: the majority baseline's test accuracy is the share of the
training majority class in the test split, read back from the leakage outputs with pandas, and a pair's
``input_ids`` are what the MiniLM tokenizer gives for ``tokenizer(a, b)``.
"""

from __future__ import annotations

import csv
import json
import random
import shutil
from pathlib import Path

import datasets
import pandas as pd
import pytest
from transformers import AutoTokenizer

from tasks.__main__ import run_stage
from tasks.common.files.shards import read_named
from tasks.common.models.encoders import reference_model_dir
from tasks.config import load_params
from tasks.tracking import NullLog

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow, pytest.mark.pipeline]  # whole pipelines on tiny params: make test-pipeline (and CI)
TOPICS = {"sport": "match goal team coach season league striker", "tech": "chip software phone network code data"}
FILLER = "the a of and to in on for with at by from about after before over under".split()
RECIPE = {  # seconds per run: two seeds of the MiniLM, one epoch, no sweep beyond one learning rate
    "configs": ["reference/full/mean-pool"],
    "baselines": ["majority", "tfidf-lr"],
    "baseline_c_grid": [1.0],
    "baseline_tfidf_ngrams": {"word": [1, 2]},
    "baseline_memorise_cases": ["cased", "lowercased"],
    "lr_grid": [1.0],
    "lr_grid_widen": 0,
    "max_train_docs": None,
    "max_dev_docs": None,
    "max_test_docs": None,
    "max_seq_len_tokens": 48,
    "truncation": "head",
    "head_tokens": 0,
    "batch_size": 8,
    "length_group_batches": 1,
    "max_epochs": 1,
    "patience_epochs": 1,
    "lr_encoder": 5e-4,
    "lr_encoder_reference": 5e-5,
    "lr_head": 2e-3,
    "weight_decay": 0.01,
    "warmup_fraction": 0.1,
    "max_grad_norm": 1.0,
    "head_dropout": 0.1,
    "divergence_margin": 0.0,
    "dose_response": None,
}
RECIPES = {
    "cls": RECIPE,
    "pair": {**RECIPE, "truncation": "longest_first"},
    "ner": {**RECIPE, "configs": ["reference/full/first"], "baselines": ["memorise"], "max_seq_len_tokens": None},
}
TASKS = {
    "news": {"kind": "classification", "source": "news", "metric": "macro_f1", "recipe": "cls"},
    "reviews": {"kind": "classification", "source": "reviews", "metric": "accuracy", "recipe": "cls"},
    "nli": {"kind": "pair_classification", "source": "nli", "metric": "macro_f1", "recipe": "pair"},
    "tags": {"kind": "token_classification", "source": "tags", "metric": "entity_f1", "recipe": "ner"},
}


def sentence(rng: random.Random, label: str, n: int = 14) -> str:
    topic = TOPICS[label].split()
    return " ".join(
        rng.choice(topic) if i % 3 == 0 else rng.choice(FILLER) + str(rng.randrange(10**6)) for i in range(n)
    )


def write_corpora(raw: Path) -> None:
    """A CSV and a JSONL classification corpus, a JSONL pair corpus and a CoNLL NER corpus, 60 records each."""
    rng = random.Random(0)
    raw.mkdir(parents=True)
    with (raw / "news.csv").open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["text", "label"])
        writer.writerows((sentence(rng, label), label) for label in ("sport", "tech") * 30)
    reviews = [{"body": sentence(rng, label), "stars": label} for label in ("sport", "tech", "tech") * 20]
    (raw / "reviews.jsonl").write_text("".join(json.dumps(r) + "\n" for r in reviews), encoding="utf-8")
    pairs = []
    for i in range(60):
        first, other = ("sport", "tech") if i % 2 else ("tech", "sport")
        same = i % 3 != 0
        pairs.append(
            {
                "premise": sentence(rng, first),
                "hypothesis": sentence(rng, first if same else other, 8),
                "label": "entail" if same else "contradict",
            }
        )
    (raw / "nli.jsonl").write_text("".join(json.dumps(p) + "\n" for p in pairs), encoding="utf-8")
    lines = []
    for i in range(60):
        words = [f"w{rng.randrange(10**6)}" for _ in range(6)]
        lines += [f"{w}\tO" for w in words[:2]] + ["Paris\tB-LOC", f"Hotel{i}\tI-LOC"] + [f"{w}\tO" for w in words[2:]]
        lines.append("")
    (raw / "tags.conll").write_text("\n".join(lines) + "\n", encoding="utf-8")


SOURCES = [
    {"name": "news", "kind": "csv", "role": "task", "path": "news.csv", "text_field": "text", "label_field": "label"},
    {
        "name": "reviews",
        "kind": "jsonl",
        "role": "task",
        "path": "reviews.jsonl",
        "text_field": "body",
        "label_field": "stars",
    },
    {
        "name": "nli",
        "kind": "jsonl",
        "role": "task",
        "path": "nli.jsonl",
        "text_field": "premise",
        "text_pair_field": "hypothesis",
        "label_field": "label",
    },
    {"name": "tags", "kind": "conll", "role": "task", "path": "tags.conll", "tag_column": 1},
]


def params(root: Path, tasks: dict):
    """The repo's params with the made sources and ``tasks``, everything written under ``root``."""
    sources = [{**s, "path": str(root / "raw" / s["path"])} for s in SOURCES]
    texts = ["news", "reviews", "nli", "tags"]
    return load_params(
        ROOT / "params.yaml",
        overrides={
            "paths": {
                "data": str(root / "data"),
                "models": str(root / "models"),
                "metrics": str(root / "metrics"),
                "reports": str(root / "reports"),
            },
            "ingest.sources": sources,
            "tasks": tasks,
            "finetune.recipes": RECIPES,
            "finetune.seeds": [1, 2],
            "finetune.workers": 1,
            "finetune.operational.enabled": False,
            "tokenizer.pretrain_sources": texts,
            "tokenizer.unk_eval_sources": [],
            "tokenizer.vocab_size_tokens": 400,
            "tokenize.pretrain_sources": texts,
            "tokenize.max_seq_len_tokens": 32,
            "tokenize.ner_max_seq_len_tokens": 32,
            "tokenize.ner_window_overlap_tokens": 8,
            "leakage.planted.max_docs": 2,
            "report.bootstrap_resamples": 1000,
            "report.slice_bootstrap_resamples": 500,
            "report.figure_runs": {},
        },
    )


def run_tasks(root: Path, tasks: dict, claims: list[dict]) -> tuple[dict, dict]:
    """tokenize, finetune@<task> for each task, report (with ``claims``); returns the metrics of tokenize and of
    the report."""
    cfg = params(root, tasks)
    tokenize = run_stage("tokenize", cfg, NullLog())
    for task in tasks:
        metrics = run_stage("finetune", cfg, NullLog(), task)
        (root / "metrics" / "finetune").mkdir(parents=True, exist_ok=True)
        (root / "metrics" / "finetune" / f"{task}.json").write_text(json.dumps(metrics))
    (root / "reports").mkdir(exist_ok=True)
    claims_file = {"question": "made data", "claims": claims}
    (root / "reports" / "claims.yaml").write_text(json.dumps(claims_file), encoding="utf-8")
    return tokenize, run_stage("report", cfg, NullLog())


def claim(task: str, arm: str) -> dict:
    baseline = "memorise/words" if task == "tags" else "majority/labels"
    return {
        "id": f"{task}-beats-baseline",
        "statement": "s",
        "evidence": "extrinsic",
        "kind": "difference",
        "task": task,
        "data_slice": f"{task}/test",
        "metric": f"test_{TASKS[task]['metric']}",
        "treatment": f"finetune/{task}/{arm}",
        "baseline": f"finetune/{task}/baseline/{baseline}",
        "ablation": "the encoder",
        "min_effect": 0.0,
        "known_confounders": [],
    }


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """ingest .. tokenizer on the made corpora, once (every run below copies it)."""
    root = tmp_path_factory.mktemp("corpus")
    write_corpora(root / "raw")
    cfg = params(root, TASKS)
    for stage in ("ingest", "dedup", "split", "leakage", "tokenizer"):
        run_stage(stage, cfg, NullLog())
    return root


def copy_of(corpus: Path, tmp_path: Path) -> Path:
    for folder in ("raw", "data", "models"):
        shutil.copytree(corpus / folder, tmp_path / folder)
    return tmp_path


def majority_test_accuracy(root: Path, source: str) -> float:
    rows = pd.read_parquet(root / "data" / "leakage" / f"{source}.parquet")
    rows = rows[~rows["is_duplicate"]]
    majority = rows[rows["split"] == "train"]["label"].value_counts().sort_index().idxmax()
    return float((rows[rows["split"] == "test"]["label"] == majority).mean())


def test_two_classification_tasks_and_a_pair_task_run_with_claims_by_name(corpus, tmp_path):
    root = copy_of(corpus, tmp_path)
    chosen = {name: TASKS[name] for name in ("news", "reviews", "nli")}
    _, report = run_tasks(
        root, chosen, [claim("news", "reference/full/mean-pool"), claim("nli", "reference/full/mean-pool")]
    )
    for task in chosen:
        metrics = json.loads((root / "metrics" / "finetune" / f"{task}.json").read_text())
        assert metrics["kind"] == TASKS[task]["kind"] and metrics["metric"] == f"test_{TASKS[task]['metric']}"
        majority = metrics["runs"]["baseline/majority/labels"]["test_accuracy"]["per_seed"]
        # one fit per fine-tuning seed's draw; max_train_docs null: each draws every train doc
        assert majority == [pytest.approx(majority_test_accuracy(root, TASKS[task]["source"]))] * 2
    ours = {"news-beats-baseline", "nli-beats-baseline"}  # beside the standard claims of the three tasks
    assert ours <= set(report["claims"]) and {"best-arm-beats-best-baseline-reviews"} <= set(report["claims"])
    assert all(not report["claims"][c]["verdict"].startswith("not run") for c in ours)
    assert (root / "reports" / "figures" / "news_confusion.png").exists()
    assert (root / "reports" / "figures" / "nli_confusion.png").exists()


def test_a_pair_row_holds_both_texts_so_dedup_and_leakage_see_the_whole_pair(corpus):
    rows = read_named(corpus / "data" / "ingest", "nli").to_pandas()
    first = rows.iloc[0]
    pair = json.loads(first["meta"])["text_pair"]
    assert first["text"] == f"{pair[0]}\n\n{pair[1]}"  # what dedup and leakage match
    source = json.loads((corpus / "raw" / "nli.jsonl").read_text().splitlines()[0])
    assert pair == [source["premise"], source["hypothesis"]]


def test_pair_rows_are_the_tokenizers_own_pair_encoding(corpus, tmp_path):
    root = copy_of(corpus, tmp_path)
    run_stage("tokenize", params(root, {"nli": TASKS["nli"]}), NullLog())
    tok = AutoTokenizer.from_pretrained(reference_model_dir())
    test = datasets.load_from_disk(str(root / "data" / "tokenize" / "nli" / "reference" / "test")).to_list()
    rows = read_named(root / "data" / "ingest", "nli").to_pandas().set_index("doc_id")
    for row in test:
        a, b = json.loads(rows.loc[row["doc_id"], "meta"])["text_pair"]
        expected = tok(a, b)
        assert row["input_ids"] == expected["input_ids"] and row["token_type_ids"] == expected["token_type_ids"]
        assert row["input_ids"].count(tok.sep_token_id) == 2


def test_ner_only_run_needs_no_classification_task(corpus, tmp_path):
    root = copy_of(corpus, tmp_path)
    tokenize, report = run_tasks(
        root,
        {"tags": TASKS["tags"]},
        [claim("tags", "reference/full/first"), claim("news", "reference/full/mean-pool")],
    )
    assert {k for k in tokenize if k not in ("pretrain", "max_seq_len_tokens")} == {"tags", "tags_input"}
    assert sorted(p.name for p in (root / "metrics" / "finetune").iterdir()) == ["tags.json"]
    assert not report["claims"]["tags-beats-baseline"]["verdict"].startswith("not run")
    assert report["claims"]["news-beats-baseline"]["verdict"] == "not run"  # a task that is not in params
    assert not any(c.endswith("-news") for c in report["claims"])  # no standard claim of it


def test_classification_only_run_needs_no_ner_task(corpus, tmp_path):
    root = copy_of(corpus, tmp_path)
    _, report = run_tasks(root, {"news": TASKS["news"]}, [claim("news", "reference/full/mean-pool")])
    assert sorted(p.name for p in (root / "data" / "tokenize").iterdir()) == ["news", "pretrain"]
    assert not report["claims"]["news-beats-baseline"]["verdict"].startswith("not run")
