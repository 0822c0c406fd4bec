"""The model card (``README.md``) of a released export: what the model is, how to run it as evaluated, how it
was chosen, its test figures with CIs, the verdicts of the claims about it, the data md5s, the params it ran
with, and its intended use and limits. Built from the metrics files only, so it states what was measured."""

from __future__ import annotations

import yaml

from tasks.release import facts
from tasks.release.facts import fmt

PIPELINE_TAG = {"token_classification": "token-classification"}


def card(
    task: str,
    export: dict,
    finetune: dict,
    claims: list[dict],
    gate: dict,
    data_md5: dict[str, str],
    commit: str,
    params: dict,
    registered_name: str,
    aliases: tuple[str, str],
) -> str:
    """The Markdown model card of task ``task``'s export (Hugging Face card front matter first). ``gate`` is
    ``gate_of``'s with ``beaten_by`` (``facts.beating_baselines``); ``aliases``: (every evaluated version's
    registry alias, the gated one)."""
    lines = [
        *intro_lines(task, export, finetune, registered_name),
        *chosen_lines(export),
        *figure_lines(export, finetune, gate["beaten_by"]),
        *claims_section(claims, export, finetune),
    ]
    lines += [
        "",
        f"Registry: every evaluated version gets the alias `{aliases[0]}` "
        f"(`models:/{registered_name}@{aliases[0]}`); the alias `{aliases[1]}` moves only when the gate "
        f"passes. Gate: {gate['reason']}.",
        "",
        "## Data and code",
        "",
        *(f"- `{path}`: md5 `{md5}`" for path, md5 in sorted(data_md5.items())),
        *([] if data_md5 else ["- data md5: not recorded (no dvc.lock entry for the finetune stage)"]),
        f"- git commit: `{commit}`",
        "",
        "## Params (as the finetune stage ran, from dvc.lock)",
        "",
        "```yaml",
        yaml.safe_dump(params or {"not recorded": True}, sort_keys=True).strip(),
        "```",
        "",
        "## Intended use and limits",
        "",
        *facts.limits(export, finetune, gate["beaten_by"]),
        "",
    ]
    return "\n".join(lines)


def intro_lines(task: str, export: dict, finetune: dict, registered_name: str) -> list[str]:
    """The front matter, the title, what was shipped and how to run it as it was evaluated."""
    name, kind = export["metric"], export["kind"]
    tag = PIPELINE_TAG.get(kind, "text-classification")
    front = {
        "library_name": "transformers",
        "pipeline_tag": tag,
        "tags": ["clozeline", task],
        "model-index": [
            {
                "name": registered_name,
                "results": [
                    {
                        "task": {"type": tag},
                        "metrics": [
                            {
                                "type": name,
                                "value": round(export["rescored"][name], 6),
                                "name": f"{name} (re-scored export)",
                            }
                        ],
                    }
                ],
            }
        ],
    }
    auto = "AutoModelForTokenClassification" if kind == "token_classification" else "AutoModelForSequenceClassification"
    return [
        "---",
        yaml.safe_dump(front, sort_keys=False).strip(),
        "---",
        "",
        f"# {registered_name}: {export['run']}, seed {export['seed']}",
        "",
        f"The `{task}` model of a clozeline pipeline run ({kind}, source `{finetune.get('source')}`): "
        f"labels {', '.join(f'`{label}`' for label in finetune['labels'])}.",
        "",
        "## What was shipped",
        "",
        *facts.base_lines(export),
        facts.data_line(export, finetune),
        "",
        "## How to run it as it was evaluated",
        "",
        f"Weights, `id2label`/`label2id` and the tokenizer load with the standard classes (`{auto}`, "
        "`AutoTokenizer`, safetensors). What the evaluated model does beyond them is in `config.json` under "
        f"`clozeline`: {recipe_words(export['recipe'])}. `clozeline.predict` applies it:",
        "",
        "```python",
        *usage(export["pipeline_task"], kind),
        "```",
        "",
        '`transformers.pipeline("text-classification" | "token-classification", model=<this folder>)` alone '
        "does **not** reproduce it (another pooling or head, the head-only cut, subword tags).",
        "",
    ]


def chosen_lines(export: dict) -> list[str]:
    """How the arm and the seed were chosen on dev, and a baseline that won on dev (and is shipped too)."""
    lines = [
        "## How it was chosen (on dev; test never chose)",
        "",
        f"- arm `{export['run']}`: the best mean dev score over seeds of the arms (`selection.best_arm`);",
        f"- seed {export['seed']}: {export['seed_rule']}; dev scores by seed "
        f"{', '.join(f'{k}: {fmt(v)}' for k, v in export['dev'].items())}; model {export['model']};",
    ]
    if export.get("dev_winner_is_baseline"):
        lines.append(
            f"- on dev a baseline scored higher: `{export['dev_winner']}` {export['dev_winner_score']:.4f} "
            f"against this arm's {export['arm_dev_score']:.4f}. No encoder beat it on dev; this encoder is "
            "shipped because the claims are about it, and the alias gate below says whether to use it."
        )
    if export.get("baseline"):
        base, name = export["baseline"], export["metric"]
        lines.append(
            f"- that baseline is shipped too, in `baseline/` (scikit-learn in skops format, no pickle; "
            f"`clozeline.baseline.load_baseline`): {name} {fmt(base['rescored'].get(name))} re-scored, "
            f"{base['agreement']['disagree']} of {base['agreement']['items']} items disagreeing with its "
            "evaluation."
        )
    return lines


