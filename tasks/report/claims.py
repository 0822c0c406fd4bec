"""The claims of a run (``tasks.report.standard``: generated, then ``reports/claims.yaml`` applied) and the
metrics files they point at: validation and the reference grammar that turns a claim's ``treatment`` /
``baseline`` into the values of one arm.

Reference grammar (``treatment`` / ``baseline`` of a claim):

- ``finetune/<task>/<variant>/<mode>/<head>``: the ``per_seed`` values of ``claim.metric`` in
  ``metrics/finetune/<task>.json`` -> ``runs["<variant>/<mode>/<head>"]`` (a baseline is
  ``baseline/<name>/<input>``), with the run's test predictions per seed read back as per-item counts
  (``tasks.report.items``) when the predictions folder is known, so the claim table resamples seeds and test
  items; ``finetune/<task>/best-arm`` and ``finetune/<task>/best-baseline`` name the run the finetune stage
  chose on dev (``selection``). ``<variant>@ablation_<name>/<mode>/<head>`` is the run fine-tuned from the
  pretraining ablation arm ``name`` (``pretrain.ablations``, ``ablation_config``): one pretraining seed; when
  the arms are off, the claim is ``not run: off (enable with ...)`` (``tasks.report.switches``).
  ``claim.items`` (``all``, ``clean``, ``overlapping``) restricts both arms to the test items without / with
  text shared with the train split.
- ``probe/<variant>/layer/<k|last>``: ``claim.metric`` (``separation`` or ``knn_accuracy``) at layer ``k``
  of ``metrics/probe.json`` -> ``models[<variant>]``, one value per probe word (``per_word``);
  ``probe/<variant>/shuffled/<k|last>``: the same on the shuffled-context control (``shuffled_control``).
  A ``separation`` arm carries its words' pairwise cosines (``sentence_cosines``) as ``items``, and the claim's
  CI is the nested bootstrap over words, then sentences (``tasks.report.probe_bootstrap``); otherwise units
  are words alone. Without ``per_word``: the single pooled value (n=1, no CI).
- ``pretrain/heldout/mlm|unigram``: masked-token accuracy on the held-out masks of ``metrics/pretrain.json``
  (the pretrained MLM, or the unigram baseline on the same masks), a rate over the masked tokens.
- ``probe/<variant>/pairs/<phenomenon|all>``: the minimal pairs of ``metrics/probe.json`` ->
  ``minimal_pairs``, one 0/1 value per pair (passed: PLL(good) > PLL(bad)); units are pairs (paired across
  variants by line), the arm's CI is Clopper-Pearson. ``claim.metric`` is a label (``pair_accuracy``).
- ``leakage/<source>/<split>|all/[<check>/]rate_before|rate_after``: a contamination proportion of
  ``metrics/leakage.json`` -> ``eval_sets``; ``all`` pools every eval set; ``<check>`` (``pretrain`` or
  ``task_train``) selects the rates of one side of the audit. ``leakage/planted/<variant>|all/miss_rate``:
  planted copies of eval docs the audit's detectors missed (``planted``: ``missed`` of ``planted``; ``all``
  pools the variants); ``leakage/residual/all/rate|rate_before``: eval docs the independent residual detector
  finds in the corpus after (before) the action (``residual``: ``contaminated_docs[_before]`` of
  ``eval_docs``); ``<v1>+<v2>`` pools variants; ``leakage/semantic/review/false_discovery_rate``: known-clean
  pairs among the semantic detector's flags on its review sample. Every leakage CI is Clopper-Pearson.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator

from tasks.config.base import StrictModel


class ClaimsError(ValueError):
    """``reports/claims.yaml`` is missing or invalid, or an edit in it does not fit the generated claims (the
    message names the file and the claim)."""


class NotRun(Exception):
    """An input of a claim is missing; the message is the ``not run: <why>`` reason."""


#: What reading a metrics file of an unexpected shape raises; such a claim is ``not run``, not a crash.
MALFORMED = (TypeError, ValueError, KeyError, IndexError, AttributeError)


# ---------------------------------------------------------------- claims


class Precondition(StrictModel):
    """What must hold before a claim's arms can speak to it: the number at ``value`` (``<metrics file>/<dotted.key>``,
    e.g. ``pretrain/heldout_gap_to_unigram_nats``) is ``>= at_least`` and/or ``<= at_most`` (``what``: in words)."""

    what: str = Field(min_length=1)
    value: str = Field(pattern=r"^[a-z0-9_]+/[A-Za-z0-9_.-]+$")
    at_least: float | None = None
    at_most: float | None = None

    @field_validator("at_most")
    @classmethod
    def _has_a_bound(cls, at_most, info):
        if at_most is None and info.data.get("at_least") is None:
            raise ValueError("a precondition needs at_least or at_most")
        return at_most

    def check(self, metrics: Metrics) -> str | None:
        """``None`` when it holds; else why not, with the measured value. Raises ``NotRun`` if the value is absent."""
        name, key = self.value.split("/", 1)
        measured = float(dig(metrics.get(name), key.split("."), f"metrics/{name}.json"))
        low_ok = self.at_least is None or measured >= self.at_least
        high_ok = self.at_most is None or measured <= self.at_most
        if low_ok and high_ok:
            return None
        bound = f">= {self.at_least:g}" if not low_ok else f"<= {self.at_most:g}"
        return f"{self.what} ({self.value} {bound}), measured {measured:.4g}"


#: The kinds of evidence a claim gives (the report counts verdicts per kind): intrinsic (does the component
#: predict what it models: MLM loss), extrinsic (does it help a downstream task), behavioural (do targeted
#: minimal pairs or probes show the capability), operational (calibration, latency, memory, cost), and data
#: (the integrity of the evaluation data itself: the leakage audit).
EVIDENCE = ("intrinsic", "extrinsic", "behavioural", "operational", "data")
#: The Holm families, in the report's order: the claims the question names (primary), then the rest.
FAMILIES = ("primary", "secondary")


class Claim(StrictModel):
    """One hand-written claim; ``treatment``/``baseline`` follow the reference grammar of this module."""

    id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]*$")  # a task name (tasks.config.tasks.TaskName) may be in it
    statement: str = Field(min_length=1)
    evidence: Literal[EVIDENCE] = Field(description="the kind of evidence the claim gives (EVIDENCE)")
    kind: Literal["difference", "upper_bound"]
    task: str
    data_slice: str
    metric: str
    treatment: str
    baseline: str
    ablation: str = Field(description="the component removed in the baseline")
    min_effect: float = Field(description="difference: smallest effect that counts; upper_bound: the bound")
    known_confounders: list[str]
    preconditions: list[Precondition] = Field(default_factory=list, description="checked before the verdict; "
                                              "a failed one makes it `not resolvable`")
    family: Literal[FAMILIES] = Field(default="secondary", description="the Holm family (FAMILIES)")
    items: Literal["all", "clean", "overlapping", "semantically_clean"] = Field(
        default="all", description="finetune claims: the test items scored (clean: no text shared with train; "
        "semantically_clean: no semantic match in the pretraining corpus)")

    @field_validator("treatment", "baseline")
    @classmethod
    def _known_prefix(cls, value: str) -> str:
        if value.split("/")[0] not in ("finetune", "probe", "leakage", "pretrain"):
            raise ValueError(f"reference must start with finetune/, probe/, leakage/ or pretrain/, got {value!r}")
        return value


class ClaimsFile(StrictModel):
    """The claims of a run: the experiment's question and its claims (unique ids)."""

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


