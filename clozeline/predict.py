"""Run an exported clozeline model exactly as the pipeline evaluated it.

An export folder (``models/export/<task>/``) is a standard Hugging Face model folder: ``config.json`` with
``id2label``/``label2id``, ``model.safetensors`` and the tokenizer, loaded by
``AutoModelForSequenceClassification`` or ``AutoModelForTokenClassification`` and ``AutoTokenizer``. Three
things the evaluated model does are not what those classes' ``forward`` or the stock pipelines do, so
``config.json`` records them under ``"clozeline"`` and this module applies them:

- pooling: a classifier reads the *mean* of the last hidden states over the real tokens (``mean``) or the
  ``[CLS]`` vector (``cls``), then one linear layer (``classifier``, or ``classifier.out_proj`` where the
  architecture's head has a dense layer first). ``BertForSequenceClassification.forward`` would pool ``[CLS]``
  through a pooler and ``ModernBertForSequenceClassification.forward`` adds a dense + norm head: neither is the
  evaluated model, so ``transformers.pipeline("text-classification", ...)`` does not reproduce it;
- truncation: ``head_tail`` keeps the first ``head_tokens`` and the last tokens of a long document (Sun et al.
  2019), ``head`` the first ones; a pair ``[CLS] a [SEP] b [SEP]`` is cut longest first; the stock pipeline
  cuts the head only;
- token classification: words are tokenized as given (``is_split_into_words``), long sentences become
  overlapping windows, and each word takes the tag and probability at its *first* subword in the window where
  it has the most context; a word without subwords is read as ``[UNK]``. A string is split into words with
  punctuation split off, and tags are read into entities as the evaluation reads them (seqeval, strict
  IOB2): ``clozeline.entities``.

Usage (importing this module registers the two pipeline tasks with transformers)::

    import clozeline.predict
    from transformers import pipeline

    classify = pipeline("clozeline-text-classification", model="models/export/cls")
    classify("Shares in the chip maker rose ...")          # [{'label': 'business', 'score': 0.97}]
    classify({"text": "a premise", "text_pair": "a hypothesis"})   # a pair task
    tag = pipeline("clozeline-token-classification", model="models/export/ner")
    tag("John visited Paris.")     # per word: [{'entity': 'B-person', 'score': .., 'index': 0, 'word': 'John',
                                   #             'start': 0, 'end': 4}, ..., {'word': '.', 'start': 18, ...}]
    tag("John visited Paris.", aggregation_strategy="simple")   # per entity: [{'entity_group': 'person',
                                   #   'score': .., 'word': 'John', 'start': 0, 'end': 4}, ...]
    tag(["John", "visited", "Paris", "."], is_split_into_words=True)

Command line (one JSON object per line: ``{"doc_id", "text"}``, ``{"doc_id", "text", "text_pair"}`` or
``{"doc_id", "words"}``)::

    python -m clozeline.predict models/export/cls --input docs.jsonl --output predictions.jsonl

A baseline export (``model.skops`` + ``baseline.json``: the TF-IDF + logistic-regression baseline, exported
when it is the best run on dev) runs through the same command line; ``clozeline.baseline.load_baseline`` loads it
with skops, trusting scikit-learn, NumPy and SciPy types only (never pickle).

This module needs torch, transformers, tokenizers and seqeval (and of this package ``clozeline.encoding``, the
input cut and NER windows finetune applies, ``clozeline.alignment`` and ``clozeline.entities``; skops for a
baseline, ``clozeline.baseline``). A folder that does not load, or whose labels or recipe are inconsistent,
raises ``ExportError`` with a one-line message naming the folder; an empty input or an argument the pipeline
does not take raises ``ValueError`` with one line.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
from transformers import AutoConfig, AutoTokenizer, pipeline

from clozeline.baseline import BASELINE_FILE, load_baseline, predict_baseline
from clozeline.errors import ExportError
from clozeline.pipelines import ClozelineTokenClassificationPipeline
from clozeline.recipe import AUTO_CLASS, PIPELINE_OF, head_layer, recipe


def load(folder: str | Path, labels: list[str] | None = None):
    """The pipeline of the export in ``folder`` (``clozeline-text-classification`` or
    ``clozeline-token-classification``, per its recipe), loaded with the standard Auto classes from safetensors.

    ``labels``: the label names in id order the caller expects; a folder whose ``id2label`` holds other names
    (or whose head has another size) is an error. Raises ``ExportError`` with one line naming the folder."""
    folder = Path(folder)
    try:
        config = AutoConfig.from_pretrained(folder)
        block = recipe(config, folder)
        task = PIPELINE_OF[block["kind"]]
        model = AUTO_CLASS[task].from_pretrained(folder, use_safetensors=True)
        tokenizer = AutoTokenizer.from_pretrained(folder)
    except ExportError:
        raise
    except (OSError, ValueError, KeyError, TypeError, RuntimeError) as err:
        why = " ".join(str(err).split())[:300] if folder.is_dir() else "no such folder"  # not the hub's repo-id rule
        raise ExportError(f"{folder}: does not load as a clozeline export: {why}") from err
    check_labels(model, folder, labels)
    return pipeline(task, model=model, tokenizer=tokenizer)


def check_labels(model, folder: Path, labels: list[str] | None) -> None:
    """``id2label`` covers every class of the head, agrees with ``label2id``, and (with ``labels``) holds the
    same names as the task. Raises ``ExportError`` naming the folder."""
    config, n_out = model.config, head_layer(model).out_features
    names = [config.id2label.get(i) for i in range(n_out)]
    if None in names or len(config.id2label) != n_out:
        raise ExportError(f"{folder}: id2label has {len(config.id2label)} labels, the head {n_out} outputs")
    if any(config.label2id.get(name) != i for i, name in enumerate(names)):
        raise ExportError(f"{folder}: label2id does not invert id2label")
    if labels is not None and sorted(names) != sorted(labels):
        raise ExportError(f"{folder}: labels {names} are not the task's {list(labels)}")


# ---------------------------------------------------------------- command line


def predict_records(pipe, records: list[dict]) -> list[dict]:
    """One output per record: ``doc_id``, ``pred`` (a label, or a tag per word), ``probs`` (a classifier: every
    label's probability in id order; a tagger: its tag's probability per word, and the ``words`` with their
    ``offsets``), ``seconds`` (this record's pipeline call: tokenization, forward, decoding). Raises ``ValueError``
    naming the record's position (from 1) and ``doc_id``."""
    out = []
    for position, record in enumerate(records, start=1):
        try:
            out.append(predict_record(pipe, record))
        except ValueError as err:
            raise ValueError(f"record {position} (doc_id {record.get('doc_id')!r}): {err}") from err
    return out


def predict_record(pipe, record: dict) -> dict:
    """One record's output (``predict_records``)."""
    start, split = time.perf_counter(), "words" in record
    if split or isinstance(pipe, ClozelineTokenClassificationPipeline):
        tags = pipe(list(record["words"]), is_split_into_words=True) if split else pipe(record["text"])
        return {
            "doc_id": record["doc_id"],
            "pred": [t["entity"] for t in tags],
            "probs": [t["score"] for t in tags],
            "seconds": time.perf_counter() - start,
            "words": [t["word"] for t in tags],
            "offsets": [[t["start"], t["end"]] for t in tags],
        }
    inputs = {"text": record["text"], "text_pair": record["text_pair"]} if "text_pair" in record else record["text"]
    ranked = pipe(inputs, top_k=None)  # every label, most probable first
    seconds, probs = time.perf_counter() - start, {s["label"]: s["score"] for s in ranked}
    return {
        "doc_id": record["doc_id"],
        "pred": ranked[0]["label"],
        "seconds": seconds,
        "probs": {name: probs[name] for _, name in sorted(pipe.model.config.id2label.items())},
    }


def batch_seconds(pipe, records: list[dict], batch_size: int) -> float | None:
    """Wall time of classifying every record at ``batch_size`` documents per forward pass (padded; ``None`` for
    a tagger, whose windows are batched per sentence)."""
    if not records or isinstance(pipe, ClozelineTokenClassificationPipeline):
        return None
    inputs = [{"text": r["text"], "text_pair": r["text_pair"]} if "text_pair" in r else r["text"] for r in records]
    start = time.perf_counter()
    pipe(inputs, batch_size=batch_size)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m clozeline.predict", description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="an export folder (models/export/<task>)")
    parser.add_argument(
        "--input", type=Path, required=True, help="JSONL: {doc_id, text[, text_pair]} or {doc_id, words}"
    )
    parser.add_argument("--output", type=Path, required=True, help="JSONL: {doc_id, pred, probs, seconds}")
    parser.add_argument("--labels", type=Path, help="JSON list of the label names the task expects (checked)")
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's)")
    parser.add_argument("--batch-size", type=int, help="also time a pass at this many documents per batch")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads or torch.get_num_threads())
    started = time.perf_counter()
    labels = json.loads(args.labels.read_text(encoding="utf-8")) if args.labels else None
    baseline = (args.folder / BASELINE_FILE).is_file()
    try:
        pipe = load_baseline(args.folder, labels) if baseline else load(args.folder, labels)
        loaded = time.perf_counter() - started
        records = [json.loads(line) for line in args.input.read_text(encoding="utf-8").splitlines() if line.strip()]
        outputs = predict_baseline(*pipe, records, args.folder) if baseline else predict_records(pipe, records)
    except (ValueError, FileNotFoundError) as err:  # an ExportError names the folder; the others are --input's
        print(f"clozeline.predict: {'' if isinstance(err, ExportError) else f'{args.input}: '}{err}", file=sys.stderr)
        return 1
    batched = (
        {} if baseline or not args.batch_size else {str(args.batch_size): batch_seconds(pipe, records, args.batch_size)}
    )
    timing = {"load_seconds": loaded, "threads": torch.get_num_threads(), "batch": batched}
    lines = [json.dumps(o, ensure_ascii=False) for o in outputs] + [json.dumps({"timing": timing})]
    args.output.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
