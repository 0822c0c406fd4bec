"""The model card (``README.md``) of a released export: what the model is, how to run it as evaluated, how it
was chosen, its test figures with CIs, the verdicts of the claims about it, the data md5s, the params it ran
with, and its intended use and limits. Built from the metrics files only, so it states what was measured."""

from __future__ import annotations

import json

import yaml

PIPELINE_TAG = {"token_classification": "token-classification"}


def card(task: str, export: dict, finetune: dict, claims: list[dict], gate: dict, data_md5: dict[str, str],
         commit: str, params: dict, registered_name: str) -> str:  # fmt: skip
    """The Markdown model card of task ``task``'s export (Hugging Face card front matter first)."""
    run, seed, name = export["run"], export["seed"], export["metric"]
    arm = finetune["runs"][run]
    stats = arm.get(name) or {}
    kind = export["kind"]
    tag = PIPELINE_TAG.get(kind, "text-classification")
    front = {"library_name": "transformers", "pipeline_tag": tag, "tags": ["clozeline", task],
             "model-index": [{"name": registered_name, "results": [{"task": {"type": tag}, "metrics": [
                 {"type": name, "value": round(export["rescored"][name], 6), "name": f"{name} (re-scored export)"}]}]}]}
    agreement = export["agreement"]
    lines = ["---", yaml.safe_dump(front, sort_keys=False).strip(), "---", "",
             f"# {registered_name}: {run}, seed {seed}", "",
             f"The `{task}` model of a clozeline pipeline run ({kind}, source `{finetune.get('source')}`): "
             f"labels {', '.join(f'`{label}`' for label in finetune['labels'])}.", "",
             "## How to run it as it was evaluated", "",
             "Weights, `id2label`/`label2id` and the tokenizer load with the standard classes "
             f"(`{'AutoModelForTokenClassification' if kind == 'token_classification' else 'AutoModelForSequenceClassification'}`, "
             "`AutoTokenizer`, safetensors). What the evaluated model does beyond them is in `config.json` under "
             f"`clozeline`: {recipe_words(export['recipe'])}. `clozeline.predict` applies it:", "",
             "```python", *usage(export["pipeline_task"], kind), "```", "",
             "`transformers.pipeline(\"text-classification\" | \"token-classification\", model=<this folder>)` alone "
             "does **not** reproduce it (another pooling or head, the head-only cut, subword tags).", "",
             "## How it was chosen (on dev; test never chose)", "",
             f"- arm `{run}`: the best mean dev score over seeds of the arms (`selection.best_arm`);",
             f"- seed {seed}: {export['seed_rule']}; dev scores {json.dumps(export['dev'])}; model {export['model']};"]
    if export.get("dev_winner_is_baseline"):
        lines.append(f"- on dev a baseline scored higher: `{export['dev_winner']}` {export['dev_winner_score']:.4f} "
                     f"against this arm's {export['arm_dev_score']:.4f}. No encoder beat it on dev; this encoder is "
                     "shipped because the claims are about it, and the alias gate below says whether to use it.")
    if export.get("baseline"):
        base = export["baseline"]
        lines.append(f"- that baseline is shipped too, in `baseline/` (scikit-learn in skops format, no pickle; "
                     f"`clozeline.baseline.load_baseline`): {name} {fmt(base['rescored'].get(name))} re-scored, "
                     f"{base['agreement']['disagree']} of {base['agreement']['items']} items disagreeing with its "
                     "evaluation.")
    lines += ["", f"## Test figures ({agreement['items']} test items)", "",
              "| what | value |", "| --- | --- |",
              f"| {name} of the arm, mean over {stats.get('n', '?')} seeds [95% t CI] | {fmt(stats.get('mean'))} "
              f"[{fmt(stats.get('ci95_low'))}, {fmt(stats.get('ci95_high'))}] |",
              f"| {name} of seed {seed}, as evaluated | {fmt(export['evaluated'][name])} |",
              f"| {name} of this export, re-scored from raw text in a fresh process | {fmt(export['rescored'][name])} |",
              f"| items where the export disagrees with the evaluation | {agreement['disagree']} of {agreement['items']} "
              f"(max probability gap {agreement['max_abs_probability_difference']:.2g}, tolerance "
              f"{agreement['probability_tolerance']:g}) |", *cost_rows(export.get("operational") or {}), "",
              "## Claims about this model (reports/claims.md)", ""]
    lines += claim_rows(claims)
    lines += ["", f"Registry alias gate: {gate['reason']}.", "", "## Data and code", "",
              *(f"- `{path}`: md5 `{md5}`" for path, md5 in sorted(data_md5.items())),
              *([] if data_md5 else ["- data md5: not recorded (no dvc.lock entry for the finetune stage)"]),
              f"- git commit: `{commit}`", "", "## Params (as the finetune stage ran, from dvc.lock)", "",
              "```yaml", yaml.safe_dump(params or {"not recorded": True}, sort_keys=True).strip(), "```", "",
              "## Intended use and limits", "", *limits(task, export, finetune), ""]
    return "\n".join(lines)


