"""The claim set of a run: the standard claims generated for the tasks of ``params.yaml``, then what
``reports/claims.yaml`` adds, overrides or drops.

``standard_claims.yaml`` (beside this module) holds the standard claims as templates: one per claim of the
pretraining, probe and leakage stages, and one per claim of each task kind (``cls``: classification and pair
classification, ``ner``: token classification), filled in for every task of that kind with its name, source,
headline metric and learning-curve sizes. ``reports/claims.yaml`` holds only what a user writes:

- ``question``: the experiment's question (default: the standard one);
- ``claims``: an entry whose ``id`` is a standard claim's replaces the fields it gives (a statement, a
  ``min_effect``, a confounder list) and keeps its place; any other entry is a whole new claim, appended;
- ``drop``: ids of standard claims to leave out.

Regeneration never touches the file, so an edit survives a change of tasks; an override or drop of an id that
is no longer generated is an error naming it (``ClaimsError``), never silently ignored.

``scripts/show_claims.py`` prints the claims a report would evaluate, as YAML, before any run: what to read
before writing an override.
"""

from __future__ import annotations

import difflib
from pathlib import Path

import yaml
from pydantic import ValidationError

from tasks.config.model.report import ReportSetup
from tasks.config.tasks import MODULE, TaskSpec
from tasks.report.claims.grammar import Claim, ClaimsError, ClaimsFile

TEMPLATE = Path(__file__).with_name("standard_claims.yaml")
#: A headline metric in words (``tasks.<name>.metric``).
METRIC_WORDS = {
    "macro_f1": "macro-F1",
    "accuracy": "accuracy",
    "entity_f1": "entity F1",
    "entity_precision": "entity precision",
    "entity_recall": "entity recall",
}
USER_KEYS = ("question", "claims", "drop")
#: A task kind in the standard question's words (``{task_kinds}``).
KIND_WORDS = {
    "classification": "classification",
    "pair_classification": "pair classification",
    "token_classification": "NER",
}


def claim_set(path: Path, setup: ReportSetup) -> ClaimsFile:
    """The run's claims: the standard claims for ``setup.tasks`` with ``path`` (``reports/claims.yaml``)
    applied. Raises ``ClaimsError`` naming the file and the claim for an unreadable file, an unknown key, a
    drop or an override that names no standard claim, a duplicate id or an invalid field."""
    user = read_user(path)
    standard = standard_claims(setup)
    merged = {claim["id"]: claim for claim in standard["claims"]}
    overridden = set()
    for entry in user["claims"]:
        cid = entry["id"]
        if cid in overridden:
            raise ClaimsError(f"{path}: claim {cid!r} is written twice")
        overridden.add(cid)
        merged[cid] = {**merged.get(cid, {}), **entry}
    standard_ids = sorted(claim["id"] for claim in standard["claims"])
    for cid in user["drop"]:
        if cid in overridden:
            raise ClaimsError(f"{path}: drop: {cid!r} is also overridden in claims: keep one of the two")
        if user["drop"].count(cid) > 1:
            raise ClaimsError(f"{path}: drop: {cid!r} is listed twice")
        if cid not in merged:
            raise ClaimsError(
                f"{path}: drop: {cid!r} is not a standard claim of this run's tasks ("
                f"{did_you_mean(cid, standard_ids)}have: {standard_ids})"
            )
        del merged[cid]
    claims = [validated(claim, path, standard_ids) for claim in merged.values()]
    if not claims:
        raise ClaimsError(f"{path}: no claims (every standard claim dropped and none written)")
    return ClaimsFile(question=user["question"] or standard["question"], claims=claims)


def read_user(path: Path) -> dict:
    """``reports/claims.yaml`` as ``{question, claims, drop}`` (absent keys empty); raises ``ClaimsError``."""
    try:
        raw = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    except FileNotFoundError as err:
        raise ClaimsError(f"{path}: file not found") from err
    except yaml.YAMLError as err:
        raise ClaimsError(f"{path}: invalid YAML: {err}") from err
    if not isinstance(raw, dict) or set(raw) - set(USER_KEYS):
        extra = sorted(set(raw) - set(USER_KEYS)) if isinstance(raw, dict) else type(raw).__name__
        raise ClaimsError(f"{path}: expected a mapping of {', '.join(USER_KEYS)}, got {extra}")
    claims, drop = raw.get("claims") or [], raw.get("drop") or []
    if not isinstance(claims, list) or not all(isinstance(c, dict) and isinstance(c.get("id"), str) for c in claims):
        raise ClaimsError(f"{path}: claims: expected a list of mappings, each with an id")
    if not isinstance(drop, list) or not all(isinstance(cid, str) for cid in drop):
        raise ClaimsError(f"{path}: drop: expected a list of claim ids")
    return {"question": raw.get("question"), "claims": claims, "drop": drop}