# ---------------------------------------------------------------- metrics files


class Metrics:
    """Lazy, cached reader of ``metrics/<name>.json``; a missing or broken file raises ``NotRun``.

    ``predictions`` is the finetune stage's folder (``data/finetune``); None: claims use seed-level values only.
    ``tasks`` are the fine-tuning tasks of the run (params.yaml ``tasks``, in order); None: the tasks whose
    ``metrics/finetune/<task>.json`` exists (a unit test's folder), ``tasks.report.tasks_run``.
    """

    def __init__(self, folder: Path, predictions: Path | None = None, tasks: tuple[str, ...] | None = None) -> None:
        self.folder = Path(folder)
        self.predictions = Path(predictions) if predictions is not None else None
        self.tasks = tasks
        self._cache: dict[str, dict] = {}

    def get(self, name: str) -> dict:
        """The parsed ``<folder>/<name>.json``; raises ``NotRun`` if it is absent or not a JSON object."""
        if name not in self._cache:
            path = self.folder / f"{name}.json"
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except FileNotFoundError as err:
                raise NotRun(f"{path} is missing (stage not run)") from err
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
    ``(events, trials)`` for a rate. ``runs`` are ``(name, id, experiment id or "")`` of MLflow runs,
    ``notes`` caveats, ``diverged`` the seeds whose run stayed at chance. ``items`` holds the per-item counts
    of a finetune arm (``tasks.report.items``).
    """

    values: tuple[float, ...]
    units: tuple[str, ...]
    unit_name: str
    source: str
    runs: tuple[tuple[str, str, str], ...] = ()
    notes: tuple[str, ...] = ()
    proportion: tuple[int, int] | None = None
    diverged: tuple[str, ...] = ()
    items: object | None = None
    run_key: str = ""


def resolve(ref: str, metric: str, metrics: Metrics) -> Sample:
    """The ``Sample`` a reference points at; raises ``NotRun`` when the file, run, metric or layer is absent.

    A finetune sample holds seed-level values and its arm's MLflow run; ``tasks.report.items.with_items`` adds
    its test items.
    """
    kind, *rest = ref.split("/")
    if kind == "finetune" and len(rest) == 2 and rest[1] in SELECTED:
        return _finetune_sample(rest[0], selected_run(rest[0], rest[1], metrics), metric, metrics)
    if kind == "finetune" and len(rest) == 4:
        return _finetune_sample(rest[0], "/".join(rest[1:]), metric, metrics)
    if kind == "probe" and len(rest) == 3 and rest[1] in ("layer", "shuffled"):
        from tasks.report.probe_sample import probe_sample  # here: that module builds on this one's Sample

        return probe_sample(rest[0], rest[1], rest[2], metric, metrics)
    if kind == "pretrain" and len(rest) == 2 and rest[0] == "heldout":
        return _heldout_sample(rest[1], metrics)
    if kind == "probe" and len(rest) == 3 and rest[1] == "pairs":
        return _pairs_sample(rest[0], rest[2], metrics)
    if kind == "leakage" and len(rest) >= 2:
        width = 1 if rest[0] == "all" else 2
        if len(rest) in (width + 1, width + 2):
            return _leakage_sample("/".join(rest[:width]), rest[width:-1], rest[-1], metrics)
    raise NotRun(f"malformed reference {ref!r} (see the grammar in tasks/report/claims.py)")


#: ``finetune/<task>/<name>`` -> the key of ``selection`` in metrics/finetune/<task>.json
SELECTED = {"best-arm": "best_arm", "best-baseline": "best_baseline"}


def finetune_run(ref: str, metrics: Metrics) -> tuple[str, str] | None:
    """``(task, run key)`` of a finetune reference (``best-arm``/``best-baseline`` resolved), else None."""
    parts = ref.split("/")
    if parts[0] != "finetune" or len(parts) not in (3, 5):
        return None
    if len(parts) == 3:
        try:
            return parts[1], selected_run(parts[1], parts[2], metrics)
        except (NotRun, KeyError):
            return None
    return parts[1], "/".join(parts[2:])


def selected_run(task: str, name: str, metrics: Metrics) -> str:
    """The run key the finetune stage chose on dev for ``best-arm`` / ``best-baseline``."""
    return str(dig(metrics.get(f"finetune/{task}"), ["selection", SELECTED[name]], f"metrics/finetune/{task}.json"))


def _finetune_sample(task: str, run_key: str, metric: str, metrics: Metrics) -> Sample:
    name = f"finetune/{task}"
    where = f"metrics/{name}.json"
    ablation = ()
    if "@ablation_" in run_key:  # a run from a pretraining ablation arm
        from tasks.report.ablations import ablation_notes  # here: that module builds on this one's NotRun

        ablation = ablation_notes(task, run_key, metrics.get(name))  # NotRun "not computed" when the arms are off
    run = dig(metrics.get(name), ["runs", run_key], where)
    entry = dig(run, [metric], f"{where} runs[{run_key!r}]")
    values = [float(v) for v in dig(entry, ["per_seed"], f"{where} runs[{run_key!r}].{metric}")]
    seeds = entry.get("seeds") or list(range(len(values)))
    if not values:
        raise NotRun(f"{where} runs[{run_key!r}].{metric}.per_seed is empty")
    diverged = tuple(str(s) for s in run.get("diverged_seeds") or [])
    notes = (f"{run_key}: diverged seeds {', '.join(diverged)}",) if diverged else ()
    notes += ablation
    run_id = run.get("mlflow_run_id")
    name = str(run.get("mlflow_run_name") or f"{task}/{run_key}")  # the finetune stage's naming
    mlflow_run = (name, str(run_id), str(run.get("mlflow_experiment_id") or ""))
    return Sample(tuple(values), tuple(str(s) for s in seeds), "seed", where,
                  runs=(mlflow_run,) if run_id else (), notes=notes, diverged=diverged, run_key=run_key)


#: ``pretrain/heldout/<model>`` -> the masked-token accuracy key of metrics/pretrain.json
HELDOUT = {"mlm": "heldout_mlm_accuracy", "unigram": "heldout_unigram_accuracy"}


def _heldout_sample(model: str, metrics: Metrics) -> Sample:
    """Masked-token accuracy on the held-out masks of the pretrained MLM or of the unigram baseline (the same
    masks), as a rate over the masked tokens."""
    where = "metrics/pretrain.json"
    if model not in HELDOUT:
        raise NotRun(f"malformed reference pretrain/heldout/{model} (have: {sorted(HELDOUT)})")
    pretrain = metrics.get("pretrain")
    accuracy = float(dig(pretrain, [HELDOUT[model]], where))
    tokens = int(dig(pretrain, ["heldout_masked_tokens"], where))
    if tokens == 0:
        raise NotRun(f"{where}: 0 held-out masked tokens")
    hits = round(accuracy * tokens)
    note = f"{model}: {hits} of {tokens} held-out masked tokens predicted ({pretrain.get('heldout_blocks')} blocks)"
    return Sample((hits / tokens,), ("heldout",), "masked tokens", where, notes=(note,), proportion=(hits, tokens))


def _pairs_sample(variant: str, phenomenon: str, metrics: Metrics) -> Sample:
    """The 0/1 outcome of every minimal pair of ``phenomenon`` (``all``: every pair) for ``variant``, units =
    pair lines, so two variants pair by pair; a rate, so one arm's CI is Clopper-Pearson."""
    where = "metrics/probe.json minimal_pairs"
    pairs = dig(metrics.get("probe"), ["minimal_pairs"], "metrics/probe.json")
    passed = dig(pairs, ["variants", variant, "passed"], where)
    items = dig(pairs, ["items"], where)
    index = [i for i, item in enumerate(items) if phenomenon in ("all", item["phenomenon"])]
    if not index or len(passed) != len(items):
        raise NotRun(f"{where}: no {phenomenon!r} pairs for {variant} (have: {sorted(pairs.get('phenomena', {}))})")
    values = tuple(float(passed[i]) for i in index)
    hits = int(sum(values))
    table = dig(pairs, ["variants", variant, "all" if phenomenon == "all" else "per_phenomenon"], where)
    mismatched = (table if phenomenon == "all" else table.get(phenomenon, {})).get("length_mismatched", 0)
    notes = (f"{variant}: {hits} of {len(index)} {phenomenon} pairs passed; {mismatched} with unequal token counts",)
    return Sample(values, tuple(str(items[i]["line"]) for i in index), "pair", where, notes=notes,
                  proportion=(hits, len(index)))


