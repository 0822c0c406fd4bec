"""The nested bootstrap of the sense claims (tasks/report/stats/probe_bootstrap.py) on hand-made cosines, and a
sense claim read from metrics files through the claim table's evaluation."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from tasks.common.provenance import Lock
from tasks.report.claims.evaluation import evaluate
from tasks.report.claims.grammar import Claim, Metrics
from tasks.report.stats import probe_bootstrap as pb
from tasks.report.stats.estimates import StatsConfig

STATS = StatsConfig(level=0.95, paired_method="t", resamples=2000, seed=0)
# word "a": senses x x y y; pairs (0,1) (0,2) (0,3) (1,2) (1,3) (2,3) in the row-major upper triangle
A = ("x", "x", "y", "y"), [0.9, 0.1, 0.2, 0.3, 0.0, 0.7]  # within (0.9 + 0.7) / 2 = 0.8, across 0.6 / 4 = 0.15
B = ("u", "u", "v", "v"), [0.5, 0.1, 0.1, 0.1, 0.1, 0.3]  # within 0.4, across 0.1


def _arm(*words, label="arm") -> pb.SenseCosines:
    return pb.SenseCosines(
        tuple(f"w{i}" for i in range(len(words))),
        tuple(w[0] for w in words),
        tuple(np.asarray(w[1], dtype=float) for w in words),
        label,
    )


def _constant(n_per_sense: int, within: float, across: float) -> tuple[tuple[str, ...], list[float]]:
    """Two senses of ``n_per_sense`` sentences; every same-sense pair has cosine ``within``, others ``across``."""
    labels = ("s",) * n_per_sense + ("t",) * n_per_sense
    n = len(labels)
    return labels, [within if labels[i] == labels[j] else across for i in range(n) for j in range(i + 1, n)]


def test_point_estimate_by_hand():
    assert pb.point_separation(_arm(A, B)) == pytest.approx(((0.8 - 0.15) + (0.4 - 0.1)) / 2)  # 0.475


def test_a_sentence_drawn_twice_is_not_a_pair_with_itself():
    matrix, labels = _arm(A).matrix(0), np.array(["x", "x", "y", "y"])
    # positions 0 and 1 drew sentence 0 twice: no within pair there; within = (2,3) = 0.7; across: sentence 0
    # with 2 and 3, twice each = (0.1 + 0.2 + 0.1 + 0.2) / 4 = 0.15
    assert pb.drawn_separation(matrix, labels, np.array([[0, 0, 2, 3]]))[0] == pytest.approx(0.7 - 0.15)
    assert math.isnan(pb.drawn_separation(matrix, labels, np.array([[1, 1, 3, 3]]))[0])  # no within pair left


def test_no_replicate_ever_counts_a_self_cosine():
    # within 0.3 and across 0.1 everywhere: a defined replicate is 0.2 exactly; a self-pair (cosine 1.0) in
    # within would lift it. Three sentences per sense: duplicates are frequent.
    word = _constant(3, 0.3, 0.1)
    reps, dropped = pb.nested_bootstrap([_arm(word, word, word)], 3000, seed=5)
    assert reps.shape[0] + dropped == 3000 and dropped < 3000
    assert np.abs(reps - 0.2).max() < 1e-12


def test_without_sentence_variance_it_is_the_word_bootstrap():
    # each word's pairs are constant within and across senses, so resampling its sentences changes nothing:
    # the replicates are the plain bootstrap of the per-word separations, on the same word draws
    rng = np.random.default_rng(11)
    seps = rng.normal(0.1, 0.05, size=12)
    words = [_constant(8, 0.5 + s, 0.5) for s in seps]
    reps, dropped = pb.nested_bootstrap([_arm(*words)], 5000, seed=3)
    draws = np.random.default_rng(3).integers(0, 12, size=(5000, 12))  # the words stage draws first
    assert dropped == 0
    assert reps[:, 0] == pytest.approx(seps[draws].mean(axis=1), abs=1e-12)
    assert np.std(reps[:, 0]) == pytest.approx(np.std(seps) / math.sqrt(12), rel=0.05)  # in distribution too


def test_sentences_add_variance_and_the_arms_share_the_draws():
    rng = np.random.default_rng(2)
    words = []
    for _ in range(6):
        labels, triangle = _constant(8, 0.6, 0.4)
        words.append((labels, list(np.asarray(triangle) + rng.normal(0, 0.2, len(triangle)))))
    treat = _arm(*words)
    reps, _ = pb.nested_bootstrap([treat, treat], 4000, seed=1)
    assert np.array_equal(reps[:, 0], reps[:, 1])  # the same words and sentences for both arms: paired
    word_only = np.array([pb.point_separation(_arm(w)) for w in words])
    plain = word_only[np.random.default_rng(1).integers(0, 6, size=(4000, 6))].mean(axis=1)
    assert np.std(reps[:, 0]) > 1.2 * np.std(plain)  # the sentence stage widens the interval


def test_sense_estimate_of_a_planted_difference():
    base = _arm(A, B, A, B, label="base")
    lifted = [
        (labels, [c + (0.2 if labels[i] == labels[j] else 0.0) for c, (i, j) in zip(cos, zip(*np.triu_indices(4, 1)))])
        for labels, cos in (A, B, A, B)
    ]
    fields = pb.sense_estimate(_claim(0.05), _arm(*lifted, label="treat"), base, STATS)
    assert fields["difference"].mean == pytest.approx(0.2)  # every within pair +0.2
    assert fields["verdict"] == "supported" and fields["items"] == "4 words x 4-4 sentences"
    assert fields["pairing"].startswith("paired by word and sentence: treat vs base")


def _claim(min_effect: float, baseline: str = "probe/reference/shuffled/last") -> Claim:
    return Claim(
        id="senses",
        statement="s",
        evidence="behavioural",
        kind="difference",
        task="probe",
        data_slice="senses.jsonl",
        metric="separation",
        treatment="probe/reference/layer/last",
        baseline=baseline,
        ablation="word order",
        min_effect=min_effect,
        known_confounders=[],
    )


def _probe_metrics(tmp_path, with_cosines: bool = True) -> Metrics:
    """metrics/probe.json and data/probe/sentence_cosines.json of 2 words x 2 layers: at the last layer the real
    sentences separate the senses of word a (A) and word b (B), their shuffled controls do not (0.5 flat)."""
    words = {"a": {"lines": [1, 2, 3, 4], "senses": list(A[0])}, "b": {"lines": [5, 6, 7, 8], "senses": list(B[0])}}
    flat = [0.5] * 6
    cosines = {
        "reference": {
            "real": {"a": [flat, A[1]], "b": [flat, B[1]]},
            "shuffled": {"a": [flat, flat], "b": [flat, flat]},
        }
    }
    path = tmp_path / "data" / "probe" / "sentence_cosines.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"words": words, "variants": cosines}), encoding="utf-8")

    def model(a, b):
        return {
            "layers": 2,
            "separation": [0.0, (a + b) / 2],
            "per_word": {"a": {"separation": [0.0, a]}, "b": {"separation": [0.0, b]}},
        }

    probe = {
        "models": {"reference": model(0.65, 0.3)},
        "shuffled_control": {"seed": 0, "models": {"reference": model(0.0, 0.0)}},
    }
    if with_cosines:
        probe["sentence_cosines"] = path.as_posix()
    (tmp_path / "metrics").mkdir()
    (tmp_path / "metrics" / "probe.json").write_text(json.dumps(probe), encoding="utf-8")
    return Metrics(tmp_path / "metrics")


def test_a_sense_claim_against_the_shuffled_control_resamples_words_and_sentences(tmp_path):
    row = evaluate(_claim(0.01), _probe_metrics(tmp_path), Lock({}), STATS)
    assert row.difference.mean == pytest.approx(0.475)
    assert row.baseline.mean == pytest.approx(0.0) and row.treatment.mean == pytest.approx(0.475)
    assert row.items == "2 words x 4-4 sentences" and row.effect_size is None
    assert row.pairing.startswith("paired by word and sentence: reference/real/layer 1 vs reference/shuffled/layer 1")
    assert row.power is not None and row.power.unit == "probe words"
    assert "baseline: reference layer 1 of 0..1, shuffled-context control" in row.notes


def test_without_the_cosines_file_the_claim_falls_back_to_words_and_says_so(tmp_path):
    row = evaluate(_claim(0.01), _probe_metrics(tmp_path, with_cosines=False), Lock({}), STATS)
    assert row.pairing.startswith("paired by word") and row.difference.n == 2
    assert any("names no sentence_cosines" in note for note in row.notes)


def test_a_named_cosines_file_that_is_gone_is_not_run(tmp_path):
    metrics = _probe_metrics(tmp_path)
    (tmp_path / "data" / "probe" / "sentence_cosines.json").unlink()
    row = evaluate(_claim(0.01), metrics, Lock({}), STATS)
    assert row.verdict == "not run" and "no cosines for reference/real/layer 1" in row.reason
