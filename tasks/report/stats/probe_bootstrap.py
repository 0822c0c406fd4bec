"""The nested (two-stage) bootstrap of a sense-probe claim: probe words, then sentences within each drawn word.

A sense claim compares the separation (mean over probe words of within-sense minus across-sense mean cosine,
``tasks.probe.scores``) of two arms: e.g. the last layer on the probe sentences against the same layer on their
shuffled-context controls. Its uncertainty has two sources: which ambiguous words were sampled, and which
sentences were written for each. Replicate ``b``

1. draws ``n_words`` words with replacement (the same draw for both arms);
2. for every drawn word, independently per draw, draws its sentences with replacement within each sense (as
   many per sense as the probe set has: the set was written with a fixed count per sense), the same sentence
   draw for both arms (the control is the same sentences, shuffled), and recomputes the word's separation from
   the drawn sentences' pairwise cosines (``sentence_cosines.json`` of the probe stage): ``within`` over the
   pairs of drawn positions ``p < q`` of one sense, ``across`` over those of different senses. Two draws of one
   sentence are not a pair (their cosine is the sentence with itself, 1.0);
3. averages the words' separations.

A word whose drawn sentences leave no within-sense pair (every sense drew a single sentence over and over) is
left out of that replicate's mean; a replicate with no word left is dropped, and the count is reported. This is
the two-stage bootstrap of Davison & Hinkley (1997, sec. 3.8) with words as clusters and sentences within them,
as Field & Welsh (2007, "Bootstrapping clustered data", JRSS B 69(3)) analyse it: resampling both stages with
replacement counts the within-word variance about twice (once through the words' own spread, once through the
sentence draws), so the interval errs wide, not narrow. Percentile intervals and the ``(1 + #) / (B + 1)`` p-values are
``tasks.report.stats.bootstrap``'s.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tasks.report.stats import bootstrap as bs
from tasks.report.stats.estimates import Estimate, StatsConfig, Tests, difference_verdict
from tasks.report.stats.power import power_of

#: Occurrences of one word whose cosine blocks are gathered at once (bounds memory: chunk x n^2 floats per arm).
CHUNK = 2048
#: The range of a separation and of a difference of two, to which the intervals are clipped.
SEPARATION_RANGE, DIFFERENCE_RANGE = (-2.0, 2.0), (-4.0, 4.0)


@dataclass(frozen=True)
class SenseCosines:
    """One arm of a sense claim: per word (``words``), its sentences' sense labels (``senses``, file order)
    and the upper triangle ``(n * (n - 1) / 2,)`` of their cosine matrix at one variant, condition and layer
    (``triangles``, row-major ``i < j``); ``label`` names the arm (``reference/shuffled/layer 6``)."""

    words: tuple[str, ...]
    senses: tuple[tuple[str, ...], ...]
    triangles: tuple[np.ndarray, ...]
    label: str

    def matrix(self, k: int) -> np.ndarray:
        """Word ``k``'s symmetric cosine matrix ``(n, n)`` (diagonal 1.0: never read, no pair is a self-pair)."""
        n = len(self.senses[k])
        out = np.ones((n, n))
        upper = np.triu_indices(n, 1)
        out[upper] = self.triangles[k]
        out[(upper[1], upper[0])] = self.triangles[k]
        return out


