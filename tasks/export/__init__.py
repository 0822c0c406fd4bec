"""Stage ``export`` (DVC foreach item: a task of ``params.tasks``): the model the finetune stage chose on dev, as
a standard Hugging Face model, re-scored exactly as exported.

1. ``convert.build`` turns the kept model (``data/finetune/<task>/selected/``: the best arm on dev, its best dev
   seed) into ``data/export/<task>/model/``: ``<Arch>ForSequenceClassification`` or
   ``<Arch>ForTokenClassification`` weights in safetensors, ``id2label``/``label2id``, the tokenizer, and the
   evaluated behaviour (mean pooling, head + tail cut, first-subword word tags) in config.json's ``clozeline``
   block, which ``clozeline.predict`` applies with the standard Auto classes and a registered pipeline. What
   the encoder started from (name, licence, origin: ``base_model``) goes into the metrics for the model card.
2. ``rescore`` runs that folder in a fresh process, as a user would (``python -m clozeline.predict``), on the
   raw test text of the docs the run scored, and compares item by item with the run's test predictions
   (``data/finetune/<task>/<run>/seed<k>.test.jsonl``): the same label, every probability within
   ``export.probability_tolerance``. The report makes the task's claims ``not resolvable`` when any item
   disagrees. The per-document timing from raw text is the deployment row of the inference-cost table.
   The rule that makes the labels equal on every device: the finetune stage computes every evaluated (dev and
   test) prediction in fp32 (no autocast, TF32 off on CUDA: ``tasks.common.runtime.device.fp32_predictions``),
   whatever precision its training steps ran in, and the export re-scores in fp32 on the CPU; the metrics
   record both (``evaluated_precision``, ``rescored_precision``). bf16 or TF32 predictions would differ from
   the export's by about 1e-2 relative in the logits, enough to flip near-tied labels among thousands of items.
3. With ``export.log_model`` the export is logged with MLflow's ``transformers`` flavour (signature and input
   example) under the arm's finetune run; the release stage registers it after the report.

Writes ``data/export/<task>/`` (``model/``, ``test_inputs.jsonl``, ``rescored.jsonl``); returns
``metrics/export/<task>.json``.

Modules: ``convert`` (the kept model as a standard Hugging Face folder), ``rescore`` (the fresh-process
re-scoring), ``base_model`` (what the exported encoder started from, for the model card).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import shutil
from pathlib import Path
from typing import Any

from clozeline.predict import ExportError, load
from tasks.config.model.export import ExportParams
from tasks.config.paths import Paths
from tasks.export import base_model, convert, rescore

MIB = 2**20
#: How ``rescore`` computes the export's predictions (``clozeline.predict``: the CPU, no autocast).
RESCORED_PRECISION = "fp32 on the CPU"
BASELINE = "selected_baseline"  # data/finetune/<task>/: the TF-IDF baseline best on dev (tasks/finetune/selected.py)


def run(cfg: ExportParams, paths: Paths, log: Any, item: str) -> dict:
    """Export, re-score and log the model task ``item`` kept; returns the metrics of the contract."""
    spec = cfg.tasks[item]
    finetune = read_finetune(paths.metrics, item)
    selected = paths.stage_data("finetune") / item / convert.SELECTED
    record = convert.read_selected(selected)
    out = paths.stage_data("export") / item
    shutil.rmtree(out, ignore_errors=True)
    folder = out / "model"
    block = convert.build(selected, folder, spec.kind, (cfg.ner_window_tokens, cfg.ner_window_overlap_tokens))
    labels = list(finetune["labels"])
    if list(record["labels"]) != labels:
        raise ValueError(
            f"export: {selected}: labels {record['labels']} are not metrics/finetune/{item}.json's {labels}"
        )
    evaluated = rescore.read_jsonl(paths.stage_data("finetune") / item / record["predictions"])
    inputs = out / "test_inputs.jsonl"
    raw = rescore.raw_inputs(paths.data, spec.source, spec.kind, [r["doc_id"] for r in evaluated])
    inputs.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in raw), encoding="utf-8")
    batch = cfg.batch_size if spec.kind != "token_classification" else None
    rescored, info = rescore.run_predict(folder, inputs, out / "rescored.jsonl", labels, cfg.threads, batch)
    agreement = rescore.compare(evaluated, rescored, labels, cfg.probability_tolerance)
    weights = sorted(folder.glob("*.safetensors"))
    pipe = load(folder, labels)  # this process too: parameter count, and the MLflow model
    parameters = sum(p.numel() for p in pipe.model.parameters())
    operational = rescore.timing(rescored, info, batch, parameters, sum(f.stat().st_size for f in weights) / MIB)
    gold = [r["gold"] for r in evaluated]
    by_id = {r["doc_id"]: r["pred"] for r in rescored}
    metrics = {
        "task": item,
        "kind": spec.kind,
        "run": record["run"],
        "seed": record["seed"],
        "seed_rule": record["seed_rule"],
        "model": record["model"],
        "dev": record["dev"],
        "dev_winner": record["dev_winner"],
        "dev_winner_is_baseline": record["dev_winner"].startswith("baseline/"),
        "dev_winner_score": record.get("dev_winner_score"),
        "arm_dev_score": record.get("arm_dev_score"),
        "folder": folder.as_posix(),
        "pipeline_task": str(pipe.task),
        "recipe": block,
        "metric": spec.headline,
        "agrees": agreement["disagree"] == 0,
        "agreement": agreement,
        "evaluated_precision": record.get("prediction_precision", "not recorded"),
        "rescored_precision": RESCORED_PRECISION,
        "evaluated": rescore.scores(spec.kind, gold, [r["pred"] for r in evaluated], labels),
        "rescored": rescore.scores(spec.kind, gold, [by_id.get(r["doc_id"]) or blank(r) for r in evaluated], labels),
        "operational": operational,
        "files": digests(folder),
    }
    baseline = paths.stage_data("finetune") / item / BASELINE
    if baseline.is_dir():  # the TF-IDF baseline won on dev: shipped too, in skops format, and re-scored the same way
        metrics["baseline"] = export_baseline(
            baseline, out, inputs, labels, cfg, spec.kind, paths.stage_data("finetune") / item
        )
    metrics["base_model"] = base(record["variant"], paths.models, pipe.model.config)
    metrics["train_cap_param"] = f"finetune.recipes.{spec.recipe}.max_train_docs"
    metrics["mlflow"] = log_model(cfg, log, pipe, finetune, record["run"], raw[0], item)
    log.info(summary(metrics))
    return metrics


def export_baseline(
    source: Path, out: Path, inputs: Path, labels: list[str], cfg: ExportParams, kind: str, predictions: Path
) -> dict:
    """Copy the kept baseline to ``<out>/baseline/``, re-score it in a fresh process on the same raw test text
    and compare with its test predictions; returns ``run``, ``folder``, ``agrees``, ``agreement``,
    ``evaluated``, ``rescored``, ``operational`` and ``files``."""
    folder = out / "baseline"
    shutil.copytree(source, folder)
    record = json.loads((folder / "baseline.json").read_text(encoding="utf-8"))
    evaluated = rescore.read_jsonl(predictions / record["predictions"])
    rescored, info = rescore.run_predict(folder, inputs, out / "baseline_rescored.jsonl", labels, cfg.threads, None)
    agreement = rescore.compare(evaluated, rescored, labels, cfg.probability_tolerance)
    gold, by_id = [r["gold"] for r in evaluated], {r["doc_id"]: r["pred"] for r in rescored}
    size = sum(f.stat().st_size for f in folder.glob("*.skops")) / MIB
    return {
        "run": record["run"],
        "folder": folder.as_posix(),
        "agrees": agreement["disagree"] == 0,
        "agreement": agreement,
        "evaluated": rescore.scores(kind, gold, [r["pred"] for r in evaluated], labels),
        "rescored": rescore.scores(kind, gold, [by_id.get(r["doc_id"], "") for r in evaluated], labels),
        "operational": rescore.timing(rescored, info, None, None, size),
        "files": digests(folder),
    }


def base(variant: str, models: Path, config: Any) -> dict:
    """``base_model.describe`` of the arm's variant, with the exported encoder's ``architecture``
    (``model_type``, ``layers``, ``hidden``, ``vocabulary``) from its config."""
    return {
        **base_model.describe(variant, models),
        "architecture": {
            "model_type": config.model_type,
            "layers": config.num_hidden_layers,
            "hidden": config.hidden_size,
            "vocabulary": config.vocab_size,
        },
    }


def read_finetune(folder: Path, item: str) -> dict:
    """``metrics/finetune/<item>.json``; raises ``FileNotFoundError`` naming it."""
    path = Path(folder) / "finetune" / f"{item}.json"
    if not path.is_file():
        raise FileNotFoundError(f"export: {path} not found (run finetune@{item} first)")
    return json.loads(path.read_text(encoding="utf-8"))


def blank(evaluated: dict) -> list[str] | str:
    """What an unscored item counts as: no label (a tagger: ``O`` on every word)."""
    return ["O"] * len(evaluated["pred"]) if isinstance(evaluated["pred"], list) else ""


def digests(folder: Path) -> dict[str, str]:
    """``{file name: sha256}`` of every file of the export (the release stage checks its copy against them)."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()}


