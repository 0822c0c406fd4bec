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
input cut and NER windows finetune applies, ``tasks.common.models.alignment`` and ``clozeline.entities``; skops for a
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
from typing import Any

import torch
from transformers import (
    AutoConfig,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
    AutoTokenizer,
    TextClassificationPipeline,
    TokenClassificationPipeline,
    pipeline,
)
from transformers.pipelines import PIPELINE_REGISTRY

from clozeline import entities
from clozeline.baseline import BASELINE_FILE, load_baseline, predict_baseline
from clozeline.encoding import encode_document, encode_words
from clozeline.errors import ExportError
from tasks.common.models import alignment

#: The config.json key of the recipe, and the format version this module reads.
RECIPE_KEY, FORMAT = "clozeline", 1
TEXT_TASK, TOKEN_TASK = "clozeline-text-classification", "clozeline-token-classification"
#: Task kind (params.yaml ``tasks.<name>.kind``) -> the pipeline task that runs it.
PIPELINE_OF = {"classification": TEXT_TASK, "pair_classification": TEXT_TASK, "token_classification": TOKEN_TASK}
#: ``aggregation_strategy`` values the tagger takes (the stock names; a word is read at its first subword).
AGGREGATIONS = ("none", "simple", "first")
AUTO_CLASS = {TEXT_TASK: AutoModelForSequenceClassification, TOKEN_TASK: AutoModelForTokenClassification}


# ---------------------------------------------------------------- the recipe and the model's head


def recipe(config, folder: str | Path = "") -> dict[str, Any]:
    """The ``clozeline`` block of a model config, checked: ``kind``, ``pooling`` and the input cut
    (``max_seq_len_tokens``, ``truncation``, ``head_tokens``; token classification: ``window_tokens``,
    ``window_overlap_tokens``). Raises ``ExportError`` naming ``folder``."""
    block = getattr(config, RECIPE_KEY, None)
    where = f"{folder}: config.json" if folder else "config"
    if not isinstance(block, dict) or block.get("format") != FORMAT:
        raise ExportError(f"{where} has no {RECIPE_KEY!r} block of format {FORMAT} (not a clozeline export)")
    kind = block.get("kind")
    if kind not in PIPELINE_OF:
        raise ExportError(f"{where}: {RECIPE_KEY}.kind {kind!r} is not one of {sorted(PIPELINE_OF)}")
    needed = (("window_tokens", "window_overlap_tokens") if kind == "token_classification"
              else ("pooling", "max_seq_len_tokens", "truncation", "head_tokens"))  # fmt: skip
    missing = [key for key in needed if key not in block]
    if missing:
        raise ExportError(f"{where}: {RECIPE_KEY} block lacks {missing}")
    return block


def head_layer(model) -> torch.nn.Linear:
    """The linear layer the evaluated head is: ``classifier``, or ``classifier.out_proj`` (RoBERTa-style heads)."""
    head = model.classifier
    return head if isinstance(head, torch.nn.Linear) else head.out_proj