def figure_lines(export: dict, finetune: dict, beaten: list[dict]) -> list[str]:
    """The test figures (the arm over seeds, the evaluated seed, the re-scored export, their agreement, the
    cost), the baselines that beat the model, and the claims section's heading."""
    name, seed, agreement = export["metric"], export["seed"], export["agreement"]
    stats = finetune["runs"][export["run"]].get(name) or {}
    return [
        "",
        f"## Test figures ({agreement['items']} test items)",
        "",
        "| what | value |",
        "| --- | --- |",
        f"| {name} of the arm, mean over {stats.get('n', '?')} seeds [95% t CI] | {fmt(stats.get('mean'))} "
        f"[{fmt(stats.get('ci95_low'))}, {fmt(stats.get('ci95_high'))}] |",
        f"| {name} of seed {seed}, as evaluated | {fmt(export['evaluated'][name])} |",
        f"| {name} of this export, re-scored from raw text in a fresh process | {fmt(export['rescored'][name])} |",
        f"| items where the export disagrees with the evaluation | {agreement['disagree']} of {agreement['items']} "
        f"(max probability gap {agreement['max_abs_probability_difference']:.2g}, tolerance "
        f"{agreement['probability_tolerance']:g}) |",
        *cost_rows(export.get("operational") or {}),
        "",
        "## Baselines on the same test set",
        "",
        *baseline_lines(beaten, export),
        "",
        "## Claims about this model (reports/claims.md)",
        "",
    ]


def baseline_lines(beaten: list[dict], export: dict) -> list[str]:
    """Each baseline of the run that scores above this model on its test set, with both scores; or a line
    saying none does."""
    if not beaten:
        return [
            f"No baseline of this run scores above this model's {export['metric']} "
            f"({fmt(export['rescored'][export['metric']])}) on its test set."
        ]
    return [f"- {facts.baseline_sentence(b, export)}." for b in beaten]


def recipe_words(block: dict) -> str:
    """The recipe in words: pooling and cut (a classifier) or windows (a tagger)."""
    if block["kind"] == "token_classification":
        return (
            f"one tag per word, read at its first subword in the window where it has the most context "
            f"(windows of {block['window_tokens']} tokens, {block['window_overlap_tokens']} repeated)"
        )
    cut = (
        f"the first {block['head_tokens']} and the last tokens"
        if block["truncation"] == "head_tail"
        else "longest text first"
        if block["truncation"] == "longest_first"
        else "the first tokens"
    )
    return f"{block['pooling']} pooling, inputs cut to {block['max_seq_len_tokens']} tokens keeping {cut}"


def usage(task: str, kind: str) -> list[str]:
    call = {
        "token_classification": 'tag("John visited Paris.", aggregation_strategy="simple")  # [{entity_group, '
        "score, word, start, end}]; default: per word {entity, score, index, word, "
        "start, end}",
        "pair_classification": 'model({"text": "a premise", "text_pair": "a hypothesis"})',
    }
    return [
        "import clozeline.predict  # registers the pipeline",
        "from transformers import pipeline",
        "",
        f'{"tag" if kind == "token_classification" else "model"} = pipeline("{task}", model="<this folder>")',
        call.get(kind, 'model("a document to classify")  # [{"label": ..., "score": ...}]'),
    ]


def cost_rows(entry: dict) -> list[str]:
    batch = entry.get("batch") or {}
    one = batch.get("1") or {}
    if not one:
        return []
    return [
        f"| latency from raw text, batch 1, {entry.get('device')} with {entry.get('threads')} threads | "
        f"p50 {one['p50_ms_per_doc']:.3g} ms, p95 {one['p95_ms_per_doc']:.3g} ms per doc |",
        f"| parameters, size on disk | {entry.get('parameters'):,}, {entry.get('size_on_disk_mib', 0):.1f} MiB |",
    ]


def claims_section(claims: list[dict], export: dict, finetune: dict) -> list[str]:
    """The table of the claims about this arm, and a line on the task's other claims."""
    split = facts.about_this_arm(claims, export, finetune)
    if split is None:
        return [
            *claim_rows(claims, export["run"]),
            "",
            "metrics/report.json does not record which arm each claim "
            "is about (a report of an older version): every claim of the task is listed; rerun the report.",
        ]
    mine, others = split
    more = (
        [
            "",
            f"The task's {len(others)} other claims are about other arms (such as clozeline's own pretrained "
            "encoder); they are in reports/claims.md.",
        ]
        if others
        else []
    )
    return claim_rows(mine, export["run"]) + more


def claim_rows(claims: list[dict], run: str) -> list[str]:
    """The claims whose treatment is this arm: statement, verdict (with its reason when not resolvable), the
    difference and its CI."""
    if not claims:
        return [f"No claim of the report has `{run}` (this arm) as its treatment."]
    rows = ["| claim | verdict | difference [CI] |", "| --- | --- | --- |"]
    for claim in claims:
        diff = claim.get("difference")
        ci = (
            f" [{claim['difference_ci_low']:.4f}, {claim['difference_ci_high']:.4f}]"
            if "difference_ci_low" in claim
            else ""
        )
        rows.append(
            f"| `{claim['id']}`: {claim.get('statement', '')} | {facts.verdict_words(claim)} | "
            f"{fmt(diff)}{ci if diff is not None else ''} |"
        )
    return rows
