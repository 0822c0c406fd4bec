"""A baseline export: the TF-IDF + logistic-regression baseline in skops format (``model.skops`` +
``baseline.json``), shipped when it is the best run on dev. Loaded trusting scikit-learn, NumPy, SciPy and
builtin types only: never pickle. ``python -m clozeline.predict`` runs it like an encoder export."""

from __future__ import annotations

import json
import time
from pathlib import Path

from clozeline.errors import ExportError
from clozeline.truncation import cut, cut_pair

BASELINE_FILE, BASELINE_RECORD = "model.skops", "baseline.json"
#: The only types a baseline file may hold: scikit-learn, NumPy, SciPy and builtins (skops refuses the rest).
SAFE_PREFIXES = ("sklearn.", "numpy.", "scipy.", "builtins.")


def load_baseline(folder: str | Path, labels: list[str] | None = None):
    """``(scikit-learn pipeline, baseline.json)`` of a baseline export (TF-IDF + logistic regression in skops
    format). Raises ``ExportError`` naming the folder when it does not load, holds a type outside
    ``SAFE_PREFIXES``, or (with ``labels``) has other label names."""
    import skops.io

    folder = Path(folder)
    try:
        record = json.loads((folder / BASELINE_RECORD).read_text(encoding="utf-8"))
        types = skops.io.get_untrusted_types(file=folder / BASELINE_FILE)
    except (OSError, ValueError, KeyError) as err:
        raise ExportError(
            f"{folder}: does not load as a clozeline baseline export: {' '.join(str(err).split())[:300]}"
        ) from err
    unsafe = [t for t in types if not t.startswith(SAFE_PREFIXES)]
    if unsafe:
        raise ExportError(f"{folder}: {BASELINE_FILE} holds types outside scikit-learn, NumPy and SciPy: {unsafe[:3]}")
    if labels is not None and sorted(record["labels"]) != sorted(labels):
        raise ExportError(f"{folder}: labels {record['labels']} are not the task's {list(labels)}")
    return skops.io.load(folder / BASELINE_FILE, trusted=types), record


def predict_baseline(model, record: dict, records: list[dict], folder: str | Path | None = None) -> list[dict]:
    """``predict_records`` for a baseline export: the predicted label and every label's probability (0 for a
    label absent from train) from the text it was fitted on: the full text (a pair joined by a blank line, as
    ingest writes it), or, when ``baseline.json`` has a ``cut``, the tokens an arm reads (``_cut_reader``, with
    the tokenizer saved in ``folder``)."""
    names, classes, out = record["labels"], record["classes"], []
    reader = _cut_reader(record, folder)
    for item in records:
        text = f"{item['text']}\n\n{item['text_pair']}" if "text_pair" in item else item["text"]
        text = reader(item) if reader else text
        start = time.perf_counter()
        proba, pred = model.predict_proba([text])[0], int(model.predict([text])[0])
        seconds = time.perf_counter() - start
        probs = dict.fromkeys(names, 0.0) | {names[c]: float(p) for c, p in zip(classes, proba, strict=True)}
        out.append({"doc_id": item["doc_id"], "pred": names[pred], "probs": probs, "seconds": seconds})
    return out


def _cut_reader(record: dict, folder: str | Path | None):
    """None for a full-text baseline; else a function ``item -> text``: the item encoded by the tokenizer in
    ``folder`` (a pair as a pair), cut as the arms cut it (``clozeline.truncation``) and decoded without
    special tokens, as ``tasks.finetune.baselines.tfidf.arm_inputs`` built the baseline's train text. Raises
    ``ExportError`` when the cut needs a folder and none is given."""
    cut_cfg = record.get("cut")
    if not cut_cfg:
        return None
    if folder is None:
        raise ExportError("baseline.json has a cut: predict_baseline needs the export folder (its tokenizer)")
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    size = cut_cfg["max_seq_len_tokens"]

    def read(item: dict) -> str:
        if "text_pair" in item:
            enc = tokenizer(item["text"], item["text_pair"], return_token_type_ids=True)
            ids, _ = cut_pair(enc["input_ids"], enc["token_type_ids"], size)
        else:
            ids = cut(tokenizer(item["text"])["input_ids"], size, cut_cfg["truncation"], cut_cfg["head_tokens"])
        return tokenizer.decode(ids, skip_special_tokens=True)

    return read