def encoder_inputs(model, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``input_ids`` and ``attention_mask``, plus ``token_type_ids`` only for an encoder with segment embeddings
    (BERT's two; ModernBERT and RoBERTa read a pair from its ``[SEP]`` alone), as the evaluated model did."""
    out = {"input_ids": inputs["input_ids"], "attention_mask": inputs["attention_mask"]}
    if "token_type_ids" in inputs and getattr(model.config, "type_vocab_size", 1) > 1:
        out["token_type_ids"] = inputs["token_type_ids"]
    return out


def logits(model, inputs: dict[str, torch.Tensor], pooling: str) -> torch.Tensor:
    """The evaluated model's logits: the encoder's last hidden states, pooled (``mean`` over the real tokens,
    ``cls`` the first position, ``token`` none), then the head's linear layer."""
    hidden = model.base_model(**encoder_inputs(model, inputs)).last_hidden_state
    if pooling == "mean":
        weights = inputs["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        hidden = (hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1.0)
    elif pooling == "cls":
        hidden = hidden[:, 0]
    return head_layer(model)(hidden)


# ---------------------------------------------------------------- the pipelines


class ClozelineTextClassificationPipeline(TextClassificationPipeline):
    """``text-classification`` with the evaluated model's cut and pooling (``clozeline`` block of config.json).

    Input and output as the stock pipeline: a string or ``{"text", "text_pair"}`` (or a list of them);
    ``[{"label", "score"}]``, or every label's probability with ``top_k=None``. Raises ``ValueError`` (one line) for an
    empty or all-whitespace text (either text of a pair), an input of another type, or an unknown keyword
    argument (``truncation`` is taken and changes nothing: the recipe's cut always applies)."""

    def _sanitize_parameters(self, function_to_apply=None, top_k="", truncation=None, **unknown):
        # truncation is taken as the stock pipeline takes it, and changes nothing: the recipe's cut always applies
        if unknown:
            raise ValueError(f"{TEXT_TASK}: unknown keyword argument(s) {sorted(unknown)}; it takes function_to_apply, "
                             "top_k and truncation (the evaluated model's cut always applies)")
        return super()._sanitize_parameters(function_to_apply=function_to_apply, top_k=top_k)

    def preprocess(self, inputs, **_ignored) -> dict[str, torch.Tensor]:
        if isinstance(inputs, list) and len(inputs) == 1 and isinstance(inputs[0], list) and len(inputs[0]) == 2:
            inputs = {"text": inputs[0][0], "text_pair": inputs[0][1]}
        texts = [inputs.get("text"), inputs.get("text_pair")] if isinstance(inputs, dict) else [inputs]
        if any(not isinstance(t, str) for t in texts):
            raise ValueError(f"{TEXT_TASK}: takes a string or {{'text', 'text_pair'}} (or a list of them), "
                             f"got {inputs!r:.80}")
        if any(not t.strip() for t in texts):
            raise ValueError(f"{TEXT_TASK}: empty input ({inputs!r}): there is no text to classify")
        return encode_document(self.tokenizer, inputs, recipe(self.model.config))

    def _forward(self, model_inputs):
        return {"logits": logits(self.model, model_inputs, recipe(self.model.config)["pooling"])}


class ClozelineTokenClassificationPipeline(TokenClassificationPipeline):
    """``token-classification`` on words, one tag per word (the tag at its first subword in its max-context
    window), read as the evaluation reads it (``clozeline.entities``: seqeval, strict IOB2).

    Input: a string, split into words by ``clozeline.entities.split_words`` (punctuation split off, character
    offsets kept), or a list of words with ``is_split_into_words=True`` (offsets into ``delimiter.join(words)``,
    ``delimiter`` default ``" "``). Output, as the stock pipeline's: ``aggregation_strategy="none"`` (default)
    one ``{entity, score, index, word, start, end}`` per word (every word, ``O`` included, unless named in
    ``ignore_labels``); ``"simple"`` or ``"first"`` (the same here: a word is read at its first subword) one
    ``{entity_group, score, word, start, end}`` per entity. Raises ``ValueError`` (one line) for an empty
    input, an unknown keyword argument, ``aggregation_strategy`` ``average``/``max`` (they pool subwords,
    which the evaluated tagger does not), or a string with ``is_split_into_words=True``."""

    def _sanitize_parameters(self, is_split_into_words: bool = False, delimiter: str | None = None,
                             aggregation_strategy=None, ignore_labels: list[str] | None = None, **unknown):  # fmt: skip
        if unknown:
            raise ValueError(f"{TOKEN_TASK}: unknown keyword argument(s) {sorted(unknown)}; it takes "
                             "is_split_into_words, delimiter, aggregation_strategy "
                             f"{list(AGGREGATIONS)}, ignore_labels")
        strategy = str(getattr(aggregation_strategy, "value", aggregation_strategy) or "none").lower()
        if strategy not in AGGREGATIONS:
            raise ValueError(f"{TOKEN_TASK}: aggregation_strategy {strategy!r} is not one of {list(AGGREGATIONS)} "
                             "(the evaluated tagger reads each word at its first subword; average/max pool subwords)")
        return ({"is_split_into_words": is_split_into_words, "delimiter": " " if delimiter is None else delimiter},
                {}, {"aggregation_strategy": strategy, "ignore_labels": list(ignore_labels or [])})  # fmt: skip

    def __call__(self, inputs, **kwargs):
        result = super().__call__(inputs, **kwargs)
        one_sentence = kwargs.get("is_split_into_words") and inputs and all(isinstance(w, str) for w in inputs)
        return result[0] if one_sentence and result and isinstance(result[0], list) else result

    def preprocess(self, sentence, is_split_into_words: bool = False, delimiter: str = " ", **_stock):
        # the stock pipeline is a ChunkPipeline: preprocess yields chunks; here one chunk holds all windows.
        # _stock: what the stock __call__ passes on (offset_mapping, tokenizer_params), unused here
        if is_split_into_words and isinstance(sentence, str):  # the stock pipeline refuses it too
            raise ValueError(f"{TOKEN_TASK}: is_split_into_words=True takes a list of words, got a string "
                             f"({sentence[:60]!r}); pass the string without it to have it split")
        if is_split_into_words or isinstance(sentence, list):
            words = [str(w) for w in sentence]
            text, offsets = delimiter.join(words), entities.joined_offsets(words, delimiter)
        else:
            text = str(sentence)
            words, offsets = entities.split_words(text)
        if not words:
            raise ValueError(f"{TOKEN_TASK}: empty input ({sentence!r}): there is no word to tag")
        encoded = encode_words(self.tokenizer, words, recipe(self.model.config))
        yield {**encoded, "text": text, "offsets": offsets, "is_last": True}

    def _forward(self, model_inputs):
        tensors = {k: model_inputs[k] for k in ("input_ids", "attention_mask")}
        passed = {k: model_inputs[k] for k in ("word_ids", "words", "text", "offsets", "is_last")}
        return {"logits": logits(self.model, tensors, "token"), **passed}

    def postprocess(self, all_outputs, aggregation_strategy: str = "none", ignore_labels: list[str] | None = None,
                    **_stock) -> list[dict[str, Any]]:  # fmt: skip
        out = all_outputs[0] if isinstance(all_outputs, list) else all_outputs
        scores = out["logits"].float()
        best = scores.argmax(dim=-1)
        prob = torch.softmax(scores, dim=-1).gather(-1, best.unsqueeze(-1)).squeeze(-1)
        windows = [(ids, list(zip(b.tolist(), p.tolist(), strict=True))[: len(ids)])
                   for ids, b, p in zip(out["word_ids"], best, prob, strict=True)]  # fmt: skip
        pairs = alignment.words_from_windows(windows, len(out["words"]))
        tags = [self.model.config.id2label[label] for label, _ in pairs]
        word_scores = [score for _, score in pairs]
        grouped = aggregation_strategy != "none"
        found = (entities.entity_groups(out["text"], out["offsets"], tags, word_scores) if grouped
                 else entities.word_records(out["words"], out["offsets"], tags, word_scores))  # fmt: skip
        return [r for r in found if r.get("entity_group", r.get("entity")) not in (ignore_labels or [])]  # as stock


PIPELINE_REGISTRY.register_pipeline(TEXT_TASK, pipeline_class=ClozelineTextClassificationPipeline,
                                    pt_model=AutoModelForSequenceClassification, type="text")  # fmt: skip
PIPELINE_REGISTRY.register_pipeline(TOKEN_TASK, pipeline_class=ClozelineTokenClassificationPipeline,
                                    pt_model=AutoModelForTokenClassification, type="text")  # fmt: skip


# ---------------------------------------------------------------- loading a folder


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
        return {"doc_id": record["doc_id"], "pred": [t["entity"] for t in tags], "probs": [t["score"] for t in tags],
                "seconds": time.perf_counter() - start, "words": [t["word"] for t in tags],
                "offsets": [[t["start"], t["end"]] for t in tags]}  # fmt: skip
    inputs = {"text": record["text"], "text_pair": record["text_pair"]} if "text_pair" in record else record["text"]
    ranked = pipe(inputs, top_k=None)  # every label, most probable first
    seconds, probs = time.perf_counter() - start, {s["label"]: s["score"] for s in ranked}
    return {"doc_id": record["doc_id"], "pred": ranked[0]["label"], "seconds": seconds,
            "probs": {name: probs[name] for _, name in sorted(pipe.model.config.id2label.items())}}


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
    parser.add_argument("--input", type=Path, required=True, help="JSONL: {doc_id, text[, text_pair]} or {doc_id, words}")
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
    batched = {} if baseline or not args.batch_size else {str(args.batch_size): batch_seconds(pipe, records, args.batch_size)}
    timing = {"load_seconds": loaded, "threads": torch.get_num_threads(), "batch": batched}
    lines = [json.dumps(o, ensure_ascii=False) for o in outputs] + [json.dumps({"timing": timing})]
    args.output.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
