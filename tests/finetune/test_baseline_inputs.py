"""What the finetune baselines read: each seed's draw of the arms' train docs (the ``max_train_docs`` hash
sample salted with the seed) and the arms' cut input for the comparator rows, every doc and the full text for
the reference rows; and which row ``select_best`` may name the best baseline."""

from __future__ import annotations

import json
from types import SimpleNamespace

import datasets
import pytest
from transformers import BertTokenizerFast

from tasks.config.model.finetune import FinetuneParams
from tasks.finetune import load_task_data, select_best
from tasks.finetune.baselines import fitting
from tasks.finetune.baselines.runs import run_baseline
from tasks.finetune.baselines.tfidf import arm_inputs
from tasks.finetune.draw import Draw
from tasks.tracking import NullLog

WORDS = "goal match team ball chip code data server the city".split()
TOKENIZER = BertTokenizerFast(
    vocab={w: i for i, w in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS])}
)
LABELS = ["sport", "tech"]
# sha256("0:2:<doc_id>") ranks tr5, tr4, tr2 first and sha256("0:4:<doc_id>") tr1, tr4, tr0 (checked by hand with
# hashlib): with max_train_docs 3, seed 2 draws the three tech docs and seed 4 two sport docs and a tech one, while
# all six docs tie 3-3 (majority: sport, the smaller label id); sha256("0:<doc_id>") keeps dv3, dv2 of dev
TRAIN = [
    ("goal match the team ball goal city", 0),
    ("ball goal the match team city goal", 0),
    ("chip code the data server city code", 1),
    ("team ball the goal match city ball", 0),
    ("code data the server chip city data", 1),
    ("server chip the code data city chip", 1),
]
DEV = [("goal team", 0), ("ball match", 0), ("chip data", 1), ("code server", 1)]
TEST = [("goal ball the team match city goal", 0), ("data chip the server code city data", 1)]


def _params(max_train_docs: int | None, max_seq_len: int, seeds=(1,)) -> FinetuneParams:
    from finetune_fixtures import tiny_params

    raw = tiny_params(
        ["pretrained/full/mean-pool"], ["pretrained/full/first"], list(seeds), max_train_docs
    ).model_dump()
    raw["recipes"]["cls"] |= {
        "max_dev_docs": 2,
        "max_seq_len_tokens": max_seq_len,
        "truncation": "head_tail",
        "head_tokens": 2,
        "baseline_c_grid": [100.0],
        "baseline_tfidf_ngrams": {"word": [1, 1], "char_wb": [2, 3]},
    }
    return FinetuneParams.model_validate(raw)


def _rows(prefix: str, items: list[tuple[str, int]]) -> list[dict]:
    out = []
    for i, (text, label) in enumerate(items):
        ids = TOKENIZER(text)["input_ids"]
        out.append(
            {
                "doc_id": f"{prefix}{i}",
                "text": text,
                "n_words": len(text.split()),
                "train_overlap": False,
                "input_ids": ids,
                "attention_mask": [1] * len(ids),
                "label": label,
                "n_tokens_full": len(ids),
            }
        )
    return out


@pytest.fixture()
def task_data(tmp_path):
    folder = tmp_path / "tokenize" / "cls" / "clozeline"
    for split, prefix, items in (("train", "tr", TRAIN), ("dev", "dv", DEV), ("test", "te", TEST)):
        datasets.Dataset.from_list(_rows(prefix, items)).save_to_disk(str(folder / split))
    (folder / "labels.json").write_text(json.dumps(LABELS))
    return folder


def _fit(task_data, tmp_path, name: str, reference: bool, cfg: FinetuneParams, tok: str | None = None, seed: int = 1):
    tcfg = cfg.task("cls")
    data = load_task_data(task_data, cfg.data_seed, tcfg)
    row = fitting.Row(name, "baseline/x/y", reference, tok)
    draw = Draw(tcfg.max_train_docs, cfg.data_seed)
    entry, _, kept = run_baseline(
        "cls", "cls", row, data, TOKENIZER, LABELS, tcfg, cfg, tmp_path / "out", NullLog(), draw
    )
    out = tmp_path / "out" / "baseline/x/y"
    preds = [json.loads(x) for x in (out / f"seed{0 if reference else seed}.test.jsonl").read_text().splitlines()]
    return entry, kept, preds


def test_the_comparator_fits_on_each_seeds_draw_of_the_arms_train_docs_and_the_reference_on_all(task_data, tmp_path):
    cfg = _params(max_train_docs=3, max_seq_len=64, seeds=(2, 4))
    entry, _, preds = _fit(task_data, tmp_path, "majority", False, cfg, seed=2)
    # seed 2's three docs (tr5, tr4, tr2) are all tech: the comparator predicts tech with frequencies [0, 1]
    assert [(p["pred"], p["probs"]) for p in preds] == [("tech", [0.0, 1.0])] * 2
    # seed 4's (tr1, tr4, tr0): two sport docs and one tech doc
    seed4 = [json.loads(x) for x in (tmp_path / "out" / "baseline/x/y" / "seed4.test.jsonl").read_text().splitlines()]
    assert [(p["pred"], p["probs"]) for p in seed4] == [("sport", [pytest.approx(2 / 3), pytest.approx(1 / 3)])] * 2
    per_seed = entry["details"]["per_seed"]
    assert sorted(per_seed) == ["2", "4"] and entry["test_macro_f1"]["seeds"] == [2, 4]
    assert all(per_seed[s]["train_docs"] == 3 and per_seed[s]["dev_docs"] == 2 for s in per_seed)
    assert entry["setting"] == {"2": {"label": "tech"}, "4": {"label": "sport"}}
    assert not (tmp_path / "out" / "baseline/x/y" / "seed0.test.jsonl").exists()
    assert entry["role"] == "comparator" and entry["input"] == "the arms' train docs, labels only"
    entry, _, preds = _fit(task_data, tmp_path, "majority", True, cfg)
    # all six train docs tie 3-3: sport, the smaller label id
    assert [(p["pred"], p["probs"]) for p in preds] == [("sport", [0.5, 0.5])] * 2
    assert entry["details"]["per_seed"]["0"]["train_docs"] == 6 and entry["details"]["per_seed"]["0"]["dev_docs"] == 4
    assert entry["role"] == "reference" and entry["input"] == "every train doc, labels only"
    assert sorted(entry["details"]["per_seed"]) == ["0"]  # one run: every train doc, whatever the seed


