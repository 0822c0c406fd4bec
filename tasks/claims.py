"""Claim evaluation: resolve each hand-written claim of ``reports/claims.yaml`` against the metrics files,
estimate treatment, baseline and their difference with confidence intervals, and give a verdict.

Reference grammar (``treatment`` / ``baseline`` of a claim):

- ``finetune/<task>/<variant>/<mode>/<head>``: the ``per_seed`` values of ``claim.metric`` in
  ``metrics/finetune_<task>.json`` -> ``runs["<variant>/<mode>/<head>"]``; units are seeds.
- ``probe/<variant>/layer/<k|last>``: ``claim.metric`` (``separation`` or ``knn_accuracy``) at layer ``k``
  of ``metrics/probe.json`` -> ``models[<variant>]``, one value per probe word (``per_word``); units are
  words, so the CI says how much the effect varies over the ambiguous words sampled. Without ``per_word``
  it falls back to the single pooled value (n=1, no CI).
- ``leakage/<source>/<split>|all/[<check>/]rate_before|rate_after``: a contamination proportion of
  ``metrics/leakage.json`` -> ``eval_sets``; ``all`` pools every eval set; ``<check>`` (``pretrain`` or
  ``task_train``) selects the rates of one side of the audit. Its CI is Clopper-Pearson.

Statistics (all quantiles from scipy, none written by hand):

- an arm: mean with a two-sided Student-t interval over its units;
- a difference ``treatment - baseline``: paired when both arms have the same units (the same seeds or
  the same words): paired t (``scipy.stats.ttest_rel``) or a paired percentile bootstrap
  (``scipy.stats.bootstrap``, Efron & Tibshirani 1993); otherwise Welch's unequal-variance t
  (``scipy.stats.ttest_ind(equal_var=False)``, Welch 1947).

Verdicts of a ``difference`` claim: ``supported`` when the CI's lower bound exceeds ``min_effect``;
``contradicted`` when its upper bound is below ``min(0, min_effect)`` (clearly the other way; a negative
``min_effect`` is a non-inferiority margin); ``inconclusive`` otherwise. An ``upper_bound`` claim
(``treatment`` must stay at or below ``min_effect``, e.g. a leakage rate) is ``supported`` when the
treatment's CI upper bound is <= ``min_effect``, ``contradicted`` when its lower bound is above it.
A claim whose inputs are missing gets verdict ``not run`` with the reason; it never disappears.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
import yaml
from pydantic import Field, ValidationError, field_validator
from scipy import stats

from tasks.config.base import StrictModel

Verdict = Literal["supported", "contradicted", "inconclusive", "not run"]


class ClaimsError(ValueError):
    """``reports/claims.yaml`` is missing or invalid (the message names the file and key)."""


class NotRun(Exception):
    """An input of a claim is missing; the message is the ``not run: <why>`` reason."""


#: What reading a metrics file of an unexpected shape raises; such a claim is ``not run``, not a crash.
MALFORMED = (TypeError, ValueError, KeyError, IndexError, AttributeError)


# ---------------------------------------------------------------- claims.yaml


class Claim(StrictModel):
    """One hand-written claim; ``treatment``/``baseline`` follow the reference grammar of this module."""

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9_-]*$")
    statement: str = Field(min_length=1)
    kind: Literal["difference", "upper_bound"]
    task: str
    data_slice: str
    metric: str
    treatment: str
    baseline: str
    ablation: str = Field(description="the component removed in the baseline")
    min_effect: float = Field(description="difference: smallest effect that counts; upper_bound: the bound")
    known_confounders: list[str]

    @field_validator("treatment", "baseline")
    @classmethod
    def _known_prefix(cls, value: str) -> str:
        if value.split("/")[0] not in ("finetune", "probe", "leakage"):
            raise ValueError(f"reference must start with finetune/, probe/ or leakage/, got {value!r}")
        return value


class ClaimsFile(StrictModel):
    """The whole of ``reports/claims.yaml``: the experiment's question and its claims (unique ids)."""

    question: str = Field(min_length=1)
    claims: list[Claim] = Field(min_length=1)

    @field_validator("claims")
    @classmethod
    def _unique_ids(cls, claims: list[Claim]) -> list[Claim]:
        ids = [c.id for c in claims]
        dupes = sorted({i for i in ids if ids.count(i) > 1})
        if dupes:
            raise ValueError(f"duplicate claim ids: {dupes}")
        return claims


