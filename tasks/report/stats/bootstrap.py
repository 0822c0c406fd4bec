"""Paired hierarchical bootstrap over seeds and test items, with the tests the claim table draws from it.

A claim compares two or more arms (e.g. a pretrained encoder vs a random-init one) that were each run with
several seeds, every seed predicting every item (document or sentence) of the same test set. Each fine-tuning
seed draws its own training subset (``tasks/finetune/draw.py``) besides its initialisation and data order, and a
comparator baseline, deterministic given its docs, is fitted once per seed's subset; so resampling seeds
resamples the draw of the training subset too, and seed ``k`` of an arm shares its train docs with seed ``k`` of
every other arm and baseline (``shared_seeds``). An all-data reference baseline has one seed. The uncertainty of
a metric then comes from both the seeds and the test items, so the bootstrap resamples both: seeds with
replacement, then items with replacement, with the same item draw for every arm so that a difference between
arms is paired over items.

The metrics are not item-decomposable (macro-F1, entity F1), so every item carries a vector of nonnegative
sufficient statistics ("counts") and a metric is a function of the counts summed over items. An arm is an
array ``counts`` of shape ``(n_seeds, n_items, K)``; item ``i`` is the same test item in every arm. Layouts:

- classification over ``C`` classes: ``K = 3C``, ``[tp_0..tp_{C-1}, fp_0..fp_{C-1}, fn_0..fn_{C-1}]``
  (:func:`class_counts` builds it);
- NER, entity level, micro: ``K = 3``, ``[tp, n_pred, n_gold]`` per sentence (a per-type ``(..., 3)`` slice
  works the same way).

Sources: the bootstrap and percentile interval, Efron & Tibshirani 1993 (ch. 6, 13); the two-stage
(hierarchical) bootstrap, Davison & Hinkley 1997, sec. 3.8; the ``(1 + #) / (B + 1)`` p-value, Davison &
Hinkley 1997, eq. 4.11; step-down multiplicity adjustment, Holm 1979; two one-sided tests of equivalence,
Schuirmann 1987; the standardized mean difference with pooled SD, Cohen 1988.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Literal

import numpy as np

Metric = Callable[[np.ndarray], np.ndarray]
#: Working-memory cap of one chunk of resamples in :func:`hierarchical_bootstrap`.
_CHUNK_BYTES = 200 * 2**20


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """``num / den`` elementwise, 0 where ``den == 0``."""
    num, den = np.broadcast_arrays(np.asarray(num, dtype=float), np.asarray(den, dtype=float))
    return np.divide(num, den, out=np.zeros(num.shape), where=den != 0)


def _n_classes(counts: np.ndarray) -> int:
    k = counts.shape[-1]
    if k == 0 or k % 3:
        raise ValueError(f"classification counts need K = 3 * n_classes > 0, got K = {k}")
    return k // 3


def class_counts(gold: np.ndarray, pred: np.ndarray, n_classes: int) -> np.ndarray:
    """Per-item classification counts, shape ``(n, 3 * n_classes)``, from int labels ``gold``, ``pred`` ``(n,)``.

    Item ``i`` adds ``tp[gold_i] = 1`` if ``pred_i == gold_i``, else ``fn[gold_i] = 1`` and ``fp[pred_i] = 1``.
    Raises ValueError on shape mismatch or a label outside ``[0, n_classes)``.
    """
    gold, pred = np.asarray(gold), np.asarray(pred)
    if gold.ndim != 1 or gold.shape != pred.shape:
        raise ValueError(f"gold and pred must be 1-D of equal length, got {gold.shape} and {pred.shape}")
    for name, labels in (("gold", gold), ("pred", pred)):
        if labels.size and (labels.min() < 0 or labels.max() >= n_classes):
            raise ValueError(f"{name} labels must lie in [0, {n_classes}), got [{labels.min()}, {labels.max()}]")
    out = np.zeros((gold.size, 3 * n_classes))
    rows = np.arange(gold.size)
    wrong = gold != pred
    out[rows, gold] = ~wrong
    out[rows[wrong], n_classes + pred[wrong]] = 1.0
    out[rows[wrong], 2 * n_classes + gold[wrong]] = 1.0
    return out


def accuracy_from_counts(counts: np.ndarray) -> np.ndarray:
    """Accuracy ``sum(tp) / (sum(tp) + sum(fn))`` of classification counts ``(..., 3C)`` -> ``(...)``; 0 if empty."""
    c = _n_classes(counts)
    tp = counts[..., :c].sum(axis=-1)
    return _ratio(tp, tp + counts[..., 2 * c :].sum(axis=-1))


def class_f1_from_counts(counts: np.ndarray, c: int) -> np.ndarray:
    """F1 ``2tp / (2tp + fp + fn)`` of class ``c`` from counts ``(..., 3C)`` -> ``(...)``; 0 on a zero denominator."""
    n = _n_classes(counts)
    if not 0 <= c < n:
        raise ValueError(f"class {c} outside [0, {n})")
    tp, fp, fn = counts[..., c], counts[..., n + c], counts[..., 2 * n + c]
    return _ratio(2 * tp, 2 * tp + fp + fn)


def macro_f1_from_counts(counts: np.ndarray) -> np.ndarray:
    """Unweighted mean over all classes of the class F1 (0 on a zero denominator), ``(..., 3C)`` -> ``(...)``.

    Equals sklearn's ``f1_score(average="macro", labels=range(C), zero_division=0)``.
    """
    c = _n_classes(counts)
    tp, fp, fn = counts[..., :c], counts[..., c : 2 * c], counts[..., 2 * c :]
    return _ratio(2 * tp, 2 * tp + fp + fn).mean(axis=-1)


def _ner(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    if counts.shape[-1] != 3:
        raise ValueError(f"NER counts need K = 3 ([tp, n_pred, n_gold]), got K = {counts.shape[-1]}")
    return counts[..., 0], counts[..., 1], counts[..., 2]


def micro_f1_from_counts(counts: np.ndarray) -> np.ndarray:
    """Entity micro F1 ``2tp / (n_pred + n_gold)`` from ``[tp, n_pred, n_gold]`` ``(..., 3)`` -> ``(...)``; 0 if 0/0."""
    tp, n_pred, n_gold = _ner(counts)
    return _ratio(2 * tp, n_pred + n_gold)


def precision_from_counts(counts: np.ndarray) -> np.ndarray:
    """Entity precision ``tp / n_pred`` from ``[tp, n_pred, n_gold]`` ``(..., 3)`` -> ``(...)``; 0 if no prediction."""
    tp, n_pred, _ = _ner(counts)
    return _ratio(tp, n_pred)


def recall_from_counts(counts: np.ndarray) -> np.ndarray:
    """Entity recall ``tp / n_gold`` from ``[tp, n_pred, n_gold]`` ``(..., 3)`` -> ``(...)``; 0 if ``n_gold == 0``."""
    tp, _, n_gold = _ner(counts)
    return _ratio(tp, n_gold)


def _check_arms(arms: Sequence[np.ndarray], shared_seeds: bool, fine: Sequence[int] | None = None) -> list[np.ndarray]:
    """The arms as float arrays ``(n_seeds, n_items, K)``; ValueError naming the first inconsistency. ``fine``:
    per arm, its fine-tuning seeds per pretraining seed (``shared_seeds`` needs them equal; default: all rows)."""
    if not arms:
        raise ValueError("no arms given")
    out = [np.asarray(a, dtype=float) for a in arms]
    n_fine = [a.shape[0] if a.ndim else 0 for a in out] if fine is None else list(fine)
    for j, a in enumerate(out):
        if a.ndim != 3 or a.shape[0] == 0:
            raise ValueError(f"arm {j}: counts must have shape (n_seeds >= 1, n_items, K), got {a.shape}")
        if a.shape[1] == 0:
            raise ValueError(f"arm {j}: 0 test items")
        if not np.all(np.isfinite(a)) or np.any(a < 0):
            raise ValueError(f"arm {j}: counts must be finite and nonnegative")
        if a.shape[1] != out[0].shape[1]:
            raise ValueError(f"n_items differ: arm 0 has {out[0].shape[1]}, arm {j} has {a.shape[1]}")
        if a.shape[2] != out[0].shape[2]:
            raise ValueError(f"K (counts per item) differ: arm 0 has {out[0].shape[2]}, arm {j} has {a.shape[2]}")
        if shared_seeds and n_fine[j] != n_fine[0]:
            raise ValueError(
                f"shared_seeds needs equal seed counts: arm 0 has {n_fine[0]} seeds, arm {j} has {n_fine[j]}"
            )
    return out


def pretrain_layout(n_runs: int, labels: Sequence[str] | None) -> tuple[tuple[str, ...], int]:
    """``(pretraining seeds, fine-tuning seeds under each)`` of an arm of ``n_runs`` runs whose pretraining seed
    per run is ``labels`` (None: one pretraining seed). The runs must be pretraining-seed-major, every pretraining
    seed with the same number of fine-tuning runs; ValueError otherwise."""
    if labels is None:
        return ("",), n_runs
    seeds = tuple(dict.fromkeys(labels))
    fine = n_runs // len(seeds)
    if (
        len(labels) != n_runs
        or len(seeds) * fine != n_runs
        or any(label != seeds[i // fine] for i, label in enumerate(labels))
    ):
        raise ValueError(f"pretraining seeds per run must be grouped, each with the same runs: {list(labels)}")
    return seeds, fine


def run_draws(
    n_runs: Sequence[int],
    pretrain: Sequence[Sequence[str] | None],
    resamples: int,
    rng: np.random.Generator,
    shared: bool,
) -> list[np.ndarray]:
    """Per arm, the drawn run indices ``(resamples, n_draws)`` of the Multi-Bootstrap (Sellam et al. 2022): its
    pretraining seeds with replacement (one draw for every arm with the same pretraining seeds) and its fine-tuning
    seeds with replacement (``seed_draws``: jointly when ``shared``), the same fine-tuning seeds under every drawn
    pretraining seed: the design is crossed, fine-tuning seed ``f`` trains on the same draw under every pretraining
    seed (``tasks/finetune/draw.py``), so rows and columns are drawn independently (the pigeonhole bootstrap of
    a crossed design, Owen 2007, "The pigeonhole bootstrap", Ann. Appl. Stat. 1(2); conservative by the
    interaction). Drawing the fine-tuning seeds afresh within each pretraining seed would treat them as nested
    and drop the shared seed effect. An arm with one pretraining seed (random init, a baseline) draws its
    fine-tuning seeds alone; with one pretraining seed everywhere this is ``seed_draws`` itself, the same stream."""
    layouts = [pretrain_layout(n, labels) for n, labels in zip(n_runs, pretrain)]
    widest = max(len(seeds) for seeds, _ in layouts)
    if widest == 1:
        return seed_draws(n_runs, resamples, rng, shared)
    fine = [
        np.broadcast_to(f[:, None, :], (resamples, widest, f.shape[1]))
        for f in seed_draws([f for _, f in layouts], resamples, rng, shared)
    ]
    top = {
        seeds: rng.integers(0, len(seeds), size=(resamples, len(seeds)))
        for seeds in dict.fromkeys(seeds for seeds, _ in layouts if len(seeds) > 1)
    }
    out = []
    for (seeds, n_fine), draw in zip(layouts, fine):
        drawn = top.get(seeds, np.zeros((resamples, 1), dtype=np.intp))
        out.append((drawn[:, :, None] * n_fine + draw[:, : len(seeds), :]).reshape(resamples, -1))
    return out


def seed_draws(n_seeds: Sequence[int], resamples: int, rng: np.random.Generator, shared: bool) -> list[np.ndarray]:
    """Per arm, the drawn seed indices ``(resamples, n_seeds[j])`` (with replacement): one draw for every arm
    when ``shared`` (equal seed counts), else one per arm; a one-seed arm always uses its seed."""
    common = rng.integers(0, n_seeds[0], size=(resamples, n_seeds[0])) if shared and n_seeds[0] > 1 else None
    draws = []
    for s in n_seeds:
        if s == 1:
            draws.append(np.zeros((resamples, 1), dtype=np.intp))
        else:
            draws.append(common if common is not None else rng.integers(0, s, size=(resamples, s)))
    return draws


def hierarchical_bootstrap(
    arms: Sequence[np.ndarray],
    metric: Metric,
    resamples: int,
    seed: int,
    shared_seeds: bool,
    pretrain: Sequence[Sequence[str] | None] | None = None,
    clusters: np.ndarray | None = None,
) -> np.ndarray:
    """Paired two-stage bootstrap replicates of ``metric``, shape ``(resamples, len(arms))``; three-stage with
    ``pretrain``.

    ``arms``: counts arrays ``(n_seeds, n_items, K)`` with equal ``n_items`` and ``K``. ``metric`` maps summed
    counts ``(..., K)`` to values ``(...)``. Replicate ``b`` draws item weights once, multinomial
    (``n_items`` draws with replacement, the same weights for every arm, so arm differences are paired over
    items), and for every arm draws that arm's seeds with replacement: the same seed indices for all arms
    when ``shared_seeds`` (seed ``s`` of each arm shares its training subset and data order), else independently
    per arm. An arm's value is the mean over its drawn seeds of ``metric(weights @ counts[seed])``; a one-seed
    arm uses its seed. This is the two-stage bootstrap (Davison & Hinkley 1997, sec. 3.8) with seeds as the
    first stage and items, crossed with seeds, as the second. ``numpy.random.default_rng(seed)`` makes it
    deterministic; the replicates do not depend on how the resamples are chunked to bound memory.

    ``pretrain`` (per arm, the pretraining seed of each of its runs, pretraining-seed-major, or None for an arm with
    one) adds the top stage of the Multi-Bootstrap (Sellam et al. 2022, ICLR, "The MultiBERTs"): pretraining seeds drawn
    with replacement, jointly for arms with the same pretraining seeds, then fine-tuning seeds, the same ones under
    every drawn pretraining seed (crossed: ``run_draws``); an arm's value is the mean over its drawn runs.
    ``shared_seeds`` then compares the fine-tuning seeds per pretraining seed.

    ``clusters`` (``(n_items,)`` labels, e.g. a same-story group or a dedup cluster) draws clusters instead of items
    (Davison & Hinkley 1997, sec. 3.8): each item weighs its cluster's draw count, the same for every arm.

    Raises ValueError when ``resamples < 1``, the arms differ in ``n_items`` or ``K``, an arm has 0 items or
    0 seeds or negative counts, ``shared_seeds`` is set with unequal seed counts, or ``metric`` returns a
    wrong shape.
    """
    if resamples < 1:
        raise ValueError(f"resamples must be >= 1, got {resamples}")
    pretrain = list(pretrain) if pretrain is not None else [None] * len(arms)
    fine = [pretrain_layout(np.shape(a)[0], labels)[1] for a, labels in zip(arms, pretrain, strict=True)]
    arms = _check_arms(arms, shared_seeds, fine)
    n_items, k = arms[0].shape[1:]
    rng = np.random.default_rng(seed)
    labels = np.arange(n_items) if clusters is None else np.unique(clusters, return_inverse=True)[1]
    units = int(labels.max()) + 1
    # Seed draws first, item weights after, chunk by chunk: the stream, hence the result, is chunk-independent.
    seed_idx = run_draws([a.shape[0] for a in arms], pretrain, resamples, rng, shared_seeds)
    # items-major (n_items, n_seeds * K) so one BLAS matmul sums the weighted counts of every seed at once
    flat = [a.transpose(1, 0, 2).reshape(n_items, -1) for a in arms]
    row_bytes = 8 * (2 * n_items + max(a.shape[0] for a in arms) * (k + 1))
    chunk = max(1, _CHUNK_BYTES // row_bytes)
    out = np.empty((resamples, len(arms)))
    for start in range(0, resamples, chunk):
        stop = min(start + chunk, resamples)
        weights = rng.multinomial(units, np.full(units, 1.0 / units), size=stop - start).astype(float)[:, labels]
        for j, (a, f) in enumerate(zip(arms, flat)):
            values = np.asarray(metric((weights @ f).reshape(stop - start, a.shape[0], k)))
            if values.shape != (stop - start, a.shape[0]):
                raise ValueError(f"metric must map (..., K) to (...), got shape {values.shape} for {a.shape[0]} seeds")
            out[start:stop, j] = np.take_along_axis(values, seed_idx[j][start:stop], axis=1).mean(axis=1)
    return out


def point_estimate(counts: np.ndarray, metric: Metric) -> float:
    """Mean over seeds of ``metric`` on the full, unweighted test set; ``counts`` ``(n_seeds, n_items, K)``."""
    counts = np.asarray(counts, dtype=float)
    if counts.ndim != 3 or counts.shape[0] == 0:
        raise ValueError(f"counts must have shape (n_seeds >= 1, n_items, K), got {counts.shape}")
    return float(np.mean(metric(counts.sum(axis=1))))


def _replicates(replicates: np.ndarray) -> np.ndarray:
    r = np.asarray(replicates, dtype=float)
    if r.ndim != 1 or r.size == 0 or not np.all(np.isfinite(r)):
        raise ValueError(f"replicates must be a non-empty finite 1-D array, got shape {r.shape}")
    return r


def percentile_ci(
    replicates: np.ndarray, level: float, bounds: tuple[float, float] | None = None
) -> tuple[float, float]:
    """Two-sided percentile interval (Efron & Tibshirani 1993, sec. 13.3) of ``replicates`` ``(B,)``.

    The ``(1 - level) / 2`` and ``(1 + level) / 2`` quantiles (linear interpolation), clipped to ``bounds``
    (e.g. ``(0, 1)`` for an F1, ``(-1, 1)`` for a difference of two). Raises ValueError unless
    ``0 < level < 1`` and ``replicates`` is non-empty, finite and 1-D.
    """
    if not 0 < level < 1:
        raise ValueError(f"level must lie in (0, 1), got {level}")
    low, high = np.quantile(_replicates(replicates), [(1 - level) / 2, (1 + level) / 2])
    if bounds is not None:
        low, high = np.clip([low, high], *bounds)
    return float(low), float(high)


def p_value(
    replicates_diff: np.ndarray, null: float = 0.0, alternative: Literal["greater", "less"] = "greater"
) -> float:
    """One-sided bootstrap p-value from the replicates ``(B,)`` of a difference (not recentred).

    ``greater``: H0 ``diff <= null``, ``p = (1 + #{d <= null}) / (B + 1)``; ``less``: H0 ``diff >= null``,
    ``p = (1 + #{d >= null}) / (B + 1)``. The ``+1`` keeps ``p >= 1 / (B + 1)`` (Davison & Hinkley 1997,
    eq. 4.11); the count is the percentile interval inverted, so ``p <= alpha`` when the one-sided
    ``1 - alpha`` percentile bound excludes ``null``. Raises ValueError on another ``alternative``.
    """
    d = _replicates(replicates_diff)
    if alternative == "greater":
        hits = np.count_nonzero(d <= null)
    elif alternative == "less":
        hits = np.count_nonzero(d >= null)
    else:
        raise ValueError(f"alternative must be 'greater' or 'less', got {alternative!r}")
    return (1 + hits) / (d.size + 1)


def holm(p_values: Mapping[str, float], m: int | None = None) -> dict[str, float]:
    """Holm-Bonferroni step-down adjusted p-values (Holm 1979), same keys as ``p_values``.

    With the p-values sorted ascending, ``adj_(i) = max_{j <= i} min(1, (m - j + 1) p_(j))``; rejecting
    where ``adj <= alpha`` controls the family-wise error rate at ``alpha`` and equals the step-down rule
    (reject ``p_(j) <= alpha / (m - j + 1)`` until the first failure). ``m`` is the family's declared size (default
    the number of p-values given): a declared hypothesis without a p-value (not tested) counts as one never
    rejected, so ``m`` does not shrink with the data. Ties keep the mapping's order (it does not change the
    values). Raises ValueError on a p-value outside ``[0, 1]`` or ``m`` below the number of p-values.
    """
    keys = list(p_values)
    p = np.array([p_values[key] for key in keys], dtype=float)
    if not np.all((p >= 0) & (p <= 1)):
        raise ValueError(f"p-values must lie in [0, 1], got {dict(p_values)}")
    order = np.argsort(p, kind="stable")
    m = p.size if m is None else m
    if m < p.size:
        raise ValueError(f"family size m = {m} is below the {p.size} p-values given")
    adjusted = np.maximum.accumulate(np.minimum(1.0, (m - np.arange(p.size)) * p[order]))
    return {keys[i]: float(a) for i, a in zip(order, adjusted)}


def tost_p_value(replicates_diff: np.ndarray, margin: float) -> float:
    """Two one-sided tests (Schuirmann 1987) of equivalence ``-margin < diff < margin`` from replicates ``(B,)``.

    ``max(p_value(d, -margin, "greater"), p_value(d, margin, "less"))``: equivalent at ``alpha`` iff the
    result is ``<= alpha``, i.e. (up to the ``+1`` correction) iff the ``1 - 2 alpha`` percentile interval
    lies inside ``(-margin, margin)``. Raises ValueError unless ``margin > 0``.
    """
    if not margin > 0:
        raise ValueError(f"equivalence margin must be > 0, got {margin}")
    return max(p_value(replicates_diff, -margin, "greater"), p_value(replicates_diff, margin, "less"))


def cohens_d(treatment: Sequence[float], baseline: Sequence[float]) -> float | None:
    """Cohen's d (Cohen 1988): ``(mean(treatment) - mean(baseline)) / pooled SD`` of the per-seed values.

    Pooled variance ``((n1 - 1) s1^2 + (n2 - 1) s2^2) / (n1 + n2 - 2)`` with ``ddof=1`` sample variances. A
    single-valued (deterministic) arm adds nothing to the numerator, so only the other arm's spread enters,
    over ``n - 1`` degrees of freedom. None when the pooled SD is 0 or undefined (``n1 + n2 < 3``, e.g. one
    value per arm). Raises ValueError when an arm is empty.
    """
    t, b = np.asarray(treatment, dtype=float), np.asarray(baseline, dtype=float)
    if t.size == 0 or b.size == 0:
        raise ValueError(f"both arms need values, got {t.size} treatment and {b.size} baseline")
    dof = t.size + b.size - 2
    # constant arms are tested exactly: their float mean can miss the value, leaving a ~1e-33 "variance"
    if dof < 1 or (np.ptp(t) == 0 and np.ptp(b) == 0):
        return None
    pooled_var = (np.sum((t - t.mean()) ** 2) + np.sum((b - b.mean()) ** 2)) / dof
    return float((t.mean() - b.mean()) / np.sqrt(pooled_var))
