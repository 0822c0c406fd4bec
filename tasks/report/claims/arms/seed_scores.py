"""The comparisons reviewers ask for on a fine-tuning claim's per-run scores: the probability of improvement with
its interval (``tasks.report.stats.improvement``, Agarwal et al. 2021) and Almost Stochastic Order's ``eps_min``
(``tasks.report.stats.aso``, Dror et al. 2019; Ulmer et al. 2022).

A ``difference`` claim whose two sides are fine-tuning arms gets them. A side's scores are one value per run (a
fine-tuning seed; with several pretraining seeds, every pretraining seed x fine-tuning seed run): the claim's
metric of the run's summed per-item counts on the claim's items (``tasks.report.claims.arms.items``), or the
run's metric from ``metrics/finetune/<task>.json`` when the arm has no test items (a claim on a slice of the
items, ``clean`` say, then gets none: those values score every test item). A gap claim's side ``A - B``
scores ``A``'s run minus ``B``'s run of the same seeds (a random-init ``B``, of one pretraining seed, against
each pretraining seed's run of ``A`` with that fine-tuning seed). Both statistics ignore which runs share a seed: they
compare the two distributions of scores (rliable's stratified bootstrap draws each arm's runs on its own). A
calibration claim (lower is better, from prediction files of another shape) and a side without per-run scores get
none; a claim that could have them but whose runs do not line up gets a note saying why.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tasks.report.claims.arms.calibration_arms import CALIBRATION_METRICS
from tasks.report.claims.arms.items import Items, metric_function
from tasks.report.claims.grammar import Claim, Sample
from tasks.report.stats.aso import epsilon_min
from tasks.report.stats.estimates import StatsConfig
from tasks.report.stats.improvement import improvement_ci

#: How the claim table reads the two numbers (the row's details and the README).
READING = (
    "P(treatment > baseline) for a run drawn from each arm (ties 1/2; 0.5: neither tends to score higher), "
    "with a stratified bootstrap CI over runs; ASO eps_min < 0.5: the treatment is almost stochastically dominant "
    "(Ulmer et al. 2022 read eps_min <= 0.2 as dominance; near 1: no dominance)"
)


@dataclass(frozen=True)
class SeedComparison:
    """The probability of improvement ``probability`` with its ``level`` interval ``[low, high]`` and ASO's
    ``epsilon_min`` of the treatment's per-run scores over the baseline's; ``runs`` the run labels of each side
    (``treatment``, ``baseline``: ``<seed>`` or ``<pretraining seed>/<seed>``), ``resamples`` and ``seed`` the
    bootstrap settings of both statistics (``report.bootstrap_resamples``, ``report.bootstrap_seed``)."""

    probability: float
    low: float
    high: float
    epsilon_min: float
    runs: dict[str, tuple[str, ...]]
    resamples: int
    seed: int

    def metrics(self) -> dict:
        """The claim's entries in ``metrics/report.json``."""
        return {
            "probability_of_improvement": self.probability,
            "probability_of_improvement_ci_low": self.low,
            "probability_of_improvement_ci_high": self.high,
            "aso_epsilon_min": self.epsilon_min,
            "comparison_runs": {side: list(labels) for side, labels in self.runs.items()},
            "comparison_bootstrap": {"resamples": self.resamples, "seed": self.seed},
        }

    def describe(self) -> str:
        """One line for the row's details."""
        treat, base = (len(self.runs[side]) for side in ("treatment", "baseline"))
        return (
            f"probability of improvement {self.probability:.3f} [{self.low:.3f}, {self.high:.3f}]; "
            f"ASO eps_min {self.epsilon_min:.3f} ({treat} treatment runs vs {base} baseline runs)"
        )


