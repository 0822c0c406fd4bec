"""What each split of a stratum may hold: the document targets of ``split.task_fractions`` /
``pretrain_fractions``, and, under ``split.task_sizing: study``, the train pool of a task source.

Study sizing (the default). A task source that a task reads gets a train split of ``pool`` kept (non-duplicate)
documents, ``ceil(split.train_pool_factor x`` the largest ``finetune.recipes.<recipe>.max_train_docs`` of the
tasks reading it) (``SplitParams.train_pools``), its dev split keeps its ``task_fractions.dev`` share, and every
other document goes to test. Why: a fine-tuning run only ever sees ``max_train_docs`` (or a smaller
``train_sizes`` point) drawn from the train split per seed (``tasks/finetune/draw.py``), so train documents past
the pool are seen by no encoder, while the item standard error of every test metric falls as 1/sqrt(test docs).
Why a factor above 1: each seed draws its own subset of the pool, so the seed level of the report's bootstrap
carries the variance of drawing the training set; from a pool of N docs, two draws of n share n/N of their docs
in expectation and the draw variance is (1 - n/N) of that from an unlimited pool (the finite-population
correction). At 1.5 that is 1/3 at the largest size (the curve's 32 of 240 BBC docs: 0.87), and the pool still
leaves WNUT-16 888 gold test entities (at 2.0: 781, under the study's 800).

Order and units: dev and test are first filled exactly as under ``fractions`` (same key order, same targets,
counted in rows: a duplicate travels with its cluster), then the pool, counted in kept documents (what fine-tuning
draws from), and every component left is test. So switching the sizing only moves train documents to test: the
dev set and the fractions' test set are the same documents.

Label strata (``stratify_by_label``): a source's pool is shared out over its strata in proportion to their kept
documents that may join it (not fixed to dev or test by a shipped split), by largest remainders (ties: the
stratum name), so the pool's label mix is the source's and the per-stratum targets sum to the pool exactly.

A source that ships its own split (``own_split_meta_key``): its dev and test stay; its shipped train is the
candidate pool, first-fit in key order, and what the pool does not take moves to test (counted per source in
``metrics/split.json``: ``shipped_train_to_test``).

A test cap (``split.max_test_docs``: ``{source: kept docs}``, none by default): test still gets its fraction share,
then takes the rest in key order only while its kept documents stay within the cap (shared over label strata like
the pool); the components past it are ``LEFT_OUT`` of the task source (dropped, reason ``beyond_max_test_docs``).
Where the corpus is in both roles (BBC by default), their pretraining twins are then no eval twins, so the leakage
stage keeps them as pretraining text.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

#: The split of a component past its stratum's test cap: left out of the task source (``split.max_test_docs``).
LEFT_OUT = "left_out"


@dataclass(frozen=True)
class StratumPlan:
    """How one stratum is filled: ``targets`` per bounded split in its ``units`` (``docs``: every row, ``kept``:
    non-duplicate rows), the ``bounded`` splits in first-fit order, the ``rest`` split that takes what fits none,
    the role's ``splits`` in params order (temporal fill), its ``fractions`` (hash buckets) and the components
    that ship a train split (``shipped_train``: they may go to train or the rest only); ``rest_cap``: the kept
    docs the rest split may hold in all (``split.max_test_docs``' share; None: no cap), past which ``LEFT_OUT``."""

    targets: dict[str, int]
    units: dict[str, str]
    bounded: tuple[str, ...]
    rest: str
    splits: tuple[str, ...]
    fractions: dict[str, float]
    shipped_train: frozenset[int]
    rest_cap: int | None = None

    def allowed(self, name: int) -> tuple[str, ...]:
        """The bounded splits component ``name`` may fill, in first-fit order (a shipped-train one: train only)."""
        return tuple(s for s in self.bounded if name not in self.shipped_train or s == "train")


def doc_targets(total_docs: int, fractions: dict[str, float], splits: tuple[str, ...]) -> dict[str, int]:
    """Documents per split: ``round(fraction * total)`` (half up) for evaluation splits, the rest to train."""
    targets = {s: math.floor(fractions[s] * total_docs + 0.5) for s in splits if s != "train"}
    targets["train"] = total_docs - sum(targets.values())
    return targets


def plan_stratum(
    members: pd.DataFrame,
    fractions: dict[str, float],
    splits: tuple[str, ...],
    pool: int | None,
    shipped: set,
    cap: int | None = None,
) -> StratumPlan:
    """The plan of one stratum (``members``: its component rows, ``docs`` and ``kept``). ``pool`` None: the
    fractions (evaluation splits bounded, train the rest); else the study plan: dev and test first by their
    fractions, as under fractions, then train by ``pool`` kept docs, and test takes the rest (up to ``cap`` kept
    docs in all, when given)."""
    targets = doc_targets(int(members["docs"].sum()), fractions, splits)
    units = dict.fromkeys(splits, "docs")
    evaluation = tuple(s for s in splits if s != "train")
    if pool is None:
        return StratumPlan(targets, units, evaluation, "train", splits, fractions, frozenset())
    targets["train"], units["train"] = pool, "kept"
    mine = frozenset(shipped & set(members.index))
    return StratumPlan(targets, units, ("dev", "test", "train"), "test", splits, fractions, mine, cap)


def stratum_shares(components: pd.DataFrame, excluded: dict[int, str], totals: dict[str, int]) -> dict[str, int]:
    """``{stratum: share}`` of each source's total (``totals``: ``{source: kept docs}``, a train pool or a test
    cap) over its strata in proportion to their kept docs; the shares of a source sum to its total.
    ``components``: ``source``, ``stratum`` and ``kept`` per component; those in ``excluded`` (a pool's
    components fixed by a shipped dev or test split, which cannot join it) are not counted."""
    counted = components[~components.index.isin(list(excluded)) & components["source"].isin(list(totals))]
    shares: dict[str, int] = {}
    for source, part in counted.groupby("source", sort=True):
        shares |= apportion(totals[source], part.groupby("stratum", sort=True)["kept"].sum().to_dict())
    return shares


def apportion(total: int, weights: dict[str, int]) -> dict[str, int]:
    """``total`` shared out in proportion to ``weights`` by largest remainders (Hamilton's method): each key gets
    the floor of its quota, and the units left go to the largest remainders, ties to the smaller key. The
    shares sum to ``total`` (all 0 when every weight is 0)."""
    whole = sum(weights.values())
    if whole == 0:
        return dict.fromkeys(weights, 0)
    quotas = {key: total * weight / whole for key, weight in weights.items()}
    shares = {key: math.floor(quota) for key, quota in quotas.items()}
    left = total - sum(shares.values())
    for key in sorted(quotas, key=lambda k: (-(quotas[k] - shares[k]), k))[:left]:
        shares[key] += 1
    return shares