def _leakage_sample(eval_set: str, check: list[str], key: str, metrics: Metrics) -> Sample:
    where = "metrics/leakage.json"
    if eval_set.split("/")[0] in AUDIT_CHECKS and not check:
        return _audit_check_sample(*eval_set.split("/"), key, metrics)
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


#: The measurements of the audit itself in metrics/leakage.json: ``{section: {rate key: (events key, trials
#: key)}}`` (counts, not rounded rates, so the Clopper-Pearson interval gets the exact events).
AUDIT_CHECKS = {
    "planted": {"miss_rate": ("missed", "planted")},
    "semantic": {"false_discovery_rate": ("flagged_known_clean", "flagged")},
    "residual": {"rate": ("contaminated_docs", "eval_docs"), "rate_before": ("contaminated_docs_before", "eval_docs")},
}


def _audit_check_sample(section: str, part: str, key: str, metrics: Metrics) -> Sample:
    """A ``planted``, ``residual`` or ``semantic`` reference of the grammar above, as a proportion."""
    where = f"metrics/leakage.json {section}"
    if key not in AUDIT_CHECKS[section] or part != {"residual": "all", "semantic": "review"}.get(section, part):
        raise NotRun(f"malformed reference leakage/{section}/{part}/{key} (see the grammar in tasks/report/claims.py)")
    events_key, trials_key = AUDIT_CHECKS[section][key]
    if part == "all" or section == "semantic":
        parts = [dig(metrics.get("leakage"), [section] + (["review"] if section == "semantic" else []), where)]
    else:  # one variant, or several joined by + (pooled)
        parts = [dig(metrics.get("leakage"), [section, "variants", p], where) for p in part.split("+")]
    entry = {k: sum(int(dig(e, [k], where)) for e in parts) for k in (events_key, trials_key)}
    events, trials = entry[events_key], entry[trials_key]
    if trials == 0:
        raise NotRun(f"{where}: 0 {trials_key} for {part} (nothing to measure)")
    unit = {"planted": "planted docs", "semantic": "flagged review pairs"}.get(section, "eval docs")
    note = f"{events} of {trials} {unit} ({section} {part}, {events_key})"
    if section == "residual":
        note += f"; detector: {parts[0].get('detector', 'not recorded')}"
    return Sample((events / trials,), (part,), unit, where, notes=(note,), proportion=(events, trials))