def load_claims(path: Path) -> ClaimsFile:
    """Parse and validate ``claims.yaml``; raises ``ClaimsError`` naming the file and the dotted key."""
    try:
        raw = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
        return ClaimsFile.model_validate(raw)
    except FileNotFoundError as err:
        raise ClaimsError(f"{path}: file not found") from err
    except yaml.YAMLError as err:
        raise ClaimsError(f"{path}: invalid YAML: {err}") from err
    except ValidationError as err:
        lines = [f"{path}: {err.error_count()} invalid value(s)"]
        lines += [f"  {'.'.join(map(str, e['loc']))}: {e['msg']}" for e in err.errors()]
        raise ClaimsError("\n".join(lines)) from None


# ---------------------------------------------------------------- metrics files


class Metrics:
    """Lazy, cached reader of ``metrics/<name>.json``; a missing or broken file raises ``NotRun``."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self._cache: dict[str, dict] = {}

    def get(self, name: str) -> dict:
        """The parsed ``<folder>/<name>.json``; raises ``NotRun`` if it is absent or not a JSON object."""
        if name not in self._cache:
            path = self.folder / f"{name}.json"
            if not path.exists():
                raise NotRun(f"{path} is missing (stage not run)")
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except json.JSONDecodeError as err:
                raise NotRun(f"{path} is not valid JSON: {err}") from err
            if not isinstance(data, dict):
                raise NotRun(f"{path} is not a JSON object")
            self._cache[name] = data
        return self._cache[name]

    def optional(self, name: str) -> dict | None:
        """Like ``get`` but ``None`` when the file is missing or broken."""
        try:
            return self.get(name)
        except NotRun:
            return None


def dig(tree: dict, keys: list[str], where: str):
    """``tree[k0][k1]...``; raises ``NotRun`` naming ``where`` and the first missing key (with what exists)."""
    node = tree
    for depth, key in enumerate(keys):
        if not isinstance(node, dict) or key not in node:
            have = sorted(node)[:8] if isinstance(node, dict) else type(node).__name__
            raise NotRun(f"{where} has no key {'.'.join(keys[: depth + 1])!r} (have: {have})")
        node = node[key]
    return node


# ---------------------------------------------------------------- samples


@dataclass(frozen=True)
class Sample:
    """The values of one arm of a claim.

    ``values[i]`` was measured on unit ``units[i]`` (a seed, a probe word). ``proportion`` is
    ``(events, trials)`` for a rate. ``run_ids`` are MLflow run ids, ``notes`` caveats (diverged seeds).
    """

    values: tuple[float, ...]
    units: tuple[str, ...]
    unit_name: str
    source: str
    run_ids: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    proportion: tuple[int, int] | None = None


def resolve(ref: str, metric: str, metrics: Metrics) -> Sample:
    """The ``Sample`` a reference points at; raises ``NotRun`` when the file, run, metric or layer is absent."""
    kind, *rest = ref.split("/")
    if kind == "finetune" and len(rest) == 4:
        return _finetune_sample(rest[0], "/".join(rest[1:]), metric, metrics)
    if kind == "probe" and len(rest) == 3 and rest[1] == "layer":
        return _probe_sample(rest[0], rest[2], metric, metrics)
    if kind == "leakage" and len(rest) >= 2:
        width = 1 if rest[0] == "all" else 2
        if len(rest) in (width + 1, width + 2):
            return _leakage_sample("/".join(rest[:width]), rest[width:-1], rest[-1], metrics)
    raise NotRun(f"malformed reference {ref!r} (see the grammar in tasks/claims.py)")


def _finetune_sample(task: str, run_key: str, metric: str, metrics: Metrics) -> Sample:
    name = f"finetune_{task}"
    where = f"metrics/{name}.json"
    run = dig(metrics.get(name), ["runs", run_key], where)
    entry = dig(run, [metric], f"{where} runs[{run_key!r}]")
    values = [float(v) for v in dig(entry, ["per_seed"], f"{where} runs[{run_key!r}].{metric}")]
    seeds = entry.get("seeds") or list(range(len(values)))
    if not values:
        raise NotRun(f"{where} runs[{run_key!r}].{metric}.per_seed is empty")
    diverged = [str(s) for s in run.get("diverged_seeds") or []]
    notes = (f"diverged seeds {', '.join(diverged)} (kept in the values)",) if diverged else ()
    run_id = run.get("mlflow_run_id")
    return Sample(tuple(values), tuple(str(s) for s in seeds), "seed", where,
                  run_ids=(str(run_id),) if run_id else (), notes=notes)


def _probe_sample(variant: str, layer: str, metric: str, metrics: Metrics) -> Sample:
    where = "metrics/probe.json"
    model = dig(metrics.get("probe"), ["models", variant], where)
    pooled = dig(model, [metric], f"{where} models[{variant!r}]")
    index = len(pooled) - 1 if layer == "last" else int(layer)
    if not 0 <= index < len(pooled):
        raise NotRun(f"{where} models[{variant!r}].{metric} has {len(pooled)} layers, no layer {layer}")
    per_word = model.get("per_word") or {}
    words = sorted(w for w in per_word if isinstance(per_word[w], dict) and metric in per_word[w])
    static = (metrics.get("probe").get("static_baseline") or {}).get("note") if index == 0 else None
    notes = (f"{variant} layer {index} of 0..{len(pooled) - 1}",) + ((f"layer 0: {static}",) if static else ())
    if len(words) >= 2:
        values = tuple(float(per_word[w][metric][index]) for w in words)
        return Sample(values, tuple(words), "word", where, notes=notes + (f"words: {', '.join(words)}",))
    notes += ("no per-word values: single pooled value, no CI",)
    return Sample((float(pooled[index]),), ("pooled",), "word", where, notes=notes)


def _leakage_sample(eval_set: str, check: list[str], key: str, metrics: Metrics) -> Sample:
    where = "metrics/leakage.json"
    sets = dig(metrics.get("leakage"), ["eval_sets"], where)
    names = sorted(sets) if eval_set == "all" else [eval_set]
    if not names:
        raise NotRun(f"{where} lists no eval sets")
    events = trials = 0
    for name in names:
        entry = dig(sets, [name, *check], f"{where} eval_sets")
        docs = int(dig(entry, ["docs"], f"{where} eval_sets[{name!r}]"))
        events += round(float(dig(entry, [key], f"{where} eval_sets[{name!r}]")) * docs)
        trials += docs
    if trials == 0:
        raise NotRun(f"{where}: eval sets {names} hold 0 docs")
    side = f", {check[0]} side" if check else ", pretraining side"  # headline rates: pretraining side
    note = f"{events} of {trials} eval docs ({key}{side}) over {', '.join(names)}"
    return Sample((events / trials,), (eval_set,), "eval docs", where, notes=(note,), proportion=(events, trials))


# ---------------------------------------------------------------- statistics


@dataclass(frozen=True)
class Estimate:
    """A point value with its two-sided CI (``nan`` bounds when not available), n units and the method."""

    mean: float
    low: float
    high: float
    n: int
    method: str

    @property
    def has_ci(self) -> bool:
        """Whether both CI bounds are finite."""
        return math.isfinite(self.low) and math.isfinite(self.high)


def mean_ci(values: tuple[float, ...], level: float) -> Estimate:
    """Mean and Student-t CI ``mean +- t_{(1+level)/2, n-1} * s / sqrt(n)`` (scipy); n=1 has no CI."""
    arr = np.asarray(values, dtype=float)
    mean = float(arr.mean())
    if arr.size < 2:
        return Estimate(mean, math.nan, math.nan, int(arr.size), "single value, no CI")
    sem = float(stats.sem(arr))
    if sem == 0.0:
        return Estimate(mean, mean, mean, int(arr.size), "t over units (zero variance)")
    low, high = stats.t.interval(level, arr.size - 1, loc=mean, scale=sem)
    return Estimate(mean, float(low), float(high), int(arr.size), "t over units")


def proportion_ci(events: int, trials: int, level: float) -> Estimate:
    """A rate ``events/trials`` with its exact Clopper-Pearson CI (``scipy.stats.binomtest``)."""
    ci = stats.binomtest(events, trials).proportion_ci(confidence_level=level, method="exact")
    return Estimate(events / trials, float(ci.low), float(ci.high), trials, "Clopper-Pearson")


def welch_ci(treatment: tuple[float, ...], baseline: tuple[float, ...], level: float) -> Estimate:
    """CI of ``mean(treatment) - mean(baseline)`` by Welch's t (Welch 1947, via ``scipy.stats.ttest_ind``).

    Needs n >= 2 per arm, else the bounds are ``nan``. ``n`` is the smaller arm's size.
    """
    diff = float(np.mean(treatment) - np.mean(baseline))
    n = min(len(treatment), len(baseline))
    if n < 2:
        return Estimate(diff, math.nan, math.nan, n, "Welch t: needs n>=2 per arm, no CI")
    res = stats.ttest_ind(treatment, baseline, equal_var=False)
    ci = res.confidence_interval(confidence_level=level)
    return Estimate(diff, float(ci.low), float(ci.high), n, "Welch t (unpaired)")


def paired_ci(treatment: tuple[float, ...], baseline: tuple[float, ...], level: float, method: str,
              resamples: int, seed: int) -> Estimate:
    """CI of the mean paired difference ``treatment[i] - baseline[i]``.

    ``method="t"``: paired t (``scipy.stats.ttest_rel``). ``method="bootstrap"``: percentile bootstrap of
    the mean difference (``scipy.stats.bootstrap(paired=True)``, ``resamples`` draws, a numpy Generator
    seeded with ``seed``). With 3 seeds a bootstrap has at most 10 distinct resample means and covers less
    than it claims, which is why ``t`` is the default in params.yaml. Raises ``ValueError`` on unequal lengths.
    """
    if len(treatment) != len(baseline):
        raise ValueError(f"paired arms differ in length: {len(treatment)} vs {len(baseline)}")
    deltas = np.asarray(treatment, dtype=float) - np.asarray(baseline, dtype=float)
    diff, n = float(deltas.mean()), int(deltas.size)
    if n < 2:
        return Estimate(diff, math.nan, math.nan, n, "paired: needs n>=2, no CI")
    if float(np.ptp(deltas)) <= 1e-12 * max(1.0, abs(diff)):  # equal up to float rounding: zero variance
        return Estimate(diff, diff, diff, n, f"paired {method} (identical differences)")
    if method == "t":
        ci = stats.ttest_rel(treatment, baseline).confidence_interval(confidence_level=level)
        return Estimate(diff, float(ci.low), float(ci.high), n, "paired t")
    res = stats.bootstrap((deltas,), np.mean, confidence_level=level, n_resamples=resamples,
                          method="percentile", rng=np.random.default_rng(seed))
    ci = res.confidence_interval
    return Estimate(diff, float(ci.low), float(ci.high), n, f"paired percentile bootstrap ({resamples} resamples)")


def difference_verdict(diff: Estimate, min_effect: float) -> tuple[Verdict, str]:
    """Verdict of a ``difference`` claim from its CI (rules in the module docstring), with a short reason."""
    if not diff.has_ci:
        return "inconclusive", "no CI for the difference"
    if diff.low > min_effect:
        return "supported", f"CI lower bound {diff.low:.4f} > min_effect {min_effect:g}"
    if diff.high < min(0.0, min_effect):
        return "contradicted", f"CI upper bound {diff.high:.4f} < {min(0.0, min_effect):g}"
    if diff.high < min_effect:
        return "inconclusive", f"effect, if any, is below min_effect {min_effect:g}"
    return "inconclusive", f"CI [{diff.low:.4f}, {diff.high:.4f}] contains min_effect {min_effect:g}"


def bound_verdict(value: Estimate, bound: float) -> tuple[Verdict, str]:
    """Verdict of an ``upper_bound`` claim: is the treatment's CI at or below ``bound``?"""
    if not value.has_ci:
        return "inconclusive", "no CI for the treatment"
    if value.high <= bound:
        return "supported", f"CI upper bound {value.high:.4f} <= {bound:g}"
    if value.low > bound:
        return "contradicted", f"CI lower bound {value.low:.4f} > {bound:g}"
    return "inconclusive", f"CI [{value.low:.4f}, {value.high:.4f}] contains the bound {bound:g}"


