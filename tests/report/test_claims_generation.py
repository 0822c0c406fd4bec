"""The standard claims generated for the tasks of params.yaml, and reports/claims.yaml applied on top
(tasks/report/claims/standard.py; issue 59 item 4): the default tasks get the claim set they were written with, a
new task gets its kind's set under its own name, a user's override, claim and drop survive regeneration, and a
bad edit is one error naming the file and the claim."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tasks.config import load_params
from tasks.config.model.report import ReportSetup
from tasks.config.tasks import TaskSpec
from tasks.report.claims.grammar import ClaimsError
from tasks.report.claims.standard import claim_set, gate_claims, standard_claims

ROOT = Path(__file__).resolve().parents[2]
SETUP = load_params(ROOT / "params.yaml").report.setup
#: The claims of reports/claims.yaml as written by hand for the default tasks, in the file's order (before the
#: generator: commit b89c678's parent), with the six ids that gained their task's name.
DEFAULT_IDS = [
    "pretrained-mlm-predicts-heldout-masks",
    "pretraining-helps-cls",
    "pretraining-helps-ner",
    "full-beats-frozen-cls",
    "mean-pool-beats-cls-pool-cls",
    "contextual-layers-separate-senses",
    "reference-contextual-layers-separate-senses",
    "ours-within-5pt-of-reference-cls",
    "leakage-audit-finds-planted-copies",
    "leakage-audit-finds-synonym-copies",
    "leakage-audit-finds-20-word-quotes",
    "semantic-detector-precision",
    "no-eval-leakage-after-audit",
    "first-beats-all-subwords-ner",
    "continued-pretraining-helps-cls",
    "best-arm-beats-best-baseline-cls",
    "best-arm-beats-best-baseline-cls-clean",
    "best-arm-beats-best-baseline-cls-semantically-clean",
    "best-arm-beats-best-baseline-ner",
    "pretrained-mlm-prefers-acceptable-minimal-pairs",
    "pretrained-mlm-beats-unigram-on-minimal-pairs",
    "pretrained-mlm-agreement-across-attractor",
    "full-finetuning-no-worse-calibrated-than-tfidf-cls",
    "span-confidence-no-worse-calibrated-than-random-init-ner",
    "pretraining-helps-most-with-few-labels-cls",
    "pretraining-helps-most-with-few-labels-ner",
    "best-arm-beats-best-baseline-at-32-docs-cls",
    "best-arm-beats-best-baseline-at-160-docs-cls",
    "best-arm-beats-best-baseline-at-80-docs-ner",
    "best-arm-beats-best-baseline-at-400-docs-ner",
    "all-mask-no-worse-than-80-10-10-cls",
    "all-mask-no-worse-than-80-10-10-ner",
    "mask-rate-15-no-worse-than-main-rate-cls",
    "mask-rate-15-no-worse-than-main-rate-ner",
]


def with_tasks(tasks: dict[str, dict], **recipes) -> ReportSetup:
    """The default setup with ``tasks`` (name -> TaskSpec fields) and recipes changed by keyword."""
    changed = {name: SETUP.recipes[name].model_copy(update=edit) for name, edit in recipes.items()}
    return SETUP.model_copy(
        update={"tasks": {n: TaskSpec(**t) for n, t in tasks.items()}, "recipes": SETUP.recipes | changed}
    )


def write(path: Path, content: dict) -> Path:
    path.write_text(yaml.safe_dump(content), encoding="utf-8")
    return path


def test_the_default_tasks_get_the_claims_they_were_written_with():
    claims = claim_set(ROOT / "reports" / "claims.yaml", SETUP)
    assert [c.id for c in claims.claims] == DEFAULT_IDS
    by_id = {c.id: c for c in claims.claims}
    gap = by_id["pretraining-helps-most-with-few-labels-cls"]  # sizes from finetune.recipes.cls: [32], 160
    assert gap.treatment == "finetune/cls/pretrained@n32/full/mean-pool - random@n32/full/mean-pool"
    assert "on 160 train docs" in gap.statement and gap.family == "primary" and gap.min_effect == 0.02
    ner = by_id["pretraining-helps-ner"]
    assert (ner.task, ner.metric, ner.data_slice) == ("ner", "test_entity_f1", "wnut16/test")
    assert ner.baseline == "finetune/ner/random/full/first" and ner.preconditions[0].at_least == 1.0
    assert by_id["no-eval-leakage-after-audit"].data_slice.startswith(
        "all eval sets (dev and test of bbc_news and wnut16)"
    )
    assert gate_claims(SETUP) == {"cls": "best-arm-beats-best-baseline-cls", "ner": "best-arm-beats-best-baseline-ner"}


def test_each_task_gets_its_kinds_set_under_its_own_name():
    setup = with_tasks(
        {
            "topics": {"kind": "classification", "source": "bbc_news", "metric": "accuracy", "recipe": "cls"},
            "nli": {"kind": "pair_classification", "source": "bbc_news", "metric": "macro_f1", "recipe": "cls"},
            "Shop": {"kind": "token_classification", "source": "wnut16", "metric": "entity_f1", "recipe": "ner"},
        },
        ner={"train_sizes": [], "curve_configs": []},
    )
    ids = [c["id"] for c in standard_claims(setup)["claims"]]
    # counted in the hand-written default file: 12 cls claims + 2 curve sizes (32, 160), 7 ner claims (no curve
    # here), and 11 claims of the pretraining, probe and leakage stages, once
    per_task = {"topics": 14, "nli": 14, "Shop": 7}
    for task, count in per_task.items():
        assert len([i for i in ids if i.endswith(f"-{task}") or f"-{task}-" in i]) == count, task
    assert len(ids) == 11 + sum(per_task.values())
    assert ids.index("pretraining-helps-topics") + 1 == ids.index("pretraining-helps-nli")  # one template, in order
    assert "best-arm-beats-best-baseline-at-32-docs-nli" in ids and not any("-docs-Shop" in i for i in ids)
    claims = {c["id"]: c for c in standard_claims(setup)["claims"]}
    assert claims["pretraining-helps-topics"]["metric"] == "test_accuracy"
    assert "<train_sizes>" in claims["pretraining-helps-most-with-few-labels-Shop"]["treatment"]  # reads `off`
    assert gate_claims(setup)["Shop"] == "best-arm-beats-best-baseline-Shop"
    assert claim_set(ROOT / "reports" / "claims.yaml", setup).claims  # all valid, the upper-case task name too


def test_two_tasks_whose_claims_share_an_id_are_an_error_naming_both():
    # tasks news and news-clean both gave best-arm-beats-best-baseline-news-clean: one claim was silently lost
    spec = {"kind": "classification", "source": "bbc_news", "metric": "macro_f1", "recipe": "cls"}
    with pytest.raises(
        ClaimsError,
        match=r"^params.yaml tasks: 'news-clean' and 'news' both give the standard claim "
        r"'best-arm-beats-best-baseline-news-clean': rename one$",
    ):
        standard_claims(with_tasks({"news": spec, "news-clean": spec}))


def test_an_override_a_claim_and_a_drop_survive_regeneration(tmp_path):
    mine = {
        "id": "ours",
        "statement": "s",
        "evidence": "extrinsic",
        "kind": "difference",
        "task": "cls",
        "data_slice": "bbc_news/test",
        "metric": "test_macro_f1",
        "treatment": "finetune/cls/best-arm",
        "baseline": "finetune/cls/best-baseline",
        "ablation": "a",
        "min_effect": 0.0,
        "known_confounders": [],
    }
    path = write(
        tmp_path / "claims.yaml",
        {
            "question": "q?",
            "drop": ["semantic-detector-precision"],
            "claims": [{"id": "pretraining-helps-cls", "min_effect": 0.07, "statement": "mine"}, mine],
        },
    )
    for setup in (
        SETUP,
        with_tasks({name: spec.model_dump() for name, spec in SETUP.tasks.items()}, cls={"train_sizes": [16, 64]}),
    ):
        claims = claim_set(path, setup)
        ids = [c.id for c in claims.claims]
        over = claims.claims[ids.index("pretraining-helps-cls")]
        assert claims.question == "q?" and ids.index("pretraining-helps-cls") == 1 and ids[-1] == "ours"
        assert (over.min_effect, over.statement) == (0.07, "mine")
        assert over.treatment == "finetune/cls/pretrained/full/mean-pool"  # the fields not given stay generated
        assert "semantic-detector-precision" not in ids
    assert "best-arm-beats-best-baseline-at-16-docs-cls" in ids  # the last setup: its own curve sizes
    assert "best-arm-beats-best-baseline-at-32-docs-cls" not in ids


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (
            {"claims": [{"id": "pretraining-helps-cls", "min_effect": "big"}]},
            "claim 'pretraining-helps-cls' (a standard claim, overridden): min_effect: Input should be a valid number",
        ),
        (
            {"claims": [{"id": "pretraining-helps-clss", "min_effect": 0.1}]},
            "claim 'pretraining-helps-clss' (no standard claim of this run's tasks, "
            "did you mean 'pretraining-helps-cls'? A new claim needs every field): ",
        ),
        ({"drop": ["pretraining-helps-topics"]}, "drop: 'pretraining-helps-topics' is not a standard claim"),
        (
            {"drop": ["pretraining-helps-nerr"]},
            "drop: 'pretraining-helps-nerr' is not a standard claim of this run's "
            "tasks (did you mean 'pretraining-helps-ner'? have: [",
        ),
        # both were "is not a standard claim of this run's tasks", which they are
        (
            {"claims": [{"id": "pretraining-helps-cls", "min_effect": 0.1}], "drop": ["pretraining-helps-cls"]},
            "drop: 'pretraining-helps-cls' is also overridden in claims: keep one of the two",
        ),
        ({"drop": ["pretraining-helps-ner", "pretraining-helps-ner"]}, "drop: 'pretraining-helps-ner' is listed twice"),
        ({"claims": [{"id": "a"}, {"id": "a"}]}, "claim 'a' is written twice"),
        ({"claim": []}, "expected a mapping of question, claims, drop, got ['claim']"),
    ],
)
def test_a_bad_edit_is_one_error_naming_the_file_and_the_claim(tmp_path, content, message):
    path = write(tmp_path / "claims.yaml", content)
    with pytest.raises(ClaimsError) as err:
        claim_set(path, SETUP)
    assert str(err.value).startswith(f"{path}: ") and message in str(err.value)


def test_show_claims_prints_the_runs_claims_before_any_run(tmp_path):
    path = write(tmp_path / "claims.yaml", {"claims": [{"id": "pretraining-helps-ner", "min_effect": 0.03}]})
    shown = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "show_claims.py"), str(ROOT / "params.yaml"), str(path)],
        capture_output=True,
        text=True,
        check=True,
    )
    claims = yaml.safe_load(shown.stdout)["claims"]
    assert [c["id"] for c in claims] == DEFAULT_IDS
    assert claims[2]["min_effect"] == 0.03 and claims[2]["treatment"] == "finetune/ner/pretrained/full/first"
    bad = write(tmp_path / "bad.yaml", {"drop": ["nope"]})
    failed = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "show_claims.py"), str(ROOT / "params.yaml"), str(bad)],
        capture_output=True,
        text=True,
    )
    assert failed.returncode == 1 and failed.stderr.startswith(f"error: {bad}: drop: 'nope'")
    assert len(failed.stderr.strip().splitlines()) == 1


def test_every_claim_on_our_pretrained_encoder_carries_the_pretraining_gap_precondition():
    """README "Reading the result" and docs/pretraining-recipe.md: every claim about the pretrained encoder is
    ``not resolvable`` when pretraining did not beat the unigram baseline by 1 nat. The few-labels claims had no
    such precondition, so an own-data run at 0.33 nats read "pretraining-helps-most-with-few-labels-topics is
    supported" in the claim table's one-sentence answer beside "pretraining-helps-topics is not resolvable"."""
    setup = with_tasks(
        {
            "cls": {"kind": "classification", "source": "bbc_news", "metric": "macro_f1", "recipe": "cls"},
            "ner": {"kind": "token_classification", "source": "wnut16", "metric": "entity_f1", "recipe": "ner"},
        }
    )
    ours = re.compile(r"(^|[/ ])pretrained(@[^/]+)?/")  # the pretrained variant, curve and ablation arms included
    claims = [c for c in standard_claims(setup)["claims"] if ours.search(f"{c['treatment']} {c['baseline']}")]
    assert len(claims) >= 17  # the 17 of the default tasks (two of them few-labels claims)
    lacking = [
        c["id"]
        for c in claims
        if not any(
            p["value"] == "pretrain/heldout_gap_to_unigram_nats" and p["at_least"] == 1.0
            for p in c.get("preconditions", [])
        )
    ]
    assert lacking == []


def test_the_standard_question_names_the_kinds_of_this_runs_tasks():
    # a classification-only run kept asking about "classification and NER" (reports/claims.yaml held the text)
    default = claim_set(ROOT / "reports" / "claims.yaml", SETUP).question
    assert "help downstream classification and NER, and which" in default  # the text written for the defaults
    only_cls = with_tasks({"topics": {**SETUP.tasks["cls"].model_dump(), "source": "bbc_news"}})
    question = standard_claims(only_cls)["question"]
    assert "help downstream classification, and which" in question and "NER" not in question