def fmt(value) -> str:
    return f"{value:.4f}" if isinstance(value, int | float) else "n/a"


def recipe_words(block: dict) -> str:
    """The recipe in words: pooling and cut (a classifier) or windows (a tagger)."""
    if block["kind"] == "token_classification":
        return (f"one tag per word, read at its first subword in the window where it has the most context "
                f"(windows of {block['window_tokens']} tokens, {block['window_overlap_tokens']} repeated)")
    cut = (f"the first {block['head_tokens']} and the last tokens" if block["truncation"] == "head_tail"
           else "longest text first" if block["truncation"] == "longest_first" else "the first tokens")
    return f"{block['pooling']} pooling, inputs cut to {block['max_seq_len_tokens']} tokens keeping {cut}"


def usage(task: str, kind: str) -> list[str]:
    call = {"token_classification": 'tag("john visited paris")  # one {word, entity, score, index} per word',
            "pair_classification": 'model({"text": "a premise", "text_pair": "a hypothesis"})'}
    return ["import clozeline.predict  # registers the pipeline", "from transformers import pipeline", "",
            f'{"tag" if kind == "token_classification" else "model"} = pipeline("{task}", model="<this folder>")',
            call.get(kind, 'model("a document to classify")  # [{"label": ..., "score": ...}]')]


def cost_rows(entry: dict) -> list[str]:
    batch = entry.get("batch") or {}
    one = batch.get("1") or {}
    if not one:
        return []
    return [f"| latency from raw text, batch 1, {entry.get('device')} with {entry.get('threads')} threads | "
            f"p50 {one['p50_ms_per_doc']:.3g} ms, p95 {one['p95_ms_per_doc']:.3g} ms per doc |",
            f"| parameters, size on disk | {entry.get('parameters'):,}, {entry.get('size_on_disk_mib', 0):.1f} MiB |"]


def claim_rows(claims: list[dict]) -> list[str]:
    if not claims:
        return ["No claim of the report concerns this task."]
    rows = ["| claim | verdict | difference [CI] |", "| --- | --- | --- |"]
    for claim in claims:
        diff = claim.get("difference")
        ci = (f" [{claim['difference_ci_low']:.4f}, {claim['difference_ci_high']:.4f}]"
              if "difference_ci_low" in claim else "")  # fmt: skip
        rows.append(f"| `{claim['id']}`: {claim['statement']} | {claim['verdict']} | "
                    f"{fmt(diff)}{ci if diff is not None else ''} |")
    return rows


def limits(task: str, export: dict, finetune: dict) -> list[str]:
    docs = finetune.get("docs") or {}
    return ["- Intended for research on this pipeline's data: the task's labels and the source's domain and "
            "language; scores outside that distribution are unmeasured.",
            f"- Trained on a capped sample of the train split ({json.dumps(docs)}); one seed of the arm, chosen "
            "on dev: the arm's seed spread is in the CI above.",
            "- The test figures hold for the test split of this run only; leakage, duplicates and truncation are "
            "measured in the claim table's confounders.",
            "- Probabilities are softmax outputs; see the report's calibration table before reading them as "
            "frequencies."]