def read_sense_cosines(path: Path, variant: str, condition: str, layer: int) -> SenseCosines:
    """The arm ``variant``/``condition``/``layer`` of the probe stage's ``sentence_cosines.json``.

    Raises ``FileNotFoundError`` for a missing file, ``KeyError`` for a missing variant, condition or word,
    ``IndexError`` for a missing layer and ``ValueError`` for a triangle of the wrong length."""
    tree = json.loads(Path(path).read_text(encoding="utf-8"))
    arm = tree["variants"][variant][condition]
    words = tuple(tree["words"])
    senses = tuple(tuple(tree["words"][w]["senses"]) for w in words)
    triangles = tuple(np.asarray(arm[w][layer], dtype=float) for w in words)
    for word, labels, triangle in zip(words, senses, triangles, strict=True):
        if triangle.shape != (len(labels) * (len(labels) - 1) // 2,):
            raise ValueError(
                f"{path}: {variant}/{condition} word {word!r} layer {layer}: {triangle.size} cosines "
                f"for {len(labels)} sentences"
            )
    return SenseCosines(words, senses, triangles, f"{variant}/{condition}/layer {layer}")


def drawn_separation(matrix: np.ndarray, labels: np.ndarray, draws: np.ndarray) -> np.ndarray:
    """The separation of each row of ``draws`` ``(m, n)`` (sentence indices; ``labels`` ``(n,)`` the sense of
    each drawn position): within minus across mean cosine over the position pairs ``p < q`` that drew two
    different sentences. ``nan`` where no within-sense pair is left."""
    values = matrix[draws[:, :, None], draws[:, None, :]]  # (m, n, n)
    pairs = np.triu(np.ones((draws.shape[1],) * 2, dtype=bool), 1) & (draws[:, :, None] != draws[:, None, :])
    same = labels[:, None] == labels[None, :]
    within_n, across_n = (pairs & same).sum(axis=(1, 2)), (pairs & ~same).sum(axis=(1, 2))
    within = np.where(pairs & same, values, 0.0).sum(axis=(1, 2))
    across = np.where(pairs & ~same, values, 0.0).sum(axis=(1, 2))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(within_n > 0, within / within_n, np.nan) - np.where(across_n > 0, across / across_n, np.nan)


def point_separation(arm: SenseCosines) -> float:
    """Mean over words of the separation on every sentence once (what the probe stage reports)."""
    values = []
    for k, labels in enumerate(arm.senses):
        values.append(drawn_separation(arm.matrix(k), np.asarray(labels), np.arange(len(labels))[None, :])[0])
    return float(np.mean(values))


def _strata_draws(labels: tuple[str, ...], m: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``m`` draws of a word's sentences with replacement within each sense, ``(m, n)``, and the sense label of
    each drawn position ``(n,)`` (senses in order of first appearance)."""
    labels_array = np.asarray(labels)
    columns, column_labels = [], []
    for sense in dict.fromkeys(labels):
        members = np.flatnonzero(labels_array == sense)
        columns.append(members[rng.integers(0, members.size, size=(m, members.size))])
        column_labels += [sense] * members.size
    return np.concatenate(columns, axis=1), np.asarray(column_labels)


def nested_bootstrap(arms: list[SenseCosines], resamples: int, seed: int) -> tuple[np.ndarray, int]:
    """Replicates ``(kept, len(arms))`` of the arms' separations (module docstring) and the number of dropped
    replicates (no word with a within-sense pair). ``numpy.random.default_rng(seed)``: words first, then each
    word's sentence draws in word order. Raises ``ValueError`` when the arms hold other words or sentences."""
    first = arms[0]
    if any(arm.words != first.words or arm.senses != first.senses for arm in arms):
        raise ValueError(f"the arms {[arm.label for arm in arms]} hold different words or sentences")
    if resamples < 1:
        raise ValueError(f"resamples must be >= 1, got {resamples}")
    rng = np.random.default_rng(seed)
    word_draws = rng.integers(0, len(first.words), size=(resamples, len(first.words)))
    values = np.empty((len(arms), *word_draws.shape))
    for k, labels in enumerate(first.senses):
        hits = np.nonzero(word_draws == k)
        draws, column_labels = _strata_draws(labels, hits[0].size, rng)
        for j, arm in enumerate(arms):
            matrix = arm.matrix(k)
            for begin in range(0, hits[0].size, CHUNK):
                rows = slice(begin, begin + CHUNK)
                values[j, hits[0][rows], hits[1][rows]] = drawn_separation(matrix, column_labels, draws[rows])
    defined = ~np.isnan(values[0])
    kept = defined.any(axis=1)
    sums = np.where(defined, values, 0.0).sum(axis=2)  # an undefined word is undefined in every arm (same draws)
    reps = (sums / np.maximum(defined.sum(axis=1), 1)).T
    return reps[kept], int((~kept).sum())


def sense_estimate(claim, treat: SenseCosines, base: SenseCosines, cfg: StatsConfig) -> dict:
    """The ``Row`` fields (``tasks.report.claims.row.Row``) of a sense claim: both arms and their difference
    from one paired nested bootstrap (``nested_bootstrap``, ``cfg.resamples`` replicates), the verdict against
    ``claim.min_effect``, and the MDE over probe words."""
    reps, dropped = nested_bootstrap([treat, base], cfg.resamples, cfg.seed)
    points = [point_separation(arm) for arm in (treat, base)]
    n, sizes = len(treat.words), sorted(len(labels) for labels in treat.senses)
    method = (
        f"nested bootstrap: {n} words, then sentences within each word's senses ({cfg.resamples} "
        f"resamples{f', {dropped} dropped: no within-sense pair' if dropped else ''})"
    )
    t_est, b_est = (
        Estimate(p, *bs.percentile_ci(reps[:, j], cfg.level, SEPARATION_RANGE), n, method) for j, p in enumerate(points)
    )
    deltas = reps[:, 0] - reps[:, 1]
    diff = Estimate(points[0] - points[1], *bs.percentile_ci(deltas, cfg.level, DIFFERENCE_RANGE), n, method)
    tests = Tests(
        lambda m: bs.p_value(deltas, m, "greater"),
        lambda m: bs.p_value(deltas, m, "less"),
        lambda m: bs.tost_p_value(deltas, abs(m)),
    )
    verdict, reason, p = difference_verdict(diff, claim.min_effect, tests, cfg.alpha)
    spread = float(np.std(deltas, ddof=1)) if deltas.size > 1 else math.nan
    return {
        "verdict": verdict,
        "reason": reason,
        "treatment": t_est,
        "baseline": b_est,
        "difference": diff,
        "p_value": p,
        "power": power_of(
            spread, n, "probe words", claim.min_effect, cfg.first_step_alpha, cfg.power, difference=diff.mean
        ),
        "pairing": f"paired by word and sentence: {treat.label} vs {base.label}, the same words and the same "
        f"sentences drawn for both arms; {method}",
        "items": f"{n} words x {sizes[0]}-{sizes[-1]} sentences",
    }