# ---------------------------------------------------------------- evaluation


@dataclass(frozen=True)
class StatsConfig:
    """The statistics settings from the ``report`` params section."""

    level: float
    paired_method: str
    resamples: int
    seed: int


@dataclass
class Row:
    """One evaluated claim: what the tables and figures show. ``verdict == "not run"`` leaves stats empty."""

    claim: Claim
    verdict: Verdict
    reason: str
    treatment: Estimate | None = None
    baseline: Estimate | None = None
    difference: Estimate | None = None
    pairing: str = ""
    confounders: list[str] = field(default_factory=list)
    run_ids: list[str] = field(default_factory=list)
    data_md5: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def evaluate(claim: Claim, metrics: Metrics, lock: dict, cfg: StatsConfig) -> Row:
    """Evaluate one claim; a missing input yields a ``not run`` row (never an exception)."""
    confounders = measure_confounders(claim, metrics)
    md5s = data_md5(claim, lock)
    try:
        treat = resolve(claim.treatment, claim.metric, metrics)
        base = resolve(claim.baseline, claim.metric, metrics)
    except NotRun as why:
        return Row(claim, "not run", f"not run: {why}", confounders=confounders, data_md5=md5s)
    except MALFORMED as err:
        why = f"not run: malformed metrics for {claim.treatment} / {claim.baseline}: {type(err).__name__}: {err}"
        return Row(claim, "not run", why, confounders=confounders, data_md5=md5s)
    row = _estimate(claim, treat, base, cfg)
    row.confounders, row.data_md5 = confounders, md5s
    row.run_ids = sorted(set(treat.run_ids) | set(base.run_ids))
    row.notes += [f"treatment: {n}" for n in treat.notes] + [f"baseline: {n}" for n in base.notes]
    return row


