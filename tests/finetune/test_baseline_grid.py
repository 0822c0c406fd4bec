"""The baselines' grid widens past an edge the dev score prefers (``finetune.recipes.*.baseline_grid_widen``),
so tfidf-lr's C and the CRF's c1/c2 are chosen inside the range tried: ``tasks.finetune.baselines.grid`` with the fit
replaced by a dev score that is a known function of the setting (tfidf-lr and the CRF through
it: test_finetune_baselines, test_crf_baseline)."""

from __future__ import annotations

import math

import pytest
from pydantic import ValidationError

from finetune_fixtures import tiny_params
from tasks.config.model.finetune import TaskParams
from tasks.finetune.baselines import grid


def peaked(log_peak: float):
    """A dev score with its maximum at C = 10 ** ``log_peak``, a parabola in log10 C (as a regularisation curve),
    and the points it was asked for, in order."""
    asked = []

    def score(setting: dict) -> tuple[float, str]:
        asked.append(setting["C"])
        return 1 - (math.log10(setting["C"]) - log_peak) ** 2, f"fit at C={setting['C']:g}"

    return score, asked


def test_step_is_one_ratio_past_the_edge_chosen_and_none_inside_or_without_a_ratio():
    assert grid.step([1.0, 10.0, 100.0], 100.0) == 1000.0  # 100 x 100/10
    assert grid.step([10.0, 1.0, 100.0], 1.0) == 0.1  # the params' order does not matter: 1 x 1/10
    assert grid.step([0.05, 0.25], 0.05) == 0.01  # 0.05 x 0.05/0.25, rounded: not 0.010000000000000002
    assert grid.step([0.05, 0.25], 0.25) == 1.25
    assert grid.step([1.0, 10.0, 100.0], 10.0) is None  # interior
    assert grid.step([1.0], 1.0) is None  # one value: no ratio
    assert grid.step([0.0, 0.1], 0.0) is None and grid.step([0.0, 0.1], 0.1) is None  # 0 has no log step


def test_an_optimum_past_the_top_is_found_by_widening_and_chosen_inside():
    # dev peaks at C = 10^3.2 (about 1,585): [1, 10, 100] picks 100, the top; 1,000 (log 3, 1 - 0.04) beats it; 10,000
    # (log 4, 1 - 0.64) does not, so 1,000 is the interior choice after 2 widenings
    score, asked = peaked(3.2)
    found = grid.search({"C": [1.0, 10.0, 100.0]}, ["C"], 2, score)
    assert asked == [1.0, 10.0, 100.0, 1000.0, 10000.0]
    assert found.best == (1000.0,) and found.kept == "fit at C=1000"
    assert found.scores[(1000.0,)] == pytest.approx(1 - 0.2**2)
    assert found.widening(["C"]) == {
        "C": {"tried": [1.0, 10.0, 100.0, 1000.0, 10000.0], "widenings": 2, "at_edge": False, "bound_hit": False}
    }


def test_an_interior_best_widens_nothing_and_the_bottom_widens_down():
    score, asked = peaked(1.0)
    found = grid.search({"C": [1.0, 10.0, 100.0]}, ["C"], 2, score)
    assert asked == [1.0, 10.0, 100.0] and found.best == (10.0,)
    assert found.widening(["C"])["C"] == {
        "tried": [1.0, 10.0, 100.0],
        "widenings": 0,
        "at_edge": False,
        "bound_hit": False,
    }
    # peak at 10^-1.3: 1 is the bottom (1 - 1.69), 0.1 (1 - 0.09) beats it, 0.01 (1 - 0.49) does not
    score, asked = peaked(-1.3)
    assert grid.search({"C": [1.0, 10.0, 100.0]}, ["C"], 2, score).best == (0.1,)
    assert asked == [1.0, 10.0, 100.0, 0.1, 0.01]


def test_the_bound_stops_the_widening_and_says_the_choice_is_at_the_widened_edge():
    score, asked = peaked(6.0)
    found = grid.search({"C": [1.0, 10.0, 100.0]}, ["C"], 2, score)
    assert asked == [1.0, 10.0, 100.0, 1000.0, 10000.0] and found.best == (10000.0,)
    assert found.widening(["C"])["C"] | {"tried": None} == {
        "tried": None,
        "widenings": 2,
        "at_edge": True,
        "bound_hit": True,
    }
    score, asked = peaked(6.0)
    as_given = grid.search({"C": [1.0, 10.0, 100.0]}, ["C"], 0, score)  # 0: the grid as given, its top still an edge
    assert asked == [1.0, 10.0, 100.0] and as_given.widening(["C"])["C"]["bound_hit"] is True


def test_a_widened_value_is_fitted_with_every_value_of_the_other_axes_so_the_grid_stays_a_product():
    # the score grows with both c1 and c2 and prefers "b": both numeric axes widen in the same round, c2's new
    # value also with c1's (the corner), the categorical axis never widens
    def score(setting: dict) -> tuple[float, None]:
        return setting["c1"] + setting["c2"] + (setting["kind"] == "b"), None

    found = grid.search({"kind": ["a", "b"], "c1": [1.0, 10.0], "c2": [1.0, 10.0]}, ["c1", "c2"], 1, score)
    rounds = [(k, c1, c2) for k in "ab" for c1 in (1.0, 10.0) for c2 in (1.0, 10.0)]
    rounds += [(k, 100.0, c2) for k in "ab" for c2 in (1.0, 10.0)]  # c1 widened: 10 x 10/1
    rounds += [(k, c1, 100.0) for k in "ab" for c1 in (1.0, 10.0, 100.0)]  # then c2, with c1's 100
    assert list(found.scores) == rounds and found.best == ("b", 100.0, 100.0)
    assert found.widened == {"kind": 0, "c1": 1, "c2": 1}


def test_a_tie_keeps_the_point_tried_first_and_an_empty_axis_is_an_error():
    found = grid.search({"C": [1.0, 10.0]}, ["C"], 3, lambda setting: (0.5, setting["C"]))
    # 1 ties 10 and is kept, at the bottom: 0.1 is tried, ties too, and 1 is now inside
    assert list(found.scores) == [(1.0,), (10.0,), (0.1,)] and found.kept == 1.0
    with pytest.raises(ValueError, match="every axis needs a value"):
        grid.search({"C": []}, ["C"], 3, lambda setting: (0.5, None))


def test_a_negative_bound_is_an_error_naming_the_key():
    recipe = tiny_params(["pretrained/full/mean-pool"], ["pretrained/full/first"], [1]).recipes["cls"].model_dump()
    with pytest.raises(ValidationError, match="baseline_grid_widen"):
        TaskParams.model_validate({**recipe, "baseline_grid_widen": -1})
