"""What the model card states about the shipped model, derived from the metrics files only: the base model and its
licence (``metrics/export/<task>.json`` ``base_model``, read by the export stage from the files that ship with
it), the train data actually used (``metrics/finetune/<task>.json`` ``docs``), the baselines that score above it
on the same test set, the claims whose treatment is this arm, and the limits in sentences."""

from __future__ import annotations

#: ``finetune/<task>/<name>`` -> the key of ``selection`` naming the run (tasks/report/claims/grammar.py's grammar).
SELECTED = {"best-arm": "best_arm", "best-baseline": "best_baseline"}
NOT_RECORDED = "not recorded (rerun the export stage: it records what the encoder started from)"


def unit(kind: str) -> str:
    """What one test item is: a sentence for a tagger, else a document."""
    return "sentences" if kind == "token_classification" else "documents"


def base_lines(export: dict) -> list[str]:
    """Markdown bullets: base model, licence and size of the shipped model."""
    base = export.get("base_model")
    if not base:
        return [f"- **Base model**: {NOT_RECORDED}."]
    package, arch = base.get("package"), base.get("architecture") or {}
    origin = f"{base['origin']}"
    if base.get("based_on"):
        origin += f"; its config names `{base['based_on']}` as the model it was built from"
    if package:
        origin += f"; shipped in the package `{package['name']}` {package['version']}"
    lines = [
        f"- **Base model**: `{base['name']}` ({origin}). The arm shipped is `{export['run']}` (variant "
        f"`{base['variant']}`)"
        + ("; it is not clozeline's own pretrained encoder." if base["variant"] in ("reference", "adapted") else ".")
    ]
    licence = f"- **Licence of the base model**: `{base['licence']}` ({base['licence_source']})"
    if package:
        licence += f"; the package that ships it is licensed `{package['licence']}` (its metadata)"
    lines.append(licence + ". This model is derived from it, and the terms of the data it was fine-tuned on apply too.")
    operational = export.get("operational") or {}
    size = f"{operational['parameters']:,} parameters" if operational.get("parameters") else "parameters not recorded"
    shape = (
        f" ({arch['model_type']}, {arch['layers']} layers, hidden size {arch['hidden']}, "
        f"{arch['vocabulary']:,}-token vocabulary)"
        if arch
        else ""
    )
    disk = f", {operational['size_on_disk_mib']:.1f} MiB of safetensors" if operational.get("size_on_disk_mib") else ""
    lines.append(f"- **Size**: {size}{shape}{disk}.")
    return lines


def data_line(export: dict, finetune: dict) -> str:
    """One Markdown bullet: the train, dev and test items the shipped model's arm read, and how inputs were cut."""
    base = export.get("base_model") or {}
    docs = (finetune.get("docs") or {}).get(base.get("tokenization") or "")
    if not docs:
        return f"- **Train data**: {NOT_RECORDED}."
    train, dev, test, what = docs["train"], docs["dev"], docs["test"], unit(export["kind"])
    left = (
        f", {train['docs_dropped_by_cap']:,} left out by `{export.get('train_cap_param', 'max_train_docs')}` "
        "(a seeded sample, drawn per seed)"
        if train["docs_dropped_by_cap"]
        else ""
    )
    return (
        f"- **Train data**: {train['docs_kept']:,} of the {train['docs_available']:,} train {what} of source "
        f"`{finetune.get('source')}`{left}, {cut_words(export['recipe'])}; {dev['docs_kept']:,} of "
        f"{dev['docs_available']:,} dev {what} chose the epoch, the arm and the seed; the test figures below are "
        f"on {test['docs_kept']:,} of {test['docs_available']:,} test {what}."
    )


def cut_words(block: dict) -> str:
    """How the inputs were cut, in words (a classifier's token cut, a tagger's windows)."""
    if block["kind"] == "token_classification":
        return (
            f"each sentence read in windows of {block['window_tokens']} tokens ({block['window_overlap_tokens']} "
            "repeated between windows)"
        )
    keep = (
        f"the first {block['head_tokens']} and the last tokens"
        if block["truncation"] == "head_tail"
        else "the longer text cut first"
        if block["truncation"] == "longest_first"
        else "the first tokens"
    )
    return f"each cut to {block['max_seq_len_tokens']} tokens keeping {keep}"


def beating_baselines(export: dict, finetune: dict, claims: list[dict] | None = None) -> list[dict]:
    """The baselines of the run (every comparator and all-data reference, ``runs[<key>].baseline`` set) whose
    test score (mean over their seeds) is above the shipped model's re-scored one, on the same test items:
    ``{run, name, input, score, seeds, shipped, arm_difference}``, best first. ``name`` is the finetune
    stage's ``described_as`` (the baseline's name for older metrics); ``arm_difference`` the report's paired
    estimate of (the shipped arm over all its seeds - this baseline) with its interval, from the ``claims``'
    ``baselines_above`` (``metrics/report.json``; None when the report has none for this baseline)."""
    metric = export["metric"]
    shipped = export["rescored"][metric]
    intervals = {b["run"]: b for c in claims or [] for b in c.get("baselines_above") or []}
    found = []
    for key, run in (finetune.get("runs") or {}).items():
        score = (run.get(metric) or {}).get("mean") if run.get("baseline") else None
        if score is not None and score > shipped:
            found.append(
                {
                    "run": key,
                    "name": run.get("described_as") or run["baseline"],
                    "input": run.get("input", ""),
                    "score": score,
                    "seeds": (run.get(metric) or {}).get("n"),
                    "shipped": shipped,
                    "arm_difference": _interval(intervals.get(key)),
                }
            )
    return sorted(found, key=lambda b: -b["score"])