def validated(raw: dict, path: Path, standard_ids: list[str]) -> Claim:
    """One merged claim as a ``Claim``; raises ``ClaimsError`` naming where it came from and each bad field (and,
    for a new claim, the standard id it may have meant to override)."""
    try:
        return Claim.model_validate(raw)
    except ValidationError as err:
        cid, hint = raw["id"], did_you_mean(raw["id"], standard_ids)
        new = f" (no standard claim of this run's tasks{f', {hint}A' if hint else ': a'} new claim needs every field)"
        where = f"{path}: claim {cid!r}" + (" (a standard claim, overridden)" if cid in standard_ids else new)
        fields = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in err.errors())
        raise ClaimsError(f"{where}: {fields}") from None


def did_you_mean(cid: str, ids: list[str]) -> str:
    """``"did you mean '<id>'? "`` for the id of ``ids`` closest to a mistyped ``cid`` (difflib), else ``""``."""
    close = difflib.get_close_matches(cid, ids, n=1, cutoff=0.85)
    return f"did you mean {close[0]!r}? " if close else ""


def standard_claims(setup: ReportSetup) -> dict:
    """``{question, claims}``: the templates of ``standard_claims.yaml`` filled in for ``setup.tasks``, in
    template order (a template for a task kind gives one claim per task of that kind, in params order). Raises
    ``ClaimsError`` when two tasks' claims come out with one id."""
    raw = yaml.safe_load(TEMPLATE.read_text(encoding="utf-8"))
    common = {"eval_sources": " and ".join(dict.fromkeys(spec.source for spec in setup.tasks.values())) or "none"}
    claims, seen = [], {}
    for template in raw["claims"]:
        body = {key: value for key, value in template.items() if key not in ("for", "gate")}
        for claim in [fill(body, common | values) for values in expansions(template["for"], setup)]:
            if claim["id"] in seen:  # task names with dashes: news and news-clean give ...-news-clean twice
                raise ClaimsError(
                    f"params.yaml tasks: {seen[claim['id']]!r} and {claim['task']!r} both give the "
                    f"standard claim {claim['id']!r}: rename one"
                )
            seen[claim["id"]] = claim["task"]
            claims.append(claim)
    kinds = " and ".join(dict.fromkeys(KIND_WORDS[spec.kind] for spec in setup.tasks.values())) or "tasks"
    return {"question": raw["question"].format(task_kinds=kinds), "claims": claims}


def gate_claims(setup: ReportSetup) -> dict[str, str]:
    """``{task: id}`` of each task's gate claim (the standard claim marked ``gate: true``): the claim the
    release gate needs ``supported`` for a task ``release.gate_claims`` does not list."""
    raw = yaml.safe_load(TEMPLATE.read_text(encoding="utf-8"))
    gates = {}
    for template in raw["claims"]:
        if template.get("gate"):
            gates |= {values["task"]: fill(template["id"], values) for values in expansions(template["for"], setup)}
    return gates


def expansions(scope: str, setup: ReportSetup) -> list[dict]:
    """The placeholder values of each claim a template with ``for: scope`` gives (``once``: one, no values)."""
    if scope == "once":
        return [{}]
    if scope in ("cls", "ner"):
        return [task_values(name, spec, setup) for name, spec in setup.tasks.items() if MODULE[spec.kind] == scope]
    if scope == "sizes":
        out = []
        for name, spec in setup.tasks.items():
            recipe = setup.recipes[spec.recipe]
            full = [recipe.max_train_docs] if recipe.train_sizes and recipe.max_train_docs else []
            for size in [*recipe.train_sizes, *full]:
                note = " (at this size the curve's arms are the full-size runs)" if size in full else ""
                out.append(task_values(name, spec, setup) | {"n": size, "full_note": note})
        return out
    raise ValueError(f"{TEMPLATE}: unknown for: {scope!r} (once, cls, ner, sizes)")


def task_values(name: str, spec: TaskSpec, setup: ReportSetup) -> dict:
    """The placeholders of one task: name, source, headline metric, its words, unit and learning-curve sizes
    (a task without a curve gets ``n_small`` ``<train_sizes>``: its curve claims read ``off``)."""
    recipe = setup.recipes[spec.recipe]
    return {
        "task": name,
        "source": spec.source,
        "metric": spec.headline,
        "metric_words": METRIC_WORDS[spec.metric],
        "unit": "sentences" if MODULE[spec.kind] == "ner" else "docs",
        "n_small": min(recipe.train_sizes) if recipe.train_sizes else "<train_sizes>",
        "n_full": recipe.max_train_docs or "all the",
    }


def fill(node, values: dict):
    """``node`` with ``{placeholder}`` filled in every string (nested lists and mappings too)."""
    if isinstance(node, str):
        return node.format_map(values)
    if isinstance(node, list):
        return [fill(item, values) for item in node]
    if isinstance(node, dict):
        return {key: fill(value, values) for key, value in node.items()}
    return node
