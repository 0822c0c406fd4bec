"""The Multi-Bootstrap level of tasks/report/stats/bootstrap.py: pretraining seeds drawn first (Sellam et al. 2022),
then fine-tuning seeds, crossed with them, then test items; paired across arms that share pretraining seeds."""

import numpy as np
import pytest

from tasks.report.stats import bootstrap as bs

N = 400


def run(accuracy: float, shift: int = 0) -> np.ndarray:
    """Counts ``(N, 6)`` of one run on N two-class items: the first ``accuracy * N`` items (rolled by ``shift``)
    right, the others wrong."""
    gold = np.zeros(N, dtype=int)
    right = np.roll(np.arange(N) < round(accuracy * N), shift)
    return bs.class_counts(gold, np.where(right, 0, 1), 2)


def arm(*accuracies: float) -> np.ndarray:
    return np.stack([run(a, shift=i) for i, a in enumerate(accuracies)])


def width(reps: np.ndarray) -> float:
    low, high = bs.percentile_ci(reps, 0.95)
    return high - low


def test_two_pretraining_seeds_far_apart_widen_the_ci_and_the_point_is_the_mean_of_every_run():
    first, second = (0.9, 0.88, 0.92), (0.5, 0.52, 0.48)  # three fine-tuning seeds from each pretraining seed
    both = arm(*first, *second)
    labels = ["13"] * 3 + ["21"] * 3
    multi = bs.hierarchical_bootstrap([both], bs.accuracy_from_counts, 4000, 0, False, pretrain=[labels])[:, 0]
    alone = bs.hierarchical_bootstrap([arm(*first)], bs.accuracy_from_counts, 4000, 0, False)[:, 0]
    flat = bs.hierarchical_bootstrap([both], bs.accuracy_from_counts, 4000, 0, False)[:, 0]  # 6 seeds, one level
    assert width(multi) > 3 * width(alone)
    assert width(multi) > width(flat)  # 2 pretraining seeds, not 6 independent runs, carry the 0.4 gap
    # a replicate draws pretraining seed 13 twice, 21 twice, or one of each: means near 0.9, 0.5 or 0.7
    assert np.mean(np.abs(multi - 0.9) < 0.1) == pytest.approx(0.25, abs=0.03)
    assert np.mean(np.abs(multi - 0.5) < 0.1) == pytest.approx(0.25, abs=0.03)
    assert bs.point_estimate(both, bs.accuracy_from_counts) == pytest.approx(np.mean([*first, *second]))


def test_fine_tuning_seeds_are_crossed_with_pretraining_seeds():
    # fine-tuning seed f trains on the same draw under every pretraining seed: two pretraining seeds whose runs are
    # identical, seed by seed, say nothing more than one, so the replicates vary as the one-row arm's do (drawing
    # the fine-tuning seeds afresh within each pretraining seed, as if nested, about halved the seed part:
    # variance ratio ~0.55 here, var([.6, .7, .8, .9]) / 4 = 0.0042 against ~0.0005 from the items)
    one = arm(0.6, 0.7, 0.8, 0.9)
    two = np.concatenate([one, one])
    crossed = bs.hierarchical_bootstrap(
        [two], bs.accuracy_from_counts, 4000, 2, False, pretrain=[["13"] * 4 + ["21"] * 4]
    )
    alone = bs.hierarchical_bootstrap([one], bs.accuracy_from_counts, 4000, 3, False)
    assert np.var(crossed) / np.var(alone) == pytest.approx(1.0, abs=0.1)


def test_arms_sharing_pretraining_seeds_are_paired_at_the_top_level():
    labels = ["13"] * 2 + ["21"] * 2
    full, frozen = arm(0.9, 0.9, 0.5, 0.5), arm(0.8, 0.8, 0.4, 0.4)  # the same 0.1 gap on each pretraining seed
    paired = bs.hierarchical_bootstrap([full, frozen], bs.accuracy_from_counts, 3000, 1, True, pretrain=[labels] * 2)
    other = ["42"] * 2 + ["87"] * 2  # the same numbers from pretraining runs the first arm does not share
    unpaired = bs.hierarchical_bootstrap(
        [full, frozen], bs.accuracy_from_counts, 3000, 1, True, pretrain=[labels, other]
    )
    assert width(paired[:, 0] - paired[:, 1]) < width(unpaired[:, 0] - unpaired[:, 1]) / 3
    # an arm that does not depend on pretraining (one pretraining seed) pairs by fine-tuning seed alone
    random = arm(0.6, 0.7)
    mixed = bs.hierarchical_bootstrap([full, random], bs.accuracy_from_counts, 500, 1, True, pretrain=[labels, None])
    assert mixed.shape == (500, 2) and np.all((mixed[:, 1] >= 0.5) & (mixed[:, 1] <= 0.8))


def test_the_multi_bootstrap_is_deterministic_and_with_one_pretraining_seed_it_is_the_two_stage_one():
    labels = ["13"] * 3 + ["21"] * 3
    both = arm(0.9, 0.88, 0.92, 0.5, 0.52, 0.48)
    one = bs.hierarchical_bootstrap([both], bs.accuracy_from_counts, 300, 5, False, pretrain=[labels])
    assert np.array_equal(
        one, bs.hierarchical_bootstrap([both], bs.accuracy_from_counts, 300, 5, False, pretrain=[labels])
    )
    assert not np.array_equal(
        one, bs.hierarchical_bootstrap([both], bs.accuracy_from_counts, 300, 6, False, pretrain=[labels])
    )
    single = bs.hierarchical_bootstrap([both], bs.accuracy_from_counts, 300, 5, False)
    assert np.array_equal(
        single, bs.hierarchical_bootstrap([both], bs.accuracy_from_counts, 300, 5, False, pretrain=[["13"] * 6])
    )
    # the drawn run indices of pretraining seed p and fine-tuning seed f are p * 3 + f
    draws = bs.run_draws([6], [labels], 200, np.random.default_rng(0), False)[0]
    assert draws.shape == (200, 6) and set(np.unique(draws // 3)) == {0, 1}
    assert all(len(set(row[:3] // 3)) == 1 and len(set(row[3:] // 3)) == 1 for row in draws)


def test_runs_not_grouped_by_pretraining_seed_are_refused():
    with pytest.raises(ValueError, match="grouped"):
        bs.hierarchical_bootstrap(
            [arm(0.5, 0.5, 0.5)], bs.accuracy_from_counts, 10, 0, False, pretrain=[["13", "21", "13"]]
        )
    with pytest.raises(ValueError, match="grouped"):
        bs.pretrain_layout(3, ["13", "13", "21"])
