"""The baselines' choice on dev: a product grid of settings, widened past an edge that wins.

A baseline's settings form a product grid, one axis per setting (tfidf-lr: analyzer x C; crf: c1 x c2), every
point fitted and scored on dev, the best kept (a tie: the point tried first; ``search``). A dev-best value at the
smallest or largest value of a numeric axis says the optimum may lie past the grid, so the axis widens (``step``):
one more value, one step of the axis's own ratio at that edge beyond it (C ``[1, 10, 100]`` chose 100: 1,000;
chose 1: 0.1), fitted with every value of the other axes, so the grid stays a product. The search repeats until
the best is interior on every numeric axis or an axis has widened ``limit`` times (``TaskParams.
baseline_grid_widen``): the same rule as the arms' learning-rate sweep (``lr_grid_widen``). ``Search.widening``
records per axis the values tried, the widenings, whether the chosen value still sits at an edge of the values
tried and whether the bound stopped the widening there, so a chosen C at the widened edge is reported as such.
The points tried and their order depend on the dev scores alone: deterministic when the fits are.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

Fit = TypeVar("Fit")


@dataclass(frozen=True)
class Search(Generic[Fit]):
    """What ``search`` tried: ``scores`` (point -> dev score, in the order tried; a point is one value per axis,
    in axis order), the ``best`` point, the fit it ``kept`` (what ``score`` returned with it), the values
    ``tried`` per axis (in the order tried) and how often each axis ``widened``."""

    scores: dict[tuple, float]
    best: tuple
    kept: Fit
    tried: dict[str, list]
    widened: dict[str, int]

    def widening(self, names: list[str]) -> dict[str, dict]:
        """Per numeric axis of ``names``: ``tried`` (its values, ascending), ``widenings`` (values added past an
        edge), ``at_edge`` (the chosen value is the smallest or largest of 2 or more values tried: the optimum
        may lie past it) and ``bound_hit`` (at an edge that ``step`` could widen, so ``limit`` stopped it)."""
        out = {}
        for name in names:
            values, chosen = sorted(self.tried[name]), self.best[list(self.tried).index(name)]
            at_edge = len(values) > 1 and chosen in (values[0], values[-1])
            out[name] = {
                "tried": values,
                "widenings": self.widened[name],
                "at_edge": at_edge,
                "bound_hit": at_edge and step(values, chosen) is not None,
            }
        return out


def step(values: list[float], chosen: float) -> float | None:
    """The value one step past the edge of ``values`` that ``chosen`` sits on, by the ratio of that edge to its
    neighbour (``[1, 10, 100]`` chose 100: 100 x 100/10 = 1,000; chose 1: 1 x 1/10 = 0.1), rounded to 12
    significant digits (0.05 x 0.05/0.25 reads 0.01, not 0.010000000000000002). None when ``chosen`` is inside
    ``values``, when fewer than 2 values give no ratio, or when the edge or its neighbour is 0 (a penalty of 0,
    no regularisation, has no log-grid step)."""
    ordered = sorted(values)
    if len(ordered) < 2 or ordered[0] < chosen < ordered[-1]:
        return None
    edge, neighbour = (ordered[0], ordered[1]) if chosen == ordered[0] else (ordered[-1], ordered[-2])
    if edge <= 0 or neighbour <= 0:
        return None
    return float(f"{edge * edge / neighbour:.12g}")


def search(
    axes: dict[str, list], numeric: list[str], limit: int, score: Callable[[dict], tuple[float, Fit]]
) -> Search[Fit]:
    """Score every point of the product of ``axes`` (name -> values, in params order; the first axis varies
    slowest), widening each axis of ``numeric`` past a winning edge (``step``) up to ``limit`` times.

    ``score(setting)`` (``setting``: axis name -> value) fits one point and returns ``(dev score, fit)``; the
    best point keeps its fit. Each round scores its new points, then widens in axis order every numeric axis
    whose best value sits at an edge, the new value fitted with every value of the other axes (those widened
    earlier in the round included). Raises ``ValueError`` when an axis has no value.
    """
    if not all(axes.values()):
        raise ValueError(f"baseline grid: every axis needs a value, got {axes}")
    tried, widened = {name: list(values) for name, values in axes.items()}, dict.fromkeys(axes, 0)
    scores: dict[tuple, float] = {}
    kept: dict[tuple, Fit] = {}  # the best point's fit alone
    pending = list(itertools.product(*tried.values()))
    while pending:
        for point in pending:
            scores[point], fit = score(dict(zip(axes, point, strict=True)))
            if not kept or scores[point] > scores[next(iter(kept))]:  # a tie keeps the point tried first
                kept = {point: fit}
        best = next(iter(kept))
        pending = []
        for i, name in enumerate(axes):
            wider = step(tried[name], best[i]) if name in numeric and widened[name] < limit else None
            if wider is not None:
                tried[name].append(wider)
                widened[name] += 1
                pending += itertools.product(*[[wider] if n == name else v for n, v in tried.items()])
    return Search(scores, best, kept[best], tried, widened)