def log_model(
    cfg: ExportParams, log: Any, pipe: Any, finetune: dict, run_key: str, example: dict, item: str
) -> dict | None:
    """Log the export with the transformers flavour under the arm's MLflow run (the stage's own run when the
    finetune stage ran without tracking); ``{model_uri, run_id}``, or None without tracking or ``log_model``."""
    if not cfg.log_model:
        return None
    arm_run = (finetune.get("runs", {}).get(run_key) or {}).get("mlflow_run_id")
    sample: str | dict[str, Any]
    if "words" in example:
        sample = " ".join(example["words"])
    elif "text_pair" in example:
        sample = {"text": example["text"], "text_pair": example["text_pair"]}
    else:
        sample = example["text"]
    requirements = [f"{name}=={importlib.metadata.version(name)}" for name in ("torch", "transformers", "tokenizers")]
    return log.transformers_model(pipe, f"clozeline-{item}", arm_run, [sample], requirements)


def summary(metrics: dict) -> str:
    """One progress line: the run and seed exported, the agreement and both headline metrics."""
    agreement, name = metrics["agreement"], metrics["metric"]
    return (
        f"export {metrics['task']}: {metrics['run']} seed {metrics['seed']} -> {metrics['folder']}; "
        f"{agreement['disagree']} of {agreement['items']} items disagree (max |dp| "
        f"{agreement['max_abs_probability_difference']:.2g}); {name} evaluated "
        f"{metrics['evaluated'][name]:.4f}, re-scored {metrics['rescored'][name]:.4f}"
    )


__all__ = ["run", "ExportError"]