def test_the_arms_input_is_the_head_and_tail_tokens_decoded():
    tcfg = SimpleNamespace(max_seq_len_tokens=6, truncation="head_tail", head_tokens=2)
    texts, seen = arm_inputs(_rows("tr", TRAIN[:1]), TOKENIZER, tcfg)
    # 7 content tokens, 4 kept: the first 2 (goal match) and the last 2 (goal city); "the team ball" is cut
    assert texts == ["goal match goal city"] and seen == [round(4 / 7, 6)]
    short = SimpleNamespace(max_seq_len_tokens=64, truncation="head_tail", head_tokens=2)
    assert arm_inputs(_rows("tr", TRAIN[:1]), TOKENIZER, short) == (["goal match the team ball goal city"], [1.0])


def test_the_tfidf_comparator_reads_only_the_arms_tokens(task_data, tmp_path):
    cfg = _params(max_train_docs=None, max_seq_len=8)
    entry, kept, preds = _fit(task_data, tmp_path, "tfidf-lr", False, cfg, tok="clozeline")
    vectorizer = kept["fitted"][0]
    # 8 tokens = [CLS], the first 2 and the last 4 of 7 content tokens, [SEP]: every doc's third word, "the", is
    # cut, so no word or character n-gram of it ("th", "he", "the") reaches the vocabulary
    assert entry["setting"]["1"]["analyzer"] in ("word", "char_wb") and kept["seed"] == 1
    assert not any("the" in term for term in vectorizer.vocabulary_)
    assert kept["cut"] == {"max_seq_len_tokens": 8, "truncation": "head_tail", "head_tokens": 2}
    # the predictions say how much of each test doc was read: 6 of 7 content tokens, as the arms' records do
    assert [(p["doc_id"], p["seen_fraction"]) for p in preds] == [("te0", round(6 / 7, 6)), ("te1", round(6 / 7, 6))]
    full, kept_full, _ = _fit(task_data, tmp_path, "tfidf-lr", True, cfg)
    assert any("the" in term for term in kept_full["fitted"][0].vocabulary_) and kept_full["cut"] is None
    assert full["input"] == "every train doc, full text"


def test_the_same_params_give_the_same_prediction_bytes(task_data, tmp_path):
    cfg = _params(max_train_docs=None, max_seq_len=8)
    _fit(task_data, tmp_path / "a", "tfidf-lr", False, cfg, tok="clozeline")
    _fit(task_data, tmp_path / "b", "tfidf-lr", False, cfg, tok="clozeline")
    first, second = (tmp_path / d / "out" / "baseline/x/y" / "seed1.test.jsonl" for d in ("a", "b"))
    assert first.read_bytes() == second.read_bytes()


def _runs(scores: dict[str, float]) -> dict:
    return {
        k: {"details": {"per_seed": {"0": {"dev_best_macro_f1": v}}}, "setting": {"k": k}} for k, v in scores.items()
    }


def test_the_best_baseline_reads_the_best_arms_input_and_reference_rows_are_never_chosen():
    runs = _runs(
        {
            "pretrained/full/mean-pool": 0.8,
            "reference/full/mean-pool": 0.9,
            "baseline/majority/labels": 0.3,
            "baseline/tfidf-lr/clozeline-cut": 0.85,
            "baseline/tfidf-lr/reference-cut": 0.7,
            "baseline/tfidf-lr/all-data": 0.99,
        }
    )
    arms = {"pretrained/full/mean-pool": "clozeline", "reference/full/mean-pool": "reference"}
    comparators = {
        "baseline/majority/labels": None,
        "baseline/tfidf-lr/clozeline-cut": "clozeline",
        "baseline/tfidf-lr/reference-cut": "reference",
    }
    sel = select_best(runs, arms, comparators, "cls")
    # the reference arm wins; the clozeline cut scores higher on dev but is not the input that arm reads
    assert sel["best_arm"] == "reference/full/mean-pool" and sel["best_baseline"] == "baseline/tfidf-lr/reference-cut"
    assert "baseline/tfidf-lr/all-data" not in sel["dev"] and set(sel["baselines"]) == set(comparators)
    # each arm's floor comparator reads that arm's input: the clozeline cut for ours, whatever the best arm read
    assert sel["comparator_of"] == {
        "pretrained/full/mean-pool": "baseline/tfidf-lr/clozeline-cut",
        "reference/full/mean-pool": "baseline/tfidf-lr/reference-cut",
    }
    runs["reference/full/mean-pool"]["details"]["per_seed"]["0"]["dev_best_macro_f1"] = 0.1
    assert select_best(runs, arms, comparators, "cls")["best_baseline"] == "baseline/tfidf-lr/clozeline-cut"
