"""How well the leakage audit works: the planted-copy builder variant by variant (expected texts derived by
hand), the eval-doc sample, and the two audit claims of reports/claims.yaml evaluated by the real report code
on one fixture, with the default audit (supported) and a deliberately broken one (contradicted)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from test_leakage import frame, params, run_leakage

from tasks.common.provenance import Lock
from tasks.common.textnorm import words
from tasks.config.leakage import PlantedParams
from tasks.leakage import planted
from tasks.report.claims import Metrics, load_claims
from tasks.report.evaluation import evaluate
from tasks.report.statistics import StatsConfig

STATS = StatsConfig(level=0.95, paired_method="t", resamples=9999, seed=0)
CLAIMS = {c.id: c for c in load_claims("reports/claims.yaml").claims}


def planted_params(**changes) -> PlantedParams:
    return params().planted.model_copy(update=changes)


# ---------------------------------------------------------------- the variants, by hand


def test_verbatim_and_rewrapped():
    tokens = "a b c d e f g".split()
    assert planted.verbatim(tokens, iter(()), planted_params()) == "a b c d e f g"
    assert planted.rewrapped(tokens, iter(()), planted_params(line_words=3)) == "a b c\nd e f\ng"


def test_in_filler_puts_the_middle_of_the_doc_between_two_filler_paragraphs():
    tokens = [f"w{k}" for k in range(10)]
    filler = planted.filler_stream(["f1 f2 f3", "f4 f5"])
    text = planted.in_filler(tokens, filler, planted_params(paragraph_words=4, filler_words=2))
    assert text == "f1 f2\n\nw3 w4 w5 w6\n\nf3 f4"  # start = (10 - 4) // 2 = 3
    assert next(filler) == "f5"  # the stream goes on where this doc stopped


def test_replaced_swaps_every_nth_token_for_a_different_filler_word():
    tokens = "w1 w2 w3 w4 w5 w6 w7".split()
    filler = planted.filler_stream(["W3 -- x1 x2"])  # "W3" is the same word as "w3", "--" holds no word
    assert planted.replaced(tokens, filler, planted_params(replace_every=3)) == "w1 w2 x1 w4 w5 x2 w7"


def test_unicode_uses_look_alike_spaces_and_format_characters_inside_words():
    tokens = ["ab", "cd", "ef", "gh", "ij", "kl"]
    text = planted.unicode(tokens, iter(()), planted_params(format_every=2))
    # gaps: NBSP, thin space, narrow NBSP, space, NBSP; tokens 2, 4, 6 get ZWSP, ZWJ, soft hyphen at len // 2
    assert text == "ab\u00a0c\u200bd\u2009ef\u202fg\u200dh ij\u00a0k\u00adl"
    # textnorm folds the spaces and drops ZWSP, ZWJ and the soft hyphen: the words come back whole
    assert words(text) == ["ab", "cd", "ef", "gh", "ij", "kl"]


def test_sample_is_a_hash_rank_with_distinct_docs_per_variant_and_counts_what_it_excludes():
    ids = [f"d{k}" for k in range(30)]
    tokens = [["w"] * (10 if k < 4 else 30) for k in range(30)]  # d0..d3 are too short
    cfg = planted_params(docs_per_variant=3, min_words=26)
    picks, excluded = planted.sample(ids, tokens, True, cfg)
    assert excluded == {"under_min_words": 4}
    chosen = [k for rows in picks.values() for k in rows]
    assert list(picks) == list(planted.VARIANTS) and all(len(rows) == 3 for rows in picks.values())
    assert len(set(chosen)) == 15 and min(chosen) >= 4
    assert planted.sample(ids[::-1], tokens[::-1], True, cfg)[0]["verbatim"] == [29 - k for k in picks["verbatim"]]
    assert planted.sample(ids, tokens, False, cfg) == ({v: [] for v in planted.VARIANTS},
                                                       {"no_unmatched_pretraining_text": 26, "under_min_words": 4})


# ---------------------------------------------------------------- the claims on one fixture


def random_text(rng, vocab: str, n_words: int) -> str:
    return " ".join(f"{vocab}{k}" for k in rng.integers(0, 5000, size=n_words))


def leaked_copy(text: str) -> str:
    """A pretraining copy with every 20th word changed: no 13-gram of it is broken for 19 words in 20."""
    tokens = text.split()
    return " ".join(f"changed{k}" if (k + 1) % 20 == 0 else t for k, t in enumerate(tokens))


@pytest.fixture(scope="module")
def corpus():
    """405 eval docs (400 of 60-90 words, 5 of 8 words), unrelated task-train and pretraining text, and 12
    pretraining docs that are eval docs with every 20th word changed."""
    rng = np.random.default_rng(0)
    evals = [random_text(rng, "e", int(rng.integers(60, 91))) for _ in range(400)]
    evals += [random_text(rng, "e", 8) for _ in range(5)]
    task = frame("task", "task", [(f"ev{k}", ("dev", "test")[k % 2], t) for k, t in enumerate(evals)]
                 + [(f"tr{k}", "train", random_text(rng, "t", 80)) for k in range(10)])
    pre = frame("pre", "pretrain", [(f"p{k}", "train", random_text(rng, "zq", 200)) for k in range(60)]
                + [(f"leak{k}", "train", leaked_copy(evals[k])) for k in range(12)])
    return [task, pre]


def audit_rows(tmp_path, corpus, **changes):
    """Run the stage with ``changes`` to its params; evaluate both audit claims on its metrics file."""
    metrics, _ = run_leakage(tmp_path, corpus, params(**changes))
    folder = tmp_path / "metrics"
    folder.mkdir()
    (folder / "leakage.json").write_text(json.dumps(metrics), encoding="utf-8")
    rows = {name: evaluate(CLAIMS[name], Metrics(folder), Lock({}), STATS)
            for name in ("leakage-audit-finds-planted-copies", "no-eval-leakage-after-audit")}
    return metrics, rows


def test_default_audit_finds_the_planted_copies_and_leaves_no_residual(tmp_path, corpus):
    metrics, rows = audit_rows(tmp_path, corpus, planted=planted_params(docs_per_variant=16).model_dump())
    found = metrics["planted"]
    assert (found["planted"], found["found"], found["missed"]) == (80, 80, 0)
    assert found["eval_docs_eligible"] == 400 and found["eval_docs_excluded"] == {"under_min_words": 5}
    assert all(v["planted"] == v["found"] == 16 for v in found["variants"].values())
    assert metrics["sources"]["pre"]["removed"] == 12  # every changed copy
    assert metrics["residual"]["contaminated_docs_before"] == 12 and metrics["residual"]["contaminated_docs"] == 0
    assert rows["leakage-audit-finds-planted-copies"].verdict == "supported"  # 0 of 80: upper bound 0.045
    assert rows["leakage-audit-finds-planted-copies"].treatment.high == pytest.approx(1 - 0.025 ** (1 / 80))
    assert rows["no-eval-leakage-after-audit"].verdict == "supported"  # 0 of 405: upper bound 0.0091


def test_broken_audit_makes_both_claims_fail(tmp_path, corpus):
    """Both MinHash thresholds at 0.99 (with num_perm 512: at 128 or 256 permutations datasketch's band rule
    leaves fewer than 2 bands, an error that names the keys), and ngram_words 55 so the n-gram detector cannot
    rescue the audit: a 55-gram survives neither the 50-word paragraph nor a changed word every 20.
    planted.min_words must be >= ngram_words, so it is 55 too (the eval docs have 60-90 words). Only verbatim,
    rewrapped and unicode copies (identical once normalized) and an in_filler paragraph whose passage window
    aligns by chance are found.
    """
    broken = {"doc_threshold": 0.99, "passage_threshold": 0.99, "num_perm": 512, "ngram_words": 55,
              "planted": planted_params(docs_per_variant=16, min_words=55).model_dump()}
    with pytest.raises(ValueError, match=r"leakage\.num_perm=128: datasketch finds no LSH shape"):
        audit_rows(tmp_path / "too-few-perms", corpus, **(broken | {"num_perm": 128}))
    metrics, rows = audit_rows(tmp_path, corpus, **broken)
    variants = metrics["planted"]["variants"]
    assert variants["verbatim"]["found"] == variants["rewrapped"]["found"] == variants["unicode"]["found"] == 16
    assert variants["replaced"]["found"] == 0
    assert metrics["planted"]["missed"] >= 16
    assert metrics["planted"]["missed"] == sum(v["missed"] for v in variants.values())
    planted_row = rows["leakage-audit-finds-planted-copies"]
    assert planted_row.verdict == "contradicted" and planted_row.treatment.low > 0.05
    # the 12 changed copies stay in the corpus, and the independent detector sees them: 12 of 405, CI low 0.015
    assert metrics["sources"]["pre"]["removed"] == 0 and metrics["residual"]["contaminated_docs"] == 12
    assert rows["no-eval-leakage-after-audit"].verdict == "contradicted"


def test_format_characters_in_every_word_hide_no_copy(tmp_path, corpus):
    """With a format character in every 3rd word (format_every=1: ZWSP, ZWJ, soft hyphen in turn) a split word
    would leave no 13-gram and almost no 5-gram shingle; textnorm drops all three, so every copy is found.
    (Before textnorm dropped U+00AD, this setting hid all 16 unicode copies.)"""
    metrics, _ = audit_rows(tmp_path, corpus, planted=planted_params(docs_per_variant=16, format_every=1).model_dump())
    assert metrics["planted"]["variants"]["unicode"]["found"] == 16


def test_planting_does_not_change_the_stage_outputs(tmp_path, corpus):
    _, first = run_leakage(tmp_path / "a", corpus)
    other = params(planted=planted_params(seed=1, docs_per_variant=3).model_dump())
    _, second = run_leakage(tmp_path / "b", corpus, other)
    for name in ("table.parquet", "removed.jsonl", "pre.parquet", "task.parquet"):
        assert (first / name).read_bytes() == (second / name).read_bytes()


def test_bad_planted_and_residual_params_name_the_key():
    with pytest.raises(ValueError, match="planted.docs_per_variant"):
        params(planted=planted_params().model_dump() | {"docs_per_variant": 0})
    with pytest.raises(ValueError, match=r"leakage\.planted\.min_words must be >= leakage\.ngram_words"):
        params(planted=planted_params(min_words=5).model_dump())
    with pytest.raises(ValueError, match=r"leakage\.residual\.ngram_words must be < leakage\.ngram_words"):
        params(residual={"ngram_words": 13, "min_coverage": 0.1})