def _interval(found: dict | None) -> dict | None:
    """``{difference, ci_low, ci_high, arm}`` of a report ``baselines_above`` record, or None without one."""
    if not found or found.get("difference") is None:
        return None
    return {k: found[k] for k in ("difference", "ci_low", "ci_high")} | {"arm": found["best_arm"]}


def baseline_sentence(beat: dict, export: dict) -> str:
    """One baseline that beats the shipped model, with both scores, in one sentence."""
    seeds = f", mean of {beat['seeds']} seeds" if beat["seeds"] and beat["seeds"] > 1 else ""
    diff = beat.get("arm_difference")
    paired = (
        f"; the claim table puts the arm over all its seeds minus this baseline at {diff['difference']:+.3f} "
        f"[{diff['ci_low']:+.3f}, {diff['ci_high']:+.3f}] (paired by test item)"
        if diff
        else ""
    )
    return (
        f"{beat['name']} (`{beat['run']}`: {beat['input']}) scores {export['metric']} {beat['score']:.4f}{seeds} "
        f"against this model's {beat['shipped']:.4f} (seed {export['seed']}, re-scored) on the same "
        f"{export['agreement']['items']:,} test {unit(export['kind'])}{paired}"
    )


def claim_runs(ref: str, task: str, selection: dict) -> list[str]:
    """The run keys a finetune reference names (``best-arm``/``best-baseline`` resolved through ``selection``;
    both runs of each side of a gap ``<a> - <b>``); none for another task or stage."""
    first, _, second = ref.partition(" - ")
    parts = first.split("/")
    if parts[:2] != ["finetune", task]:
        return []
    keys = ["/".join(parts[2:])] + ([second] if second else [])
    return [selection.get(SELECTED[k], k) if k in SELECTED else k for k in keys]


def about_this_arm(claims: list[dict], export: dict, finetune: dict) -> tuple[list[dict], list[dict]] | None:
    """``(claims whose treatment names the shipped run, the task's other claims)``, or None when the report
    records no claim's ``treatment`` (a ``metrics/report.json`` of an older version: which arm each claim is
    about is unknown)."""
    if claims and not any("treatment" in c for c in claims):
        return None
    selection = finetune.get("selection") or {}
    mine = [c for c in claims if export["run"] in claim_runs(str(c.get("treatment", "")), export["task"], selection)]
    return mine, [c for c in claims if c not in mine]


def verdict_words(claim: dict) -> str:
    """The verdict, with its reason when it is ``not resolvable`` or ``not run``."""
    verdict = claim.get("verdict", "not run")
    if verdict not in ("not resolvable", "not run"):
        return verdict
    reason = claim.get("reason") or f"{verdict}: reason not in metrics/report.json (rerun the report stage)"
    return reason if reason.startswith(verdict) else f"{verdict}: {reason}"


def limits(export: dict, finetune: dict, beaten: list[dict]) -> list[str]:
    """The intended use and the limits, as sentences."""
    what, name = unit(export["kind"]), export["metric"]
    stats = (finetune["runs"][export["run"]].get(name)) or {}
    out = [
        f"- Intended for research on this pipeline's data: the {len(finetune['labels'])} labels of task "
        f"`{export['task']}` on source `{finetune.get('source')}`, its domain and language. Scores on other "
        "text are unmeasured."
    ]
    if stats.get("n"):
        out.append(
            f"- This is one seed ({export['seed']}) of the arm, chosen on dev. Over its {stats['n']} seeds the "
            f"arm scores {name} {stats['mean']:.4f} on test (95% t CI {fmt(stats.get('ci95_low'))} to "
            f"{fmt(stats.get('ci95_high'))}), so a retrained copy may land anywhere in that range."
        )
    out += truncation_limit(export, finetune)
    out.extend(f"- A simpler model does better on this test set: {baseline_sentence(b, export)}." for b in beaten)
    out.append(
        f"- The test figures hold for this run's {export['agreement']['items']:,} test {what} only. Leakage, "
        "duplicates and truncation are measured among the claim table's confounders (reports/claims.md)."
    )
    if export["kind"] == "token_classification":
        out.append(
            "- It tags words. A string is split with punctuation as separate words (`clozeline.entities`), "
            "which can differ from the training corpus's own tokenization (user handles, URLs, contractions); "
            "entities are read in strict IOB2, as the test score read them."
        )
    out.append(
        "- Probabilities are softmax outputs; read the report's calibration table before taking them as frequencies."
    )
    return out


def truncation_limit(export: dict, finetune: dict) -> list[str]:
    """A sentence on how many test documents the input cut shortened, from the seed's ``accuracy_by_length``."""
    seed = ((finetune["runs"][export["run"]].get("details") or {}).get("per_seed") or {}).get(str(export["seed"]))
    by_length = ((seed or {}).get("details") or {}).get("accuracy_by_length")
    if not by_length:
        return []
    cut, whole = by_length["truncated"], by_length["not_truncated"]
    total = cut["docs"] + whole["docs"]
    rest = f"{fmt(whole['accuracy'])} on the rest" if whole["docs"] else "none was short enough to be read whole"
    return [
        f"- {cut['docs']:,} of the {total:,} test documents are longer than the "
        f"{export['recipe']['max_seq_len_tokens']}-token input and were read cut (accuracy "
        f"{fmt(cut['accuracy'])} on them; {rest}): the model never saw the middle of a long text."
    ]


def fmt(value) -> str:
    return f"{value:.4f}" if isinstance(value, int | float) else "n/a"
