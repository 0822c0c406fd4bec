"""The claims of a run (``tasks.report.claims.standard``: generated, then ``reports/claims.yaml`` applied) and the
metrics files they point at: validation and the reference grammar that turns a claim's ``treatment`` /
``baseline`` into the values of one arm.

Reference grammar (``treatment`` / ``baseline`` of a claim):

- ``finetune/<task>/<variant>/<mode>/<head>``: the ``per_seed`` values of ``claim.metric`` in
  ``metrics/finetune/<task>.json`` -> ``runs["<variant>/<mode>/<head>"]`` (a baseline is
  ``baseline/<name>/<input>``), with the run's test predictions per seed read back as per-item counts
  (``tasks.report.claims.arms.items``) when the predictions folder is known, so the claim table resamples seeds and test
  items; ``finetune/<task>/best-arm`` and ``finetune/<task>/best-baseline`` name the run the finetune stage
  chose on dev (``selection``). ``<variant>@ablation_<name>/<mode>/<head>`` is the run fine-tuned from the
  pretraining ablation arm ``name`` (``pretrain.ablations``, ``ablation_config``): one pretraining seed; when
  the arms are off, the claim is ``not run: off (enable with ...)`` (``tasks.report.claims.switches``).
  ``claim.items`` (``all``, ``clean``, ``overlapping``) restricts both arms to the test items without / with
  text shared with the train split.
- ``probe/<variant>/layer/<k|last>``: ``claim.metric`` (``separation`` or ``knn_accuracy``) at layer ``k``
  of ``metrics/probe.json`` -> ``models[<variant>]``, one value per probe word (``per_word``);
  ``probe/<variant>/shuffled/<k|last>``: the same on the shuffled-context control (``shuffled_control``).
  A ``separation`` arm carries its words' pairwise cosines (``sentence_cosines``) as ``items``, and the claim's
  CI is the nested bootstrap over words, then sentences (``tasks.report.stats.probe_bootstrap``); otherwise units
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
#: The Holm families, declared before the data, in the report's order: the claims the study's question names
#: (``primary``), the other findings (``findings``), and the integrity checks and positive controls
#: (``integrity``: planted leakage found, the detectors' precision, no leakage left, the MLM beats a unigram model
#: on held-out masks, the reference model separates senses). An integrity check is a precondition of the run, not a
#: finding: the headline counts leave it out, and a failed one is shown apart and named on the claims it affects.
FAMILIES = ("primary", "findings", "integrity")


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
    preconditions: list[Precondition] = Field(
        default_factory=list, description="checked before the verdict; a failed one makes it `not resolvable`"
    )
    family: Literal[FAMILIES] = Field(default="findings", description="the Holm family (FAMILIES)")
    items: Literal["all", "clean", "overlapping", "semantically_clean"] = Field(
        default="all",
        description="finetune claims: the test items scored (clean: no text shared with train; "
        "semantically_clean: no semantic match in the pretraining corpus)",
    )

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
    ``metrics/finetune/<task>.json`` exists (a unit test's folder), ``tasks.report.claims.tasks_run``.
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
    of a finetune arm (``tasks.report.claims.arms.items``).
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