def _estimate(claim: Claim, treat: Sample, base: Sample, cfg: StatsConfig) -> Row:
    if claim.kind == "upper_bound":
        t_est, b_est = (_arm_estimate(s, cfg.level) for s in (treat, base))
        diff = Estimate(t_est.mean - b_est.mean, math.nan, math.nan, t_est.n, "point difference")
        verdict, reason = bound_verdict(t_est, claim.min_effect)
        return Row(claim, verdict, reason, t_est, b_est, diff, pairing="treatment CI against the bound")
    t_vals, b_vals, paired = align(treat, base)
    t_est, b_est = mean_ci(t_vals, cfg.level), mean_ci(b_vals, cfg.level)
    if paired:
        diff = paired_ci(t_vals, b_vals, cfg.level, cfg.paired_method, cfg.resamples, cfg.seed)
        pairing = f"paired by {treat.unit_name} ({diff.method})"
    else:
        diff = welch_ci(t_vals, b_vals, cfg.level)
        pairing = f"unpaired ({diff.method})"
    verdict, reason = difference_verdict(diff, claim.min_effect)
    return Row(claim, verdict, reason, t_est, b_est, diff, pairing=pairing)


def _arm_estimate(sample: Sample, level: float) -> Estimate:
    if sample.proportion is not None:
        return proportion_ci(*sample.proportion, level)
    return mean_ci(sample.values, level)


