"""A baseline export: the TF-IDF + logistic-regression baseline in skops format (``model.skops`` +
``baseline.json``), shipped when it is the best run on dev. Loaded trusting scikit-learn, NumPy, SciPy and
builtin types only: never pickle. ``python -m clozeline.predict`` runs it like an encoder export."""

from __future__ import annotations

import json
import time
from pathlib import Path

from clozeline.predict import ExportError

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
        raise ExportError(f"{folder}: does not load as a clozeline baseline export: {' '.join(str(err).split())[:300]}") from err
    unsafe = [t for t in types if not t.startswith(SAFE_PREFIXES)]
    if unsafe:
        raise ExportError(f"{folder}: {BASELINE_FILE} holds types outside scikit-learn, NumPy and SciPy: {unsafe[:3]}")
    if labels is not None and sorted(record["labels"]) != sorted(labels):
        raise ExportError(f"{folder}: labels {record['labels']} are not the task's {list(labels)}")
    return skops.io.load(folder / BASELINE_FILE, trusted=types), record


def predict_baseline(model, record: dict, records: list[dict]) -> list[dict]:
    """``predict_records`` for a baseline export: the full text (a pair joined by a blank line, as ingest
    writes it), the predicted label and every label's probability (0 for a label absent from train)."""
    names, classes, out = record["labels"], record["classes"], []
    for item in records:
        text = f"{item['text']}\n\n{item['text_pair']}" if "text_pair" in item else item["text"]
        start = time.perf_counter()
        proba, pred = model.predict_proba([text])[0], int(model.predict([text])[0])
        seconds = time.perf_counter() - start
        probs = dict.fromkeys(names, 0.0) | {names[c]: float(p) for c, p in zip(classes, proba, strict=True)}
        out.append({"doc_id": item["doc_id"], "pred": names[pred], "probs": probs, "seconds": seconds})
    return out
