"""The learning-rate sweep widens its grid past an edge the dev score prefers (``finetune.recipes.*.lr_grid_widen``),
so an arm's learning rate is chosen inside the range tried: ``tasks.finetune.arms.sweep`` with the training run replaced
by a dev score that is a known function of the multiplier."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from tasks.finetune.arms import sweep


def fake_job(tmp_path, key: str, widen: int, mode: str = "full"):
    spec = SimpleNamespace(mode=mode, variant="pretrained", head="mean-pool", key=key)
    return SimpleNamespace(key=key, spec=spec, module="cls", folder=tmp_path, tcfg=SimpleNamespace(lr_grid_widen=widen))


def run_sweep(monkeypatch, tmp_path, dev_of_scale, grid, widen, mode="full"):
    """``sweep_and_train`` on one arm whose sweep run at multiplier ``s`` scores ``dev_of_scale(s)`` on dev;
    returns the arm's result and every (seed, multiplier) trained, in order."""
    trained = []

    def fake_train(run, show_progress=True):
        assert run.score_test == (run.seed != 7)  # a sweep run (seed 7) skips its test pass
        trained.append((run.seed, run.lr_scale))
        return {"seed": run.seed, "lr_scale": run.lr_scale, "dev_best_macro_f1": dev_of_scale(run.lr_scale)}

    monkeypatch.setattr(sweep, "train_and_test", fake_train)
    job = fake_job(tmp_path, "pretrained/full/mean-pool", widen, mode)
    out = sweep.sweep_and_train([job], {job.key: [13, 21]}, 7, {job.key: grid}, sweep.Runner(1, ["cpu"]), {})
    return out[job.key], trained


def test_an_edge_choice_widens_until_the_optimum_is_inside(monkeypatch, tmp_path):
    # dev peaks at multiplier 30 (a parabola in log10 scale): [1, 3, 10] picks 10, the edge; one step up (10 x 10/3
    # = 33.3) scores higher, so one more (111.1) is tried, scores lower, and 33.3 is the interior choice
    peak = math.log10(30)
    result, trained = run_sweep(monkeypatch, tmp_path, lambda s: 1 - (math.log10(s) - peak) ** 2, [1.0, 3.0, 10.0], 3)
    assert [s for seed, s in trained if seed == 7] == pytest.approx([1.0, 3.0, 10.0, 100 / 3, 1000 / 9])
    assert result["scale"] == pytest.approx(100 / 3)
    assert list(result["sweep"]) == pytest.approx([1.0, 3.0, 10.0, 100 / 3, 1000 / 9])  # ascending, as tried
    assert [(seed, s) for seed, s in trained if seed != 7] == [(13, result["scale"]), (21, result["scale"])]


def test_widening_stops_after_lr_grid_widen_steps_and_goes_down_as_well(monkeypatch, tmp_path):
    # dev always prefers a smaller multiplier: two steps down from 1 (1/3, 1/9), then the cap; the choice stays
    # at the edge, which the metrics' lr_sweep shows
    result, trained = run_sweep(monkeypatch, tmp_path, lambda s: -s, [1.0, 3.0, 10.0], 2)
    assert [s for seed, s in trained if seed == 7] == pytest.approx([1.0, 3.0, 10.0, 1 / 3, 1 / 9])
    assert result["scale"] == pytest.approx(1 / 9) and min(result["sweep"]) == result["scale"]


def test_no_widening_when_off_inside_or_for_a_probe(monkeypatch, tmp_path):
    edge = lambda s: s  # noqa: E731  (the top edge always wins)
    assert run_sweep(monkeypatch, tmp_path, edge, [1.0, 3.0, 10.0], 0)[0]["scale"] == 10.0
    inside = lambda s: -abs(s - 3.0)  # noqa: E731
    assert list(run_sweep(monkeypatch, tmp_path, inside, [10.0, 1.0, 3.0], 2)[0]["sweep"]) == [1.0, 3.0, 10.0]
    probe = run_sweep(monkeypatch, tmp_path, edge, [1.0, 3.0, 10.0], 2, mode="frozen")[0]  # no learning rate
    assert list(probe["sweep"]) == [1.0] and probe["scale"] == 1.0


def test_widened_steps_by_the_ratio_at_each_edge():
    assert sweep.widened([1.0, 3.0, 10.0], 10.0) == pytest.approx(100 / 3)
    assert sweep.widened([1.0, 3.0, 10.0], 1.0) == pytest.approx(1 / 3)
    assert sweep.widened([1.0, 3.0, 10.0], 3.0) is None
    assert sweep.widened([2.0], 2.0) is None  # one point: no ratio to step by