def align(treat: Sample, base: Sample) -> tuple[tuple[float, ...], tuple[float, ...], bool]:
    """Values of both arms, ordered by shared unit when the arms are paired (same unit kind and unit set)."""
    same = treat.unit_name == base.unit_name and sorted(treat.units) == sorted(base.units)
    if not same or len(treat.units) < 2 or len(set(treat.units)) != len(treat.units):
        return treat.values, base.values, False
    order = sorted(treat.units)
    t_map, b_map = dict(zip(treat.units, treat.values)), dict(zip(base.units, base.values))
    return tuple(t_map[u] for u in order), tuple(b_map[u] for u in order), True


# ---------------------------------------------------------------- confounders and provenance


def measure_confounders(claim: Claim, metrics: Metrics) -> list[str]:
    """One line per known confounder, with its measured value or why it is not measured."""
    lines = []
    for name in claim.known_confounders:
        try:
            lines.append(_measure(name, claim, metrics))
        except MALFORMED as err:
            lines.append(f"{name}: not measured (malformed metrics: {type(err).__name__}: {err})")
    return lines


def _measure(name: str, claim: Claim, metrics: Metrics) -> str:
    source = claim.data_slice.split("/")[0]
    if name == "eval_leakage":
        entry = (metrics.optional("leakage") or {}).get("eval_sets", {}).get(claim.data_slice)
        if entry is None:
            return f"eval_leakage: not measured (no eval set {claim.data_slice!r} in metrics/leakage.json)"
        task_train = ""
        if "task_train_rate_before" in entry:
            task_train = (f"; task-train overlap (flagged, kept) {_pct(entry['task_train_rate_before'])} -> "
                          f"{_pct(entry.get('task_train_rate_after'))}")
        return (f"eval_leakage: {_pct(entry.get('rate_before'))} of {entry.get('docs')} eval docs found in the "
                f"pretraining corpus before the audit, {_pct(entry.get('rate_after'))} after{task_train}")
    if name == "duplicate_rate":
        entry = (metrics.optional("dedup") or {}).get("sources", {}).get(source)
        if entry is None:
            return f"duplicate_rate: not measured (no source {source!r} in metrics/dedup.json)"
        return (f"duplicate_rate: {_pct(entry.get('fraction_removed'))} of {entry.get('docs_in')} docs removed "
                f"({entry.get('exact_duplicates')} exact, {entry.get('near_duplicates')} near)")
    if name == "truncation_rate":
        return _truncation(claim, metrics)
    if name == "diverged_seeds":
        return _diverged(claim, metrics)
    return f"not measured: {name}"