def compare_runs(claim: Claim, samples: list[Sample], cfg: StatsConfig) -> tuple[SeedComparison | None, list[str]]:
    """``(comparison, notes)`` of a claim from its resolved sides ``samples`` (``[treatment, baseline]``, or a gap
    claim's ``[T1, T2, B1, B2]``): ``(None, [])`` for a claim that gets none (module docstring), ``(None, [why])``
    when its runs do not line up or a run has no finite score."""
    if claim.kind != "difference" or claim.metric in CALIBRATION_METRICS:
        return None, []
    if not all(ref.startswith("finetune/") for ref in (claim.treatment, claim.baseline)):
        return None, []
    if claim.items != "all" and any(not isinstance(sample.items, Items) for sample in samples):
        return None, [f"no probability of improvement or ASO: the {claim.items} items need the prediction files"]
    half = len(samples) // 2
    sides = [side_scores(samples[:half], claim.metric), side_scores(samples[half:], claim.metric)]
    if any(side is None for side in sides):
        return None, ["no probability of improvement or ASO: a gap side's runs have different seeds"]
    (treat, treat_runs), (base, base_runs) = sides  # type: ignore[misc]
    try:
        probability, low, high = improvement_ci(treat, base, cfg.level, cfg.resamples, cfg.seed)
        epsilon = epsilon_min(treat, base, cfg.level, cfg.resamples, cfg.seed)
    except ValueError as err:  # a run without a finite score: the claim's own statistics say more
        return None, [f"no probability of improvement or ASO: {err}"]
    runs = {"treatment": treat_runs, "baseline": base_runs}
    return SeedComparison(probability, low, high, epsilon, runs, cfg.resamples, cfg.seed), []


def side_scores(samples: list[Sample], metric: str) -> tuple[np.ndarray, tuple[str, ...]] | None:
    """One side's per-run scores of ``metric`` and run labels: an arm's (``[arm]``), or a gap's ``A - B`` run by
    run (``[A, B]``), an arm of one pretraining seed (random init) paired by fine-tuning seed with each pretraining
    seed's run of the other (as ``components.seed_parts`` pairs them); None when the runs do not line up."""
    scored = [run_scores(sample, metric) for sample in samples]
    if len(scored) == 1:
        return scored[0]
    (a, a_labels), (b, b_labels) = scored
    if a_labels == b_labels:
        return a - b, a_labels
    if "/" in "".join(a_labels) and "/" not in "".join(b_labels):
        return _broadcast(a, a_labels, b, b_labels, 1.0)
    if "/" in "".join(b_labels) and "/" not in "".join(a_labels):
        return _broadcast(b, b_labels, a, a_labels, -1.0)
    return None


def _broadcast(
    many: np.ndarray, labels: tuple[str, ...], one: np.ndarray, seeds: tuple[str, ...], sign: float
) -> tuple[np.ndarray, tuple[str, ...]] | None:
    """``sign * (many - one)`` run by run, ``one``'s run of fine-tuning seed ``s`` against each ``<p>/<s>`` of
    ``many``; None unless every fine-tuning seed of ``many`` has exactly one run in ``one``."""
    by_seed = dict(zip(seeds, one, strict=True))
    fine = [label.rsplit("/", 1)[1] for label in labels]
    if len(by_seed) != len(seeds) or set(fine) != set(by_seed):
        return None
    return sign * (many - np.array([by_seed[f] for f in fine])), labels


def run_scores(sample: Sample, metric: str) -> tuple[np.ndarray, tuple[str, ...]]:
    """``(scores (n_runs,), labels)`` of one fine-tuning arm on claim metric ``metric`` (module docstring)."""
    items = sample.items
    if not isinstance(items, Items):
        return np.asarray(sample.values, dtype=float), tuple(str(unit) for unit in sample.units)
    scores = np.asarray(metric_function(metric)(items.headline.sum(axis=1)), dtype=float)
    pretrain = items.pretrain or ("",) * len(items.seeds)
    return scores, tuple(f"{p}/{s}" if p else str(s) for p, s in zip(pretrain, items.seeds, strict=True))