def _truncation(claim: Claim, metrics: Metrics) -> str:
    tok = metrics.optional("tokenize") or {}
    parts = []
    for tok_name in sorted({_tokenizer_of(ref) for ref in (claim.treatment, claim.baseline)}):
        rate = tok.get(claim.task, {}).get(tok_name, {}).get("truncation_rate")
        parts.append(f"{tok_name} {_pct(rate)}" if rate is not None else f"{tok_name} not measured")
    parts += [_finetune_truncation(ref, metrics) for ref in dict.fromkeys((claim.treatment, claim.baseline))]
    return f"truncation_rate ({claim.task}, at tokenize): " + ", ".join(p for p in parts if p)


def _finetune_truncation(ref: str, metrics: Metrics) -> str:
    """Share of test docs cut at the fine-tuning length, and accuracy on cut vs whole docs (cls details)."""
    parts = ref.split("/")
    if parts[0] != "finetune" or len(parts) != 5:
        return ""
    run = (metrics.optional(f"finetune_{parts[1]}") or {}).get("runs", {}).get("/".join(parts[2:])) or {}
    buckets = (run.get("details") or {}).get("accuracy_by_length")
    if not isinstance(buckets, dict) or not {"truncated", "not_truncated"} <= set(buckets):
        return ""
    cut, whole = buckets["truncated"], buckets["not_truncated"]
    total = (cut.get("docs") or 0) + (whole.get("docs") or 0)
    share = _pct(cut.get("docs", 0) / total) if total else "n/a"
    return (f"{'/'.join(parts[2:])} test docs cut at fine-tuning {share}, accuracy cut {_num(cut.get('accuracy'))}"
            f" vs whole {_num(whole.get('accuracy'))}")


def _num(value) -> str:
    return "n/a" if value is None else f"{float(value):.4f}"


def _tokenizer_of(ref: str) -> str:
    parts = ref.split("/")
    variant = parts[2] if parts[0] == "finetune" and len(parts) > 2 else parts[1] if len(parts) > 1 else ""
    return "reference" if variant == "reference" else "clozeline"


def _diverged(claim: Claim, metrics: Metrics) -> str:
    found = []
    for ref in (claim.treatment, claim.baseline):
        parts = ref.split("/")
        if parts[0] != "finetune" or len(parts) != 5:
            continue
        run = (metrics.optional(f"finetune_{parts[1]}") or {}).get("runs", {}).get("/".join(parts[2:]))
        if run is not None:
            found.append(f"{'/'.join(parts[2:])}: {len(run.get('diverged_seeds') or [])}")
    return "diverged_seeds: " + ("; ".join(found) if found else "not measured")


def _pct(value) -> str:
    return "n/a" if value is None else f"{100 * float(value):.2f}%"


def dvc_stage_of(ref: str) -> str:
    """The dvc.lock stage that produced a reference's metrics (``finetune@cls``, ``probe``, ``leakage``)."""
    parts = ref.split("/")
    return f"finetune@{parts[1]}" if parts[0] == "finetune" else parts[0]


def data_md5(claim: Claim, lock: dict) -> dict[str, str]:
    """``{path: md5}`` of the data and model deps (not code) of the stages behind the claim, from dvc.lock."""
    stages = lock.get("stages", {}) if isinstance(lock, dict) else {}
    out: dict[str, str] = {}
    for stage in sorted({dvc_stage_of(claim.treatment), dvc_stage_of(claim.baseline)}):
        for dep in stages.get(stage, {}).get("deps", []):
            path = str(dep.get("path", ""))
            if path.startswith(("data/", "models/")) or path.endswith((".jsonl", ".parquet")):
                out[path] = str(dep.get("md5", ""))
    return dict(sorted(out.items()))


def evaluate_all(claims: ClaimsFile, metrics: Metrics, lock: dict, cfg: StatsConfig) -> list[Row]:
    """Evaluate every claim, in file order."""
    return [evaluate(c, metrics, lock, cfg) for c in claims.claims]
